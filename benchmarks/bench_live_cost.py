"""Scrape cost of the live controller's fleet and cost metrics vs cluster size.

Why it matters: the live collector (``gpufleet.k8s.capacity.cost``) rebuilds the fleet snapshot
from the
informers' Nodes and Pods at every scrape (so a deleted node or namespace leaves ``/metrics``),
and it shares the controller's process with the scheduling loop: one render must stay well under
a scrape interval for a large cluster. Also times one drain plan over the same objects with 1 %
of the nodes marked (it runs every leader cycle, before placement). Objects are parsed through a
cache keyed on resourceVersion, so the first scrape pays for parsing every object and later
ones only for what changed.
Run: ``.venv/bin/python benchmarks/bench_live_cost.py``.
"""

from __future__ import annotations

import statistics
import time
from datetime import UTC, datetime

from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry
from rich.console import Console
from rich.table import Table

from gpufleet.catalog.instances import default_instance_catalog
from gpufleet.cloud.provider import InterruptionKind
from gpufleet.k8s.capacity.cost import LiveFleet, LiveFleetCollector
from gpufleet.k8s.disruption.drain import plan_drain
from gpufleet.k8s.disruption.interruption import InterruptionMark
from gpufleet.k8s.translate import names
from gpufleet.k8s.translate.node_objects import node_object, spec_from_instance

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC).timestamp()
PODS_PER_NODE = 8
NAMESPACES = 50


def cluster(n_nodes: int) -> tuple[list[dict], list[dict]]:
    it = default_instance_catalog()["p4d.24xlarge"]
    mark = InterruptionMark(InterruptionKind.SPOT_INTERRUPTION, NOW + 120, NOW, "agent")
    nodes, pods = [], []
    for n in range(n_nodes):
        obj = node_object(spec_from_instance(it, f"node-{n}", zone=it.zones[n % len(it.zones)],
                                             capacity_type="spot" if n % 2 else "on-demand"))
        obj["metadata"] |= {"creationTimestamp": "2026-01-01T00:00:00Z", "resourceVersion": "1"}
        obj["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        if n % 100 == 0:
            obj["metadata"]["annotations"][names.ANN_INTERRUPTION] = mark.to_json()
        nodes.append(obj)
        for p in range(PODS_PER_NODE):
            pods.append({
                "metadata": {"name": f"p-{n}-{p}", "namespace": f"team-{(n + p) % NAMESPACES}",
                             "uid": f"u-{n}-{p}", "creationTimestamp": "2026-01-01T00:00:00Z",
                             "resourceVersion": "1"},
                "spec": {"schedulerName": "gpufleet", "nodeName": f"node-{n}",
                         "containers": [{"name": "m", "resources": {"limits": {
                             "cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}}}]},
                "status": {"phase": "Running", "containerStatuses": [
                    {"state": {"running": {"startedAt": "2026-01-01T01:00:00Z"}}}]}})
    return nodes, pods


def main() -> None:
    table = Table("nodes", "pods", "first scrape ms", "later scrape p50 ms", "bytes",
                  "drain plan ms")
    for n in (100, 1000, 5000):
        nodes, pods = cluster(n)
        reg = CollectorRegistry()
        reg.register(LiveFleetCollector(LiveFleet(), lambda nodes=nodes: nodes,
                                        lambda pods=pods: pods, lambda: True, lambda: NOW))
        t0 = time.perf_counter()
        generate_latest(reg)  # parses every object once (later scrapes: only changed ones)
        first = time.perf_counter() - t0
        times, size = [], 0
        for _ in range(5):
            t0 = time.perf_counter()
            size = len(generate_latest(reg))
            times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        plan = plan_drain(nodes, pods, NOW + 10)
        drain_s = time.perf_counter() - t0
        assert len(plan.evict) == len(plan.marked) * PODS_PER_NODE
        table.add_row(str(n), str(len(pods)), f"{1000 * first:.0f}",
                      f"{1000 * statistics.median(times):.0f}", str(size), f"{1000 * drain_s:.1f}")
    Console().print(table)


if __name__ == "__main__":
    main()
