"""Gang room on and off (``control.gang_room``): cost, JCT and how often each choice won.

For each workload × seed, ``static``, ``gpufleet`` and ``gpufleet`` with ``gang_room: false``
(scale-up launches for every pending gang, the behaviour before) run on the same jobs. The
workloads are synthetic shapes with few and with many gangs (jobs of more than 8 GPUs), so the
rule is not judged on the two workloads it was written against; ``--philly`` adds the Philly
trace (two ~1-minute runs). Printed: cost vs static, the saving, JCT p50/p95 and queue p95 ×
the rule-off run (the unflattering side), the choices (wait / scale-up / preempt), the pods
evicted, the GPU-h lost and the nodes launched.

Run: ``make bench`` (all benchmarks) or ``python benchmarks/bench_gang_room.py --seeds 0,1``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

from gpufleet.config import scenarios_named
from gpufleet.datapaths import data_dir
from gpufleet.sim.batch import run_all
from gpufleet.traces.jobs import JobSpec, load_jobs
from gpufleet.traces.synthetic import SyntheticWorkload, generate

SHAPES: dict[str, SyntheticWorkload] = {
    "default": SyntheticWorkload(),
    "gang-heavy": SyntheticWorkload(jobs=1500, days=2.0,
                                    gpu_count_weights=(60, 8, 8, 8, 10, 6)),
    "gang-heavy-long": SyntheticWorkload(jobs=1200, days=2.0, long_median_s=7200.0,
                                         gpu_count_weights=(60, 8, 8, 8, 10, 6)),
}


def cell(jobs: list[JobSpec], seed: int, workers: int) -> dict[str, dict[str, Any]]:
    base = scenarios_named(["static", "gpufleet"])
    off = base[-1].model_copy(update={"name": "gang-room-off", "gang_room": False})
    return {n: o.summary for n, o in run_all(jobs, [*base, off], seed=seed,
                                             workers=workers).items()}


def row(t: Table, name: str, seed: str, rows: dict[str, dict[str, Any]]) -> None:
    st, on, off = rows["static"], rows["gpufleet"], rows["gang-room-off"]
    t.add_row(
        name, seed, f"{on['cost_usd'] / st['cost_usd']:.4f}",
        f"{off['cost_usd'] / st['cost_usd']:.4f}",
        f"{(off['cost_usd'] - on['cost_usd']) / off['cost_usd']:+.2%}",
        f"{on['jct_p50_s'] / off['jct_p50_s']:.3f} / {on['jct_p95_s'] / off['jct_p95_s']:.3f}",
        f"{on['queue_p95_s']:,.0f} / {off['queue_p95_s']:,.0f}",
        f"{on['gang_room_wait']} / {on['gang_room_scale_up']} / {on['gang_room_preempt']}",
        str(on["gang_room_evictions"]),
        f"{on['lost_gpu_hours']:,.1f} / {off['lost_gpu_hours']:,.1f}",
        f"{on['nodes_launched']:,} / {off['nodes_launched']:,}",
        f"{on['jobs_lost']} / {off['jobs_lost']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--workloads", default=",".join(SHAPES))
    ap.add_argument("--philly", action="store_true", help="add the Philly trace (seed 0)")
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args(argv)
    seeds = [int(s) for s in a.seeds.split(",")]
    shapes = a.workloads.split(",")
    for w in shapes:
        if w not in SHAPES:
            ap.error(f"--workloads: unknown workload {w!r}; expected one of {', '.join(SHAPES)}")
    console = Console()
    t = Table(title="Gang room: on (gpufleet) vs off (scale up for every pending gang)")
    for col in ("workload", "seed", "on × static", "off × static", "saving",
                "JCT p50 / p95 on × off", "queue p95 s on / off", "wait / scale-up / preempt",
                "evicted", "lost GPU-h on / off", "launched on / off", "jobs lost on / off"):
        t.add_column(col, justify="left" if col == "workload" else "right")
    for w in shapes:
        for seed in seeds:
            jobs = generate(SHAPES[w], seed=seed)
            gangs = sum(1 for j in jobs if j.replicas > 1)
            row(t, f"{w} ({gangs} gangs)", str(seed), cell(jobs, seed, a.workers))
            console.print(f"done: {w} seed {seed}", style="dim")
    if a.philly:
        base = data_dir(required=False)
        path = base / "philly" / "philly_jobs.csv" if base is not None else None
        if path is None or not path.exists():
            console.print(f"skipped Philly: {path} not found (set GPUFLEET_DATA)")
        else:
            jobs = load_jobs(path)
            gangs = sum(1 for j in jobs if j.replicas > 1)
            row(t, f"philly ({gangs} gangs)", "0", cell(jobs, 0, a.workers))
    console.print(t)
    return 0


if __name__ == "__main__":
    sys.exit(main())
