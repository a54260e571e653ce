"""What team queues add to one live scheduling cycle, vs cluster size.

Why it matters: with GpuQueues the controller, every cycle, sums each queue's usage over the
snapshot's pods, splits every node's price among the pods on it, integrates each queue's spend
and renders its status and metrics (``gpufleet.k8s.queues``) — on the scheduling loop's thread,
before and after placement. That must stay small beside the snapshot the cycle builds anyway.
Same clusters as ``bench_live_cost`` (p4d nodes, 8 one-GPU pods each, 50 namespaces), each
namespace in one of 50 queues (two cohorts); status writes are left out (they are API calls, only
on change).
Run: ``.venv/bin/python benchmarks/bench_live_queues.py``.
"""

from __future__ import annotations

import statistics
import threading
import time

from kubernetes import client
from rich.console import Console
from rich.table import Table

from bench_live_cost import NAMESPACES, NOW, cluster
from gpufleet.catalog.gpus import default_gpu_catalog
from gpufleet.config import default_scenario
from gpufleet.k8s.capacity.cost import PriceBook
from gpufleet.k8s.queues.spec import QUEUE_LABEL
from gpufleet.k8s.queues.tracker import QueueTracker
from gpufleet.k8s.translate.snapshot import ParseCache, build_snapshot


def tracker() -> QueueTracker:
    t = QueueTracker(client.ApiClient(), threading.Event(), default_scenario(),
                     default_gpu_catalog(), lambda *a: None)
    t.namespaces._store = {f"team-{i}": {"metadata": {"name": f"team-{i}", "labels": {
        QUEUE_LABEL: f"q{i}"}}} for i in range(NAMESPACES)}
    t.queues._store = {f"q{i}": {"metadata": {"name": f"q{i}", "uid": f"u{i}", "generation": 1},
                                 "spec": {"gpus": 100, "cohort": f"c{i % 2}",
                                          "budget": {"usd": 10_000, "period": "month"}}}
                       for i in range(NAMESPACES)}
    return t


def main() -> None:
    table = Table("nodes", "pods", "snapshot p50 ms", "queues p50 ms", "queues / snapshot")
    price = PriceBook().price
    for n in (100, 1000, 5000):
        nodes, pods = cluster(n)
        cache = ParseCache()
        build_snapshot(nodes, pods, cache=cache)  # the cycle's parse cache, warm
        t = tracker()
        snaps, queues = [], []
        for i in range(5):
            t0 = time.perf_counter()
            snap = build_snapshot(nodes, pods, cache=cache)
            t1 = time.perf_counter()
            live = t.observe(snap, nodes, price, NOW + i)
            t.sync(live, snap, NOW + i, leader=False)
            t2 = time.perf_counter()
            snaps.append(t1 - t0)
            queues.append(t2 - t1)
        assert live.input is not None and sum(live.input.book.usage.values()) == len(pods) * 1000
        s, q = statistics.median(snaps), statistics.median(queues)
        table.add_row(str(n), str(len(pods)), f"{1000 * s:.0f}", f"{1000 * q:.1f}",
                      f"{q / s:.2f}")
    Console().print(table)


if __name__ == "__main__":
    main()
