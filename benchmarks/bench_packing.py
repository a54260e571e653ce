"""Placement speed: wall time of one openb packing seed per policy, and decisions per second.

Goal from the issue: the FGD policy fills the 1,213-node openb cluster to 130% (~10.8k pod
decisions) in under 5 s on a 2-core machine (the reference Go simulator: ~10 minutes).
Usage: ``python benchmarks/bench_packing.py [--seed 42] [--policy NAME]...``
"""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.table import Table

from gpufleet.datapaths import data_dir
from gpufleet.placement import list_policies
from gpufleet.placement.bench.protocol import run_seed
from gpufleet.placement.typical import typical_tasks_from
from gpufleet.traces.openb import load_nodes, load_pods


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--policy", action="append", choices=list_policies())
    args = ap.parse_args()
    console = Console()
    base = data_dir(required=False)
    if base is None:
        console.print("shared data absent (set GPUFLEET_DATA): nothing to measure")
        return 0
    nodes = load_nodes(base / "openb" / "openb_node_list_gpu_node.csv")
    pods = [p.request for p in load_pods(base / "openb" / "openb_pod_list_default.csv")]
    typical = typical_tasks_from(pods)
    table = Table(title=f"openb packing, one seed ({args.seed}), 1,213 nodes, load to 130%")
    for col in ("policy", "decisions", "wall s", "decisions/s", "µs/decision", "unalloc@130 %"):
        table.add_column(col, justify="right" if col != "policy" else "left")
    for name in args.policy or [
        "random",
        "dotprod",
        "gpuclustering",
        "gpupacking",
        "bestfit",
        "fgd",
        "fgd-band",
        "fgd-strand",
        "spread",
    ]:
        res = run_seed(name, nodes, pods, args.seed, [130], typical=typical)
        rate = res.decisions / res.wall_seconds
        table.add_row(
            name,
            f"{res.decisions}",
            f"{res.wall_seconds:.2f}",
            f"{rate:,.0f}",
            f"{1e6 / rate:.0f}",
            f"{res.unallocated_pct(130):.2f}",
        )
    console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
