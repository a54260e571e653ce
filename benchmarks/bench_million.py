"""A long replay: the gpufleet scenario over synthetic traces of growing length, streamed.

Each size is the embedded default generator at the default's load (2,000 jobs per 3 days of
``days``, so 1,000,000 jobs span 1,500 days) read as a stream (``traces.synthetic
.SyntheticStream``): a job exists from its arrival to its end, and the summary keeps a few
numbers per job. Every size runs in a fresh process, so each peak RSS is that replay's own.

Per size: CPU seconds (the replay, from building the simulation to its summary: drawing the
jobs included; imports not), CPU per 1,000 jobs and its ratio to the smallest size's (1.00 is
linear), peak RSS, the most jobs held at once, wall seconds, events, and the run's cost and JCT
p95, so that a reader can see the long runs are the same kind of run.

Usage:

    .venv/bin/python benchmarks/bench_million.py [--sizes 10000,100000,1000000]
        [--format table|json]

The default sizes leave out the million (about 50 CPU minutes): ``--sizes
10000,100000,1000000`` is the recorded run (``benchmarks/results.py run million``).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from typing import Any

from rich.console import Console
from rich.table import Table

RATE_DAYS_PER_JOB = 3.0 / 2000  # the embedded default's load: 2,000 jobs per 3 days


def one(jobs: int, seed: int, held: bool = False) -> dict[str, Any]:
    """Replay ``jobs`` streamed jobs under the gpufleet scenario, in this process (``held``:
    the same jobs drawn whole into a list first, which the simulator holds for the run)."""
    from gpufleet.config import scenarios_named
    from gpufleet.sim.runner import Simulation
    from gpufleet.traces.synthetic import SyntheticStream, SyntheticWorkload

    params = SyntheticWorkload(jobs=jobs, days=jobs * RATE_DAYS_PER_JOB)
    c0, w0 = time.process_time(), time.perf_counter()
    source = SyntheticStream(params, seed)
    sim = Simulation(scenarios_named(["gpufleet"])[0], seed, list(source) if held else source)
    last = [time.perf_counter()]

    def tick(done: float, total: float) -> None:
        if time.perf_counter() - last[0] >= 60:
            last[0] = time.perf_counter()
            print(f"  {jobs:,}: {done:,.0f} of {total:,.0f} jobs done, "
                  f"{time.process_time() - c0:,.0f} CPU s", file=sys.stderr, flush=True)

    s = sim.run(tick)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    return {"jobs": jobs, "days": params.days, "held": held, "cpu_s": cpu, "wall_s": wall,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "peak_jobs_held": sim.sim.jobs.peak_live, "events": s["events"],
            "jobs_finished": s["jobs_finished"], "jobs_lost": s["jobs_lost"],
            "cost_usd": s["cost_usd"], "utilization": s["utilization"],
            "jct_p95_s": s["jct_p95_s"], "makespan_days": s["makespan_s"] / 86400}


def table(rows: list[dict[str, Any]]) -> Table:
    t = Table(title="gpufleet scenario, streamed synthetic traces at the default's load")
    for col in ("jobs", "workload", "days", "CPU s", "CPU s / 1k jobs", "× linear", "peak RSS MiB",
                "jobs held (peak)", "wall s", "events", "cost $", "util", "JCT p95 s", "lost"):
        t.add_column(col, justify="right")
    base = rows[0]["cpu_s"] / rows[0]["jobs"]
    for r in rows:
        per = r["cpu_s"] / r["jobs"]
        t.add_row(f"{r['jobs']:,}", "list" if r["held"] else "stream", f"{r['days']:,.0f}",
                  f"{r['cpu_s']:,.1f}",
                  f"{per * 1000:.2f}", f"{per / base:.2f}", f"{r['peak_rss_mib']:,.0f}",
                  f"{r['peak_jobs_held']:,}", f"{r['wall_s']:,.1f}", f"{r['events']:,}",
                  f"{r['cost_usd']:,.0f}", f"{r['utilization']:.1%}", f"{r['jct_p95_s']:,.0f}",
                  f"{r['jobs_lost']:,}")
    return t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--sizes", default="10000,100000",
                    help="job counts, comma-separated (default: 10000,100000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--format", choices=("table", "json"), default="table")
    ap.add_argument("--held", type=int, metavar="N",
                    help="also run N jobs drawn whole into a list (the memory a held trace "
                    "costs, against the streamed run of the same size)")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a size, in this process
    ap.add_argument("--one-held", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one is not None:
        print(json.dumps(one(a.one, a.seed, a.one_held)))
        return 0
    runs = [(int(x), False) for x in a.sizes.split(",")]
    if a.held is not None:
        runs.append((a.held, True))
    rows = []
    for n, held in runs:
        out = subprocess.run([sys.executable, __file__, "--one", str(n), "--seed", str(a.seed),
                              *(["--one-held"] if held else [])],
                             check=True, stdout=subprocess.PIPE, text=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
        print(f"  {n:,} jobs{' held' if held else ''}: {rows[-1]['cpu_s']:,.1f} CPU s",
              file=sys.stderr, flush=True)
    if a.format == "json":
        base = rows[0]["cpu_s"] / rows[0]["jobs"]
        for r in rows:
            r["cpu_vs_linear"] = r["cpu_s"] / r["jobs"] / base
        print(json.dumps({"sizes": rows}, indent=2))
    else:
        Console(width=200).print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
