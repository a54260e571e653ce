"""Simulator speed per scenario, and the issue's targets, on the default workload and Philly.

For each workload, every default scenario runs (in worker processes, as ``gpufleet simulate``
runs them) and one table gives, per scenario: events, wall seconds, CPU seconds and events per
CPU second — CPU time because on a shared machine wall time says more about the neighbours
than about the simulator — plus the whole run's wall time. A second table checks the targets
for static vs gpufleet (utilisation ≥ 65 %, cost ≤ 28 % of static, zero jobs lost, p95 JCT ≤
static + 10 %).

``--one NAME`` is the regression benchmark: one scenario, in this process, on one workload
(``--limit N`` keeps the first N jobs: a Philly slice). Usage:

    .venv/bin/python benchmarks/bench_simulate.py [--workload default|philly|both]
        [--trace PATH] [--limit N] [--workers N] [--scenarios a,b] [--one NAME]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from gpufleet.config import default_scenarios, scenarios_named
from gpufleet.datapaths import data_dir
from gpufleet.sim.batch import run_all, run_one
from gpufleet.traces.jobs import JobSpec, load_jobs
from gpufleet.traces.synthetic import generate


def speed_table(title: str, summaries: dict[str, dict[str, Any]], wall_s: float) -> Table:
    t = Table(title=f"{title}: all scenarios in {wall_s:.1f} s wall")
    for col in ("scenario", "events", "wall s", "CPU s", "events / CPU s"):
        t.add_column(col, justify="left" if col == "scenario" else "right")
    for name, s in summaries.items():
        cpu = s["cpu_seconds"]
        t.add_row(name, f"{s['events']:,}", f"{s['wall_seconds']:.1f}", f"{cpu:.1f}",
                  f"{s['events'] / cpu:,.0f}" if cpu > 0 else "-")
    cpu = sum(s["cpu_seconds"] for s in summaries.values())
    t.add_row("total", f"{sum(s['events'] for s in summaries.values()):,}",
              f"{wall_s:.1f}", f"{cpu:.1f}", "")
    return t


def target_table(title: str, st: dict[str, Any], gf: dict[str, Any]) -> Table:
    t = Table(title=f"{title}: targets")
    t.add_column("metric")
    t.add_column("static", justify="right")
    t.add_column("gpufleet", justify="right")
    t.add_column("target", justify="left")
    cost_ratio = gf["cost_usd"] / st["cost_usd"]
    jct_ratio = gf["jct_p95_s"] / st["jct_p95_s"]
    rows = [
        ("utilisation", f"{st['utilization']:.1%}", f"{gf['utilization']:.1%}",
         ("≥ 65 %", gf["utilization"] >= 0.65)),
        ("cost USD", f"{st['cost_usd']:,.0f}", f"{gf['cost_usd']:,.0f}",
         (f"≤ 28 % of static: {cost_ratio:.1%}", cost_ratio <= 0.28)),
        ("JCT p50 s", f"{st['jct_p50_s']:,.0f}", f"{gf['jct_p50_s']:,.0f}", None),
        ("JCT p95 s", f"{st['jct_p95_s']:,.0f}", f"{gf['jct_p95_s']:,.0f}",
         (f"≤ static + 10 %: {jct_ratio - 1:+.1%}", jct_ratio <= 1.10)),
        ("jobs finished / lost", f"{st['jobs_finished']:,} / {st['jobs_lost']}",
         f"{gf['jobs_finished']:,} / {gf['jobs_lost']}", ("0 lost", gf["jobs_lost"] == 0)),
    ]
    for label, a, b, target in rows:
        if target is None:
            t.add_row(label, a, b, "")
        else:
            text, ok = target
            t.add_row(label, a, b, f"[{'green' if ok else 'red'}]{text} {'✓' if ok else '✗'}[/]")
    return t


def run(title: str, jobs: list[JobSpec], names: list[str] | None, workers: int | None,
        console: Console) -> None:
    scs = scenarios_named(names) if names else default_scenarios()
    t0 = time.perf_counter()
    outcomes = run_all(jobs, scs, seed=0, workers=workers)
    wall = time.perf_counter() - t0
    summaries = {name: o.summary for name, o in outcomes.items()}
    console.print(speed_table(f"{title}: {len(jobs):,} jobs", summaries, wall))
    if "static" in summaries and "gpufleet" in summaries:
        console.print(target_table(title, summaries["static"], summaries["gpufleet"]))


def one(title: str, jobs: list[JobSpec], name: str, console: Console) -> None:
    [sc] = scenarios_named([name])
    t0, c0 = time.perf_counter(), time.process_time()
    s = run_one(sc, 0, jobs).summary
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    console.print(f"{title}, {len(jobs):,} jobs, scenario {name}: {s['events']:,} events; "
                  f"run {s['wall_seconds']:.2f} s wall / {s['cpu_seconds']:.2f} s CPU "
                  f"({s['events'] / max(s['cpu_seconds'], 1e-9):,.0f} events per CPU s); "
                  f"with setup {wall:.2f} s wall / {cpu:.2f} s CPU")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", choices=("default", "philly", "both"), default="both")
    ap.add_argument("--trace", type=Path, help="Philly CSV (default: <data>/philly/...)")
    ap.add_argument("--limit", type=int, help="keep the first N jobs")
    ap.add_argument("--workers", type=int, help="worker processes (default: one per CPU)")
    ap.add_argument("--scenarios", help="comma-separated scenario names (default: all)")
    ap.add_argument("--one", metavar="NAME", help="one scenario in this process (regressions)")
    args = ap.parse_args()
    console = Console()
    names = [n.strip() for n in args.scenarios.split(",")] if args.scenarios else None
    workloads: list[tuple[str, list[JobSpec]]] = []
    if args.workload in ("default", "both"):
        workloads.append(("embedded default (synthetic, seed 0)", generate(seed=0)))
    if args.workload in ("philly", "both"):
        trace = args.trace
        if trace is None:
            base = data_dir(required=False)
            if base is None:
                console.print("shared data absent: Philly benchmark skipped")
            else:
                trace = base / "philly" / "philly_jobs.csv"
        if trace is not None:
            t0 = time.perf_counter()
            jobs = load_jobs(trace)
            console.print(f"loaded Philly in {time.perf_counter() - t0:.1f} s")
            workloads.append(("Philly (Jeon et al. ATC'19)", jobs))
    for title, jobs in workloads:
        jobs = jobs[: args.limit] if args.limit else jobs
        if args.one:
            one(title, jobs, args.one, console)
        else:
            run(title, jobs, names, args.workers, console)
    return 0


if __name__ == "__main__":
    sys.exit(main())
