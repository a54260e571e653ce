"""The cost–lateness frontier over load shapes and spot markets: what each value of time buys.

For each workload shape (the spot lever study's three: the embedded default, ``bursty-long``,
``short-heavy``), each spot market (``trace``: the shared availability traces with the price
snapshot; ``price``: the price-process model) and each seed, ``static`` runs once and the
built-in ``gpufleet`` scenario once per value of time ``v`` ($ per GPU-hour of delay), exactly as
``gpufleet simulate --frontier`` runs them (``sim.frontier``). A row per point: cost × static,
the share of jobs finishing > 5 min later than under ``static``, JCT p95 × static, and the delay
against ``static`` at p95 and p99. ``--trace`` adds a trace file (e.g. Philly) as a workload of
its own, on the default market. Nothing here is tuned: the scenarios are the defaults.

Usage:

    .venv/bin/python benchmarks/bench_frontier.py [--values 0,1,3,10,30,100] [--seeds 0]
        [--markets trace,price] [--workloads default,bursty-long,short-heavy] [--trace PATH]
        [--workers 2] [--format table|json|csv|markdown]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from bench_spot_lever import SHAPES, check_grid
from gpufleet.config import Scenario, scenarios_named
from gpufleet.sim.batch import run_all
from gpufleet.sim.frontier import DEFAULT_VALUES, frontier, frontier_scenarios, parse_values
from gpufleet.sim.report import add_relative
from gpufleet.tables import DataTable, OutputFormat, print_tables
from gpufleet.traces.jobs import JobSpec, load_jobs
from gpufleet.traces.synthetic import generate

COLUMNS = ("workload", "market", "seed", "v $/GPU-h", "cost × static", "late > 5 min",
           "JCT p95 × static", "delay p95 s", "delay p99 s")


def points(jobs: list[JobSpec], market: str | None, seed: int, values: list[float],
           workers: int) -> list[dict[str, Any]]:
    """One workload, market and seed: the frontier's points (``sim.frontier.frontier``)."""
    static, base = scenarios_named(["static", "gpufleet"])
    if market is not None:
        base = base.model_copy(update={"spot_market": market})
    pts: list[Scenario] = frontier_scenarios(base, values)
    outcomes = run_all(jobs, [static, *pts], seed=seed, workers=workers)
    summaries = {n: o.summary for n, o in outcomes.items()}
    add_relative(summaries, {n: o.finishes for n, o in outcomes.items()})
    return list(frontier(summaries, pts, base)["points"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--values", default=DEFAULT_VALUES)
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--markets", default="trace,price")
    ap.add_argument("--workloads", default=",".join(SHAPES))
    ap.add_argument("--trace", type=Path, help="a trace file as one more workload")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--format", type=OutputFormat, default=OutputFormat.table,
                    choices=list(OutputFormat))
    a = ap.parse_args(argv)
    values = parse_values(a.values)
    seeds = [int(s) for s in a.seeds.split(",")]
    markets = a.markets.split(",")
    shapes = [w for w in a.workloads.split(",") if w]
    check_grid(ap, markets, shapes)
    progress = Console(stderr=True)
    cells: list[tuple[str, str, int, list[JobSpec], str | None]] = [
        (w, m, seed, generate(SHAPES[w], seed=seed), m)
        for w in shapes for seed in seeds for m in markets]
    if a.trace is not None:
        jobs = load_jobs(a.trace)
        cells += [(a.trace.name, "default", seed, jobs, None) for seed in seeds]
    t = DataTable(f"Cost against lateness by value of time v (gpufleet; values {a.values})",
                  COLUMNS, numeric=[False, False, *([True] * 7)])
    for w, label, seed, jobs, market in cells:
        first = True
        for p in points(jobs, market, seed, values, a.workers):
            late, p95, p99 = (p["late_over_5min_share"], p["delay_vs_static_p95_s"],
                              p["delay_vs_static_p99_s"])
            cost, jct = p["cost_vs_static"], p["jct_p95_vs_static"]
            t.add_row(w, label, str(seed), f"{p['v_usd_per_gpu_hour']:g}", f"{cost:.3f}",
                      f"{late:.1%}", f"{jct:.3f}", f"{p95:,.0f}", f"{p99:,.0f}",
                      values=[w, label, seed, p["v_usd_per_gpu_hour"], cost, late, jct, p95, p99],
                      section=first)
            first = False
        progress.print(f"done: {w} market {label} seed {seed}", style="dim")
    print_tables([t], a.format, Console())
    return 0


if __name__ == "__main__":
    sys.exit(main())
