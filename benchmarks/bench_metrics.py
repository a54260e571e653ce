"""Scrape cost of the exporter vs fleet size: one ``/metrics`` render of DCGM + gpufleet_* series.

Why it matters: collectors render at scrape time (so stale series vanish), so the render must stay
well under a scrape interval even for large simulated fleets.
Run: ``.venv/bin/python benchmarks/bench_metrics.py``.
"""

from __future__ import annotations

import statistics
import time

from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry
from rich.console import Console
from rich.table import Table

from gpufleet.metrics.fleet import FleetMetrics
from gpufleet.metrics.snapshot import FleetSnapshot, GpuSample, NodeSample

GPUS_PER_NODE = 8
TENANTS = 20


def synthetic_fleet(nodes: int) -> FleetSnapshot:
    gpus = tuple(
        GpuSample(
            hostname=f"node-{n}",
            gpu=g,
            uuid=f"GPU-{n:05d}-{g}",
            model_name="NVIDIA H100 80GB HBM3",
            util_pct=float((n * 7 + g * 13) % 101),
            mem_copy_util_pct=10.0,
            fb_used_mib=float(1000 * g),
            fb_free_mib=float(81559 - 1000 * g),
            temp_c=55.0,
            power_w=400.0,
            sm_clock_mhz=1980.0,
            xid_errors=0,
        )
        for n in range(nodes)
        for g in range(GPUS_PER_NODE)
    )
    node_samples = tuple(
        NodeSample(
            f"node-{n}",
            "p5.48xlarge",
            f"zone-{n % 3}",
            "spot" if n % 2 else "on-demand",
            "ready",
            "H100",
            GPUS_PER_NODE,
            4000,
        )
        for n in range(nodes)
    )
    tenants = [f"team-{i}" for i in range(TENANTS)]
    return FleetSnapshot(
        time_s=3600.0,
        gpus=gpus,
        nodes=node_samples,
        jobs_pending={(t, s): 3 for t in tenants for s in ("1", "8", "0.5")},
        jobs_running={(t, s): 5 for t in tenants for s in ("1", "8", "0.5")},
        spot_interruptions_total=17,
        recovery_seconds=(120.0, 300.0),
        cost_usd_total_by_tenant={t: 100.0 for t in tenants},
        cost_usd_per_hour_by_tenant={t: 10.0 for t in tenants},
        fragmentation_ratio=0.1,
    )


def main() -> None:
    table = Table(title=f"/metrics render time ({GPUS_PER_NODE} GPUs per node, {TENANTS} tenants)")
    for col in ("nodes", "GPUs", "series", "exposition KiB", "median ms", "p90 ms"):
        table.add_column(col, justify="right")
    for nodes in (10, 100, 1000, 4000):
        registry = CollectorRegistry()
        FleetMetrics(registry).update(synthetic_fleet(nodes))
        times = []
        for _ in range(7 if nodes >= 1000 else 21):
            t0 = time.perf_counter()
            text = generate_latest(registry)
            times.append((time.perf_counter() - t0) * 1000)
        series = sum(1 for line in text.splitlines() if line and not line.startswith(b"#"))
        q = statistics.quantiles(times, n=10)
        table.add_row(
            str(nodes),
            str(nodes * GPUS_PER_NODE),
            str(series),
            f"{len(text) / 1024:.0f}",
            f"{statistics.median(times):.1f}",
            f"{q[8]:.1f}",
        )
    Console().print(table)


if __name__ == "__main__":
    main()
