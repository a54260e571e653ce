"""Teams on Philly: quotas with borrowing vs no quotas vs strict quotas, and budgets at 70 %.

Philly's virtual clusters (the trace's ``cluster`` column, the simulator's tenant) are the
teams. The full trace takes 10+ minutes per scenario here, so the run takes a window: the jobs
submitted in ``[start_day, start_day + days)`` of the trace, their submit times shifted to start
at 0 (so the window lies in the first calendar month of the simulated clock and a monthly
budget covers it whole). Every job of the window runs to completion.

Part 1, quotas (a fixed on-demand fleet; gpufleet's levers otherwise on). Each team's
nominal quota is its **median demand**: the time-weighted median, over the window, of the GPUs
its jobs would hold if each ran from its submit time for its duration. The fleet is sized at
the lowest quantile of the window's concurrent GPU demand, from ``--fleet-quantile`` up, that
covers the **sum of the quotas**: a quota is a guarantee, and a platform that sells more
guarantees than it has GPUs cannot deliver them whatever its scheduler does (with
``--oversold`` the fleet is the plain ``--fleet-quantile`` one, smaller than the quotas on
Philly, the previous table's setting). Three runs of one workload:

* ``no quotas``: FIFO/priority only (``enforce_quotas: false`` — quotas measured, not acted on);
* ``borrowing``: every team in one cohort, no borrowing limit (idle quota lent, reclaimed);
* ``strict``: the same quotas, no cohort — a team never exceeds its quota.

Figures (``sim.summary``): utilisation (allocated / provisioned GPU-time, until the last job
ends — on a fixed fleet a long tail of a few jobs lowers it: one 23-day 1-GPU job started a
few days later moves it by points); utilisation in the window (the same over the report's
samples inside the submission window, one horizon for every run); utilisation while jobs
wait (over the samples at which some job is pending: capacity left idle while work waits);
evictions (requeues of any cause: each costs a restart); the worst team's
``entitled_delivered`` (∫ min(used, quota) / ∫ min(demand, quota): the share of its entitlement
delivered while it had demand); Jain's index over those ratios; mean JCT slowdown (JCT /
duration); mean queueing delay; jobs that never finished.

Part 2, budgets (the default autoscaled gpufleet fleet, spot on). A run with budget-only
queues and no budget gives each team's spend S; then every team gets a monthly budget of
70 % × S with action ``hold`` (and again with ``hold-and-drain`` and ``spot-only``). Figures
per run: the largest
overspend over any team in hours of that team's spend rate when its budget's action first
applied, total spend, and the JCT cost: mean JCT of the budgeted teams' jobs against the
no-budget run.

Usage:

    GPUFLEET_DATA=/work/shared/data .venv/bin/python benchmarks/bench_teams.py \\
        [--start-day 35] [--days 7] [--fleet-quantile 0.8] [--oversold] [--skip-budgets]
        [--json PATH]

Without the Philly trace it prints why and exits 0 (``make bench`` runs every script).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from gpufleet.config import Scenario, default_scenario
from gpufleet.control.sizing import demand_quantile_milli
from gpufleet.datapaths import data_dir
from gpufleet.queueing.teams.settings import TeamsSettings
from gpufleet.sim.books import Series
from gpufleet.sim.runner import Simulation
from gpufleet.traces.jobs import JobSpec, load_jobs

DAY = 86400.0


def window(jobs: list[JobSpec], start_day: float, days: float) -> list[JobSpec]:
    """Jobs submitted in the window, shifted so that the window starts at t = 0."""
    lo, hi = start_day * DAY, (start_day + days) * DAY
    return [replace(j, submit_s=j.submit_s - lo) for j in jobs if lo <= j.submit_s < hi]


def philly_window(console: Console, start_day: float, days: float) -> list[JobSpec]:
    """The Philly jobs submitted in the window; [] (said why on ``console``) without the shared
    data or with no job in it."""
    base = data_dir(required=False)
    path = None if base is None else base / "philly" / "philly_jobs.csv"
    if path is None or not path.exists():
        console.print(f"skipped: the Philly trace is not at {path or 'the shared data folder'} "
                      "(set GPUFLEET_DATA; see data/README.md)")
        return []
    jobs = window(load_jobs(path), start_day, days)
    if not jobs:
        console.print("skipped: no Philly job in the window")
    return jobs


def median_demand(jobs: list[JobSpec], horizon_s: float) -> dict[str, float]:
    """Per team, the time-weighted median over [0, horizon) of the GPUs its jobs would hold if
    each ran alone from submit for its duration (module docstring)."""
    events: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for j in jobs:
        g = j.request.num_gpu * j.replicas
        events[j.tenant] += [(j.submit_s, g), (j.submit_s + j.duration_s, -g)]
    out = {}
    for team, ev in events.items():
        ev.sort()
        level, t, spans = 0, 0.0, defaultdict(float)
        for at, d in ev:
            at = min(at, horizon_s)
            spans[level] += at - t
            t, level = at, level + d
        spans[level] += max(0.0, horizon_s - t)
        half, acc = horizon_s / 2, 0.0
        for lv in sorted(spans):
            acc += spans[lv]
            if acc >= half:
                out[team] = float(lv)
                break
    return out


def run(sc: Scenario, jobs: list[JobSpec], label: str, console: Console,
        window_s: float | None = None) -> dict[str, Any]:
    t0 = time.perf_counter()
    sim = Simulation(sc, 0, jobs)
    s = sim.run()
    # requeues of any cause (reclaim, priority preemption, budget drain; no spot or failures on
    # the quota runs' fleet): each costs its job a restart
    s["evictions"] = sum(j.interruptions for j in sim.sim.jobs)
    console.print(f"  {label}: {time.perf_counter() - t0:.0f} s wall, "
                  f"{s['jobs_finished']:,}/{s['jobs_total']:,} jobs finished", highlight=False)
    # utilisation while some job waits (the report's samples, evenly spaced): GPUs idle then
    # are capacity the policy left unused; idle while nothing waits is nobody's to use
    ser = sim.sim.series
    s["utilization_while_waiting"] = sampled_utilization(
        ser, [i for i, p in enumerate(ser.pending) if p > 0])
    if window_s is not None:  # the same over the submission window: one horizon for every run
        s["utilization_window"] = sampled_utilization(
            ser, [i for i, t in enumerate(ser.t) if t < window_s])
    return s


def sampled_utilization(ser: Series, rows: list[int]) -> float | None:
    """Allocated / provisioned GPUs over the report's samples ``rows``; None when none had a
    GPU."""
    prov = sum(ser.od_gpus[i] + ser.spot_gpus[i] for i in rows)
    return sum(ser.alloc_gpus[i] for i in rows) / prov if prov else None


def covering_quantile(jobs: list[JobSpec], gpus: float, lo: float) -> float:
    """The lowest quantile ≥ ``lo`` (to 0.001) of concurrent demand that is ≥ ``gpus`` GPUs
    (1.0, the peak, when none is lower)."""
    need = gpus * 1000
    if demand_quantile_milli(jobs, False, lo) >= need:
        return lo
    a, b = lo, 1.0
    while b - a > 1e-3:
        mid = (a + b) / 2
        a, b = (a, mid) if demand_quantile_milli(jobs, False, mid) >= need else (mid, b)
    return b


def quota_scenarios(quotas: dict[str, float], quantile: float) -> dict[str, Scenario]:
    """The quota runs (module docstring) on the fixed on-demand fleet sized at ``quantile``:
    no quotas, borrowing (every team in one cohort), strict."""
    base = default_scenario().model_copy(update={
        "name": "teams-fixed", "autoscaling": False, "spot": False, "gpu_mtbf_hours": None,
        "fixed_size_quantile": quantile, "deadline_policy": None})
    teams = sorted(quotas)
    variants = {
        "no quotas": {"enforce_quotas": False, "queues": [
            {"name": t, "gpus": quotas[t]} for t in teams]},
        "borrowing": {"queues": [{"name": t, "gpus": quotas[t], "cohort": "philly"}
                                 for t in teams]},
        "strict": {"queues": [{"name": t, "gpus": quotas[t]} for t in teams]},
    }
    return {label: base.model_copy(update={"teams": TeamsSettings.model_validate(spec)})
            for label, spec in variants.items()}


def quota_part(jobs: list[JobSpec], quotas: dict[str, float], quantile: float,
               console: Console, window_s: float) -> dict[str, dict[str, Any]]:
    return {label: run(sc, jobs, label, console, window_s)
            for label, sc in quota_scenarios(quotas, quantile).items()}


def budget_part(jobs: list[JobSpec], console: Console) -> dict[str, dict[str, Any]]:
    base = default_scenario().model_copy(update={"name": "teams-budget",
                                                 "gpu_mtbf_hours": None})
    teams = sorted({j.tenant for j in jobs})
    free = run(base.model_copy(update={"teams": TeamsSettings.model_validate(
        {"queues": [{"name": t} for t in teams]})}), jobs, "no budget", console)
    spend = {t: free["teams"]["per_team"][t]["spend_usd"] for t in teams}
    out = {"no budget": free}
    for action in ("hold", "hold-and-drain", "spot-only"):
        spec = {"queues": [
            {"name": t, **({"budget": {"usd": 0.7 * spend[t], "period": "month",
                                       "action": action}} if spend[t] > 0 else {})}
            for t in teams]}
        sc = base.model_copy(update={"teams": TeamsSettings.model_validate(spec)})
        out[f"budget 70 % {action}"] = run(sc, jobs, f"budget {action}", console)
    return out


def quota_table(res: dict[str, dict[str, Any]], title: str) -> Table:
    t = Table(title=title)
    for col in ("run", "utilisation", "in the window", "while jobs wait",
                "worst team delivered/entitled", "Jain (delivered)", "evictions",
                "JCT slowdown mean", "JCT mean / p50 / p95 h", "queueing mean h",
                "jobs unfinished"):
        t.add_column(col, justify="left" if col == "run" else "right")
    for label, s in res.items():
        tm = s["teams"]
        label = f"{label} ({s['provisioned_gpu_hours'] / max(s['makespan_s'] / 3600, 1e-9):.0f}"\
            " GPUs)"
        worst = tm["worst_entitled_delivered"]
        busy = s.get("utilization_while_waiting")
        win = s.get("utilization_window")
        jct = " / ".join(f"{s[k] / 3600:.1f}" for k in ("jct_mean_s", "jct_p50_s", "jct_p95_s"))
        t.add_row(label, f"{s['utilization']:.1%}", "-" if win is None else f"{win:.1%}",
                  "-" if busy is None else f"{busy:.1%}",
                  "-" if worst is None else f"{worst:.3f}", f"{tm['jain_index_delivered']:.3f}",
                  f"{s['evictions']:,}", f"{tm['slowdown_mean']:.2f}", jct,
                  f"{s['queue_mean_s'] / 3600:.2f}", f"{s['jobs_lost']:,}")
    return t


def budget_table(res: dict[str, dict[str, Any]], title: str) -> Table:
    t = Table(title=title)
    for col in ("run", "spend USD", "max overspend (h of rate)", "teams over budget",
                "budgeted teams' JCT mean h", "JCT cost", "jobs unfinished"):
        t.add_column(col, justify="left" if col == "run" else "right")
    free = res["no budget"]
    budgeted = [n for n, r in free["teams"]["per_team"].items() if r["spend_usd"] > 0]

    def jct(s: dict[str, Any]) -> float:
        per = s["teams"]["per_team"]
        n = sum(per[x]["jobs_finished"] for x in budgeted)
        return sum(per[x]["jct_mean_s"] * per[x]["jobs_finished"] for x in budgeted) / max(n, 1)

    base_jct = jct(free)
    for label, s in res.items():
        per = s["teams"]["per_team"]
        over = [r for r in per.values() if r.get("overspend_usd", 0) > 0]
        hours = [r["overspend_hours"] for r in over if r["overspend_hours"] is not None]
        worst = "-" if not over else (f"{max(hours):.2f}" if len(hours) == len(over)
                                      else "no trigger")
        j = jct(s)
        t.add_row(label, f"{s['cost_usd']:,.0f}", worst if "budget 70" in label else "-",
                  f"{len(over)}" if "budget 70" in label else "-", f"{j / 3600:.2f}",
                  f"{j / base_jct - 1:+.1%}" if base_jct else "-", f"{s['jobs_lost']:,}")
    return t


def team_table(res: dict[str, Any], quotas: dict[str, float]) -> Table:
    t = Table(title="per team (borrowing vs no quotas): entitled share delivered while asked")
    for col in ("team", "quota GPUs", "no quotas", "borrowing", "strict", "JCT slowdown "
                "no quotas → borrowing"):
        t.add_column(col, justify="left" if col == "team" else "right")
    for team in sorted(quotas, key=lambda x: -quotas[x]):
        cells = []
        for label in ("no quotas", "borrowing", "strict"):
            v = res[label]["teams"]["per_team"][team]["entitled_delivered"]
            cells.append("-" if v is None else f"{v:.3f}")
        a = res["no quotas"]["teams"]["per_team"][team]["slowdown_mean"]
        b = res["borrowing"]["teams"]["per_team"][team]["slowdown_mean"]
        t.add_row(team, f"{quotas[team]:g}", *cells, f"{a:.2f} → {b:.2f}")
    return t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--start-day", type=float, default=35.0)
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--fleet-quantile", type=float, default=0.8)
    ap.add_argument("--oversold", action="store_true",
                    help="size the quota runs' fleet at --fleet-quantile even when the quotas "
                         "sum to more")
    ap.add_argument("--skip-budgets", action="store_true")
    ap.add_argument("--json", type=Path, default=None, help="write every summary here")
    a = ap.parse_args()
    console = Console(width=150)
    jobs = philly_window(console, a.start_day, a.days)
    if not jobs:
        return 0
    quotas = median_demand(jobs, a.days * DAY)
    q = a.fleet_quantile if a.oversold else covering_quantile(
        jobs, sum(quotas.values()), a.fleet_quantile)
    console.print(f"Philly window: days [{a.start_day:g}, {a.start_day + a.days:g}) of the "
                  f"trace, {len(jobs):,} jobs, {len(quotas)} teams (virtual clusters); quotas "
                  f"= median demand: {sum(quotas.values()):g} GPUs in all; fixed fleet at the "
                  f"{q:.3f} quantile of concurrent demand "
                  f"({demand_quantile_milli(jobs, False, q) / 1000:g} GPUs)", highlight=False)
    console.print("quotas: " + ", ".join(f"{t} {q:g}" for t, q in sorted(
        quotas.items(), key=lambda x: -x[1])), highlight=False)
    res = quota_part(jobs, quotas, q, console, a.days * DAY)
    console.print(quota_table(res, "quotas (fixed on-demand fleet)"))
    console.print(team_table(res, quotas))
    out: dict[str, Any] = {"window": [a.start_day, a.days], "quotas": quotas,
                           "fleet_quantile": q, "quota_runs": res}
    if not a.skip_budgets:
        bres = budget_part(jobs, console)
        console.print(budget_table(bres, "budgets at 70 % of each team's no-budget spend "
                                         "(monthly, autoscaled gpufleet fleet)"))
        out["budget_runs"] = bres
    if a.json is not None:
        a.json.write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
