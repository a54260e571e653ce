"""Where a team's undelivered entitlement goes: the borrowing run of ``bench_teams`` on one Philly
window, with the team's shortfall (min(demand, nominal) − min(used, nominal), integrated over
time) split by the state of the fleet and the cohort while it lasted.

The simulator's ``entitled_delivered`` says how much of its entitlement a team got; this says
why the rest was not delivered, so that a reader can tell a policy's fault from a limit of the
workload. Each stretch of shortfall between two events goes to one cause, judged by the team's
smallest pending job (its size in GPU-equivalents, all replicas):

* ``nothing pending``: the shortfall is in work that is already leaving or restarting;
* ``free GPUs ≥ the job``: the fleet had the GPUs, not in the shape the job needs (a gang's
  whole nodes, fragmentation) or reclaim's victims were still checkpointing;
* ``within quota, lendable ≥ the job``: the job fits the team's quota (reclaim could make the
  room); lendable = the team's quota left plus the quota the other teams leave idle, what the
  cohort could give the job with every other team's borrowed work reclaimed;
* ``straddles, lendable ≥ the job``: the job takes the team above its quota, and the cohort
  could cover it, but only by taking lenders below the claimant's share (``gives_back``);
* ``lendable < the job``: it could run only by evicting other teams' work *within* their
  quota, which quotas forbid. The entitlement is not deliverable in the job sizes the team
  asked for. ``of the deliverable`` is the delivered share with these stretches left out of
  what was owed.

A measurement hook, not policy: it wraps ``JobLifecycle.team_usage`` (the integral the summary
reads) and changes no decision.

Usage: ``GPUFLEET_DATA=../shared/data python benchmarks/bench_team_shortfall.py --start-day 49
--team e13805`` (default: the worst team of the run).
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from gpufleet.config import default_scenario
from gpufleet.queueing.teams.settings import TeamsSettings
from gpufleet.sim.jobs import JobLifecycle

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_teams  # the same window, quotas and fleet as the teams benchmark

CAUSES = ("nothing pending", "free GPUs ≥ the job", "within quota, lendable ≥ the job",
          "straddles, lendable ≥ the job", "lendable < the job")


def cause(life: JobLifecycle, team: str) -> str:
    """The cause of ``team``'s shortfall in the state ``life`` holds now (module docstring)."""
    sizes = [life.job_milli(life.jobs[i]) for _, i in life.pending
             if life.jobs[i].spec.tenant == team]
    if not sizes:
        return CAUSES[0]
    job = min(sizes)
    nominal = life._nominal
    free = sum(n.gpus * 1000 - n.alloc_milli for n in life.cloud.nodes.values()
               if n.state == "ready")
    if free >= job:
        return CAUSES[1]
    used = life.team_milli
    # what the cohort's quota could give the job if every other team's borrowed work were
    # reclaimed: the team's own quota left plus the quota the others leave idle (one cohort)
    idle = sum(max(0, q - used.get(t, 0)) for t, q in nominal.items() if t != team)
    mine = used.get(team, 0)
    lendable = nominal[team] - mine + idle
    if lendable < job:
        return CAUSES[4]
    return CAUSES[2] if mine + job <= nominal[team] else CAUSES[3]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--start-day", type=float, default=35.0)
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--team", default=None, help="default: the run's worst team")
    a = ap.parse_args()
    console = Console(width=150)
    jobs = bench_teams.philly_window(console, a.start_day, a.days)
    if not jobs:
        return 0
    quotas = bench_teams.median_demand(jobs, a.days * bench_teams.DAY)
    q = bench_teams.covering_quantile(jobs, sum(quotas.values()), 0.8)
    sc = default_scenario().model_copy(update={
        "name": "teams-fixed", "autoscaling": False, "spot": False, "gpu_mtbf_hours": None,
        "fixed_size_quantile": q, "deadline_policy": None,
        "teams": TeamsSettings.model_validate({"queues": [
            {"name": t, "gpus": quotas[t], "cohort": "philly"} for t in sorted(quotas)]})})
    short: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    owed: dict[str, float] = defaultdict(float)  # GPU-hours of min(demand, nominal)
    inner = JobLifecycle.team_usage

    def team_usage(self: JobLifecycle, j: Any = None, sign: int = 0) -> None:
        dt = self.now - self._team_t
        if dt > 0:
            for team, nominal in self._nominal.items():
                due = min(self.team_demand.get(team, 0), nominal)
                owed[team] += due * dt / 1000 / 3600
                gap = due - min(self.team_milli.get(team, 0), nominal)
                if gap > 0:
                    short[team][cause(self, team)] += gap * dt / 1000 / 3600
        inner(self, j, sign)

    JobLifecycle.team_usage = team_usage  # type: ignore[method-assign]
    try:
        s = bench_teams.run(sc, jobs, "borrowing", console, a.days * bench_teams.DAY)
    finally:
        JobLifecycle.team_usage = inner  # type: ignore[method-assign]
    per = s["teams"]["per_team"]
    asked = {t: v["entitled_delivered"] for t, v in per.items()
             if v.get("entitled_delivered") is not None}
    teams = [a.team] if a.team else sorted(asked, key=lambda t: asked[t])[:3]
    t = Table(title=f"entitlement not delivered, GPU-hours by cause (Philly days "
                    f"[{a.start_day:g}, {a.start_day + a.days:g}), borrowing)")
    for col in ("team", "quota GPUs", "delivered", "of the deliverable", *CAUSES):
        t.add_column(col, justify="left" if col == "team" else "right")
    for team in teams:
        total = sum(short[team].values()) or 1.0
        deliverable = owed[team] - short[team][CAUSES[4]]
        got = owed[team] - total if short[team] else owed[team]
        t.add_row(team, f"{quotas.get(team, 0):g}", f"{asked.get(team, 0):.3f}",
                  f"{got / deliverable:.3f}" if deliverable > 0 else "-",
                  *(f"{short[team][c]:.1f} ({short[team][c] / total:.0%})" for c in CAUSES))
    console.print(t)
    return 0


if __name__ == "__main__":
    sys.exit(main())
