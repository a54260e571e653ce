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

A measurement hook, not policy: it wraps the run's ``TeamBooks.team_usage`` (``sim.team_books``:
the integrals the summary reads, which give the delivered and owed totals here) and changes no
decision.

Usage: ``GPUFLEET_DATA=../shared/data python benchmarks/bench_team_shortfall.py --start-day 49
--team e13805`` (default: the run's three worst teams).
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from gpufleet.queueing.teams.quota import QuotaBook
from gpufleet.sim.jobs import JobLifecycle
from gpufleet.sim.runner import Simulation

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_teams  # the same window, quotas and fleet as the teams benchmark

CAUSES = ("nothing pending", "free GPUs ≥ the job", "within quota, lendable ≥ the job",
          "straddles, lendable ≥ the job", "lendable < the job")


class Causes:
    """The state that judges every team's shortfall at one moment, gathered once for all
    teams: each team's smallest pending job, the fleet's free GPUs, the quota book."""

    def __init__(self, life: JobLifecycle) -> None:
        self.smallest: dict[str, int] = {}
        for _, i in life.pending:
            j = life.jobs[i]
            milli = life.team_books.job_milli(j)
            team = j.spec.tenant
            self.smallest[team] = min(milli, self.smallest.get(team, milli))
        self.free = sum(n.gpus * 1000 - n.alloc_milli for n in life.cloud.nodes.values()
                        if n.state == "ready")
        books = life.team_books
        assert books.quotas is not None
        self.book = QuotaBook(books.quotas, books.team_milli)

    def of(self, team: str) -> str:
        """The cause of ``team``'s shortfall (module docstring)."""
        job = self.smallest.get(team)
        if job is None:
            return CAUSES[0]
        if self.free >= job:
            return CAUSES[1]
        # what the quotas could give the job with every other team's borrowed work reclaimed:
        # its cohort's room plus what the cohort's other members borrow (its own quota left
        # without a cohort)
        cohort = self.book.teams[team].cohort
        lendable = self.book.teams[team].nominal_milli - self.book.usage[team]
        if cohort is not None:
            lendable = self.book.cohort_room(cohort) + sum(
                self.book.borrowed(m.name) for m in self.book.members(cohort) if m.name != team)
        if lendable < job:
            return CAUSES[4]
        return CAUSES[2] if self.book.reclaim_over(team, job) == 0 else CAUSES[3]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--start-day", type=float, default=35.0)
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--team", default=None, help="default: the run's three worst teams")
    a = ap.parse_args()
    console = Console(width=150)
    jobs = bench_teams.philly_window(console, a.start_day, a.days)
    if not jobs:
        return 0
    quotas = bench_teams.median_demand(jobs, a.days * bench_teams.DAY)
    q = bench_teams.covering_quantile(jobs, sum(quotas.values()), 0.8)
    sc = bench_teams.quota_scenarios(quotas, q)["borrowing"]
    short: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))  # GPU-hours
    sim = Simulation(sc, 0, jobs)
    life = sim.sim.life
    books = life.team_books  # the summary's integrals: min(demand, nominal), min(used, nominal)
    inner = books.team_usage

    def team_usage(j: Any = None, sign: int = 0) -> None:
        dt = books.now - books._team_t
        if dt > 0:
            causes = None
            for q in books.quotas or ():
                gap = (min(books.team_demand.get(q.name, 0), q.nominal_milli)
                       - min(books.team_milli.get(q.name, 0), q.nominal_milli))
                if gap > 0:
                    causes = causes or Causes(life)
                    short[q.name][causes.of(q.name)] += gap * dt / 1000 / 3600
        inner(j, sign)

    books.team_usage = team_usage  # type: ignore[method-assign]
    sim.run()
    owed = {t: s / 3600 for t, s in books.team_owed_s.items() if s > 0}
    got = {t: books.team_delivered_s.get(t, 0.0) / 3600 for t in owed}
    teams = [a.team] if a.team else sorted(owed, key=lambda t: got[t] / owed[t])[:3]
    t = Table(title=f"entitlement not delivered, GPU-hours by cause (Philly days "
                    f"[{a.start_day:g}, {a.start_day + a.days:g}), borrowing)")
    for col in ("team", "quota GPUs", "delivered", "of the deliverable", *CAUSES):
        t.add_column(col, justify="left" if col == "team" else "right")
    for team in teams:
        total = sum(short[team].values()) or 1.0
        deliverable = owed.get(team, 0.0) - short[team][CAUSES[4]]
        t.add_row(team, f"{quotas.get(team, 0):g}",
                  f"{got[team] / owed[team]:.3f}" if team in owed else "-",
                  f"{got.get(team, 0.0) / deliverable:.3f}" if deliverable > 0 else "-",
                  *(f"{short[team][c]:.1f} ({short[team][c] / total:.0%})" for c in CAUSES))
    console.print(t)
    return 0


if __name__ == "__main__":
    sys.exit(main())
