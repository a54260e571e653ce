"""Simulator speed and the issue's targets on the Philly trace (82k jobs) and the default.

Prints a rich table: per workload, static vs gpufleet side by side, the target checks
(utilisation >= 65 %, cost <= 28 % of static, zero jobs lost, p95 JCT <= static + 10 %) and the
replay speed (wall seconds, events/s) with every lever on. Usage:

    .venv/bin/python benchmarks/bench_simulate.py [--philly-only | --default-only]
"""

from __future__ import annotations

import sys
import time

from rich.console import Console
from rich.table import Table

from gpufleet.config import builtin_scenarios
from gpufleet.datapaths import data_dir
from gpufleet.sim.runner import Simulation
from gpufleet.traces.jobs import load_jobs
from gpufleet.traces.synthetic import generate


def run(name: str, jobs: list, console: Console) -> None:
    by = {s.name: s for s in builtin_scenarios()}
    res = {}
    for sc in ("static", "gpufleet"):
        t0 = time.perf_counter()
        sim = Simulation(by[sc], seed=0, jobs=jobs)
        res[sc] = sim.run()
        res[sc]["total_s"] = time.perf_counter() - t0
    st, gf = res["static"], res["gpufleet"]
    t = Table(title=f"{name}: {len(jobs):,} jobs")
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
        ("queue p95 s", f"{st['queue_p95_s']:,.0f}", f"{gf['queue_p95_s']:,.0f}", None),
        ("interruptions", f"{st['interruptions']:,}", f"{gf['interruptions']:,}", None),
        ("node failures", f"{st['node_failures']:,}", f"{gf['node_failures']:,}", None),
        ("lost GPU-h", f"{st['lost_gpu_hours']:,.1f}", f"{gf['lost_gpu_hours']:,.1f}", None),
        ("recovery p50 / p95 s", f"{st['recovery_p50_s']:.0f} / {st['recovery_p95_s']:.0f}",
         f"{gf['recovery_p50_s']:.0f} / {gf['recovery_p95_s']:.0f}", None),
        ("spot share of GPU-h", f"{st['spot_share_gpu_hours']:.0%}",
         f"{gf['spot_share_gpu_hours']:.0%}", None),
        ("jobs finished / lost", f"{st['jobs_finished']:,} / {st['jobs_lost']}",
         f"{gf['jobs_finished']:,} / {gf['jobs_lost']}", ("0 lost", gf["jobs_lost"] == 0)),
        ("events", f"{st['events']:,}", f"{gf['events']:,}", None),
        ("replay wall s (incl. setup)", f"{st['total_s']:.1f}", f"{gf['total_s']:.1f}",
         ("gpufleet ≤ 60 s", gf["total_s"] <= 60)),
        ("events/s", f"{st['events_per_s']:,.0f}", f"{gf['events_per_s']:,.0f}", None),
    ]
    for label, a, b, target in rows:
        if target is None:
            t.add_row(label, a, b, "")
        else:
            text, ok = target
            t.add_row(label, a, b, f"[{'green' if ok else 'red'}]{text} {'✓' if ok else '✗'}[/]")
    console.print(t)


def main() -> int:
    console = Console()
    args = set(sys.argv[1:])
    if "--philly-only" not in args:
        run("embedded default (synthetic, seed 0)", generate(seed=0), console)
    if "--default-only" not in args:
        base = data_dir(required=False)
        if base is None:
            console.print("shared data absent: Philly benchmark skipped")
            return 0
        t0 = time.perf_counter()
        jobs = load_jobs(base / "philly" / "philly_jobs.csv")
        console.print(f"loaded Philly in {time.perf_counter() - t0:.1f} s")
        run("Philly (Jeon et al. ATC'19)", jobs, console)
    return 0


if __name__ == "__main__":
    sys.exit(main())
