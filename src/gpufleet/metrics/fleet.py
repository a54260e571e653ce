"""Fleet and cost metrics (``gpufleet_*``) computed from :class:`FleetSnapshot` values.

Everything is in Prometheus base units: seconds, dollars, ratios in 0..1 and plain counts.
The cost rate is exported per *second* (``gpufleet_cost_dollars_per_second``) so that
``rate(gpufleet_cost_dollars_total[5m])`` and the rate gauge compare directly; a dashboard
multiplies by 3600 to show dollars per hour.

Like the DCGM collector this renders the latest snapshot at scrape time, so a tenant, zone or
node state that no longer exists leaves ``/metrics`` instead of freezing at its last value. The
one piece of memory is the recovery-time histogram, which accumulates the recoveries each
snapshot reports as completed since the previous one.
"""

from __future__ import annotations

import bisect
import math
import threading
from collections import defaultdict
from collections.abc import Iterator, Sequence

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from gpufleet.metrics.dcgm import DcgmCollector
from gpufleet.metrics.snapshot import FleetSnapshot, GpuSample

# Recoveries (interruption -> job running again) range from a restart on warm capacity (a minute
# or two) to waiting hours for a new node: a log-ish spread over that range.
RECOVERY_BUCKETS_S: tuple[float, ...] = (
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    1200.0,
    1800.0,
    3600.0,
    7200.0,
    14400.0,
)


class _Histogram:
    """Cumulative bucket counts for a stream of observations (thread-safe)."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self._counts = [0] * (len(self.bounds) + 1)  # last one is +Inf
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe_many(self, values: Sequence[float]) -> None:
        with self._lock:
            for v in values:
                self._counts[bisect.bisect_left(self.bounds, v)] += 1
                self._sum += v

    def cumulative(self) -> tuple[list[tuple[str, float]], float]:
        with self._lock:
            counts, total = list(self._counts), self._sum
        out: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip((*self.bounds, float("inf")), counts, strict=True):
            running += count
            out.append(("+Inf" if bound == float("inf") else repr(bound), float(running)))
        return out, total


def _sum_by(items: Sequence[tuple[tuple[str, ...], float]]) -> dict[tuple[str, ...], float]:
    acc: dict[tuple[str, ...], float] = defaultdict(float)
    for key, value in items:
        acc[key] += value
    return acc


def fleet_families(snap: FleetSnapshot, recovery: _Histogram) -> list[Metric]:
    """All gpufleet_* metric families for one snapshot (pure apart from reading the histogram)."""
    fams: list[Metric] = []

    # Both job gauges cover every (tenant, shape) that has pending *or* running jobs, so an
    # empty queue reads 0 for an active tenant instead of "no data".
    active = sorted(set(snap.jobs_pending) | set(snap.jobs_running))
    for counts, name, doc in (
        (snap.jobs_pending, "gpufleet_jobs_pending", "Jobs waiting to be placed."),
        (snap.jobs_running, "gpufleet_jobs_running", "Jobs currently running."),
    ):
        fam = GaugeMetricFamily(name, doc, labels=["tenant", "gpu_shape"])
        for tenant, shape in active:
            fam.add_metric([tenant, shape], float(counts.get((tenant, shape), 0)))
        fams.append(fam)

    provisioned = _sum_by([((n.gpu_model, n.capacity_type), float(n.gpus)) for n in snap.nodes])
    allocated = _sum_by(
        [((n.gpu_model, n.capacity_type), n.allocated_milli / 1000.0) for n in snap.nodes]
    )
    fam = GaugeMetricFamily(
        "gpufleet_gpus_provisioned",
        "GPUs on nodes the fleet pays for (provisioning, ready or draining).",
        labels=["gpu_model", "capacity_type"],
    )
    for key in sorted(provisioned):
        fam.add_metric(list(key), provisioned[key])
    fams.append(fam)
    fam = GaugeMetricFamily(
        "gpufleet_gpus_allocated",
        "GPUs allocated to running jobs (fractional GPUs count as their share).",
        labels=["gpu_model", "capacity_type"],
    )
    for key in sorted(provisioned):
        fam.add_metric(list(key), allocated.get(key, 0.0))
    fams.append(fam)

    total_prov = sum(provisioned.values())
    fams.append(
        GaugeMetricFamily(
            "gpufleet_gpu_allocation_ratio",
            "Allocated over provisioned GPUs across the fleet (0 when nothing is provisioned).",
            value=(sum(allocated.values()) / total_prov) if total_prov else 0.0,
        )
    )
    whole = [g for g in snap.gpus if g.mig_profile is None and not math.isnan(g.util_pct)]
    fams.append(
        GaugeMetricFamily(
            "gpufleet_gpu_utilization_ratio",
            "Mean SM utilisation of the fleet's GPUs, 0..1 (MIG instances not double counted).",
            value=(sum(g.util_pct for g in whole) / (100.0 * len(whole))) if whole else 0.0,
        )
    )
    fams.append(
        GaugeMetricFamily(
            "gpufleet_fragmentation_ratio",
            "Share of free GPU capacity unusable by the typical task mix, 0..1.",
            value=snap.fragmentation_ratio,
        )
    )

    nodes = _sum_by([((n.capacity_type, n.zone, n.state), 1.0) for n in snap.nodes])
    fam = GaugeMetricFamily(
        "gpufleet_nodes", "Nodes in the fleet.", labels=["capacity_type", "zone", "state"]
    )
    for key in sorted(nodes):
        fam.add_metric(list(key), nodes[key])
    fams.append(fam)

    fams.append(
        CounterMetricFamily(
            "gpufleet_spot_interruptions",
            "Spot nodes reclaimed by the provider since the fleet started.",
            value=float(snap.spot_interruptions_total),
        )
    )

    buckets, total = recovery.cumulative()
    fams.append(
        HistogramMetricFamily(
            "gpufleet_recovery_seconds",
            "Time from a job's interruption until it runs again.",
            buckets=buckets,
            sum_value=total,
        )
    )

    fam = GaugeMetricFamily(
        "gpufleet_cost_dollars_per_second",
        "Current spend rate by tenant, dollars per second (x3600 for $/h).",
        labels=["tenant"],
    )
    for tenant, per_hour in sorted(snap.cost_usd_per_hour_by_tenant.items()):
        fam.add_metric([tenant], per_hour / 3600.0)
    fams.append(fam)
    counter = CounterMetricFamily(
        "gpufleet_cost_dollars", "Cumulative spend by tenant, dollars.", labels=["tenant"]
    )
    for tenant, dollars in sorted(snap.cost_usd_total_by_tenant.items()):
        counter.add_metric([tenant], dollars)
    fams.append(counter)

    fams.append(
        GaugeMetricFamily(
            "gpufleet_sim_time_seconds",
            "Fleet clock of the snapshot: simulated seconds from trace start.",
            value=snap.time_s,
        )
    )
    return fams


class _FleetCollector(Collector):
    def __init__(self, owner: FleetMetrics) -> None:
        self._owner = owner

    def collect(self) -> Iterator[Metric]:
        snap = self._owner.latest
        if snap is not None:
            yield from fleet_families(snap, self._owner.recovery)


class FleetMetrics:
    """Publishes the latest :class:`FleetSnapshot` on a registry.

    ``update`` is called from the thread driving the simulation, scrapes come from the HTTP
    server thread: the snapshot is swapped in one assignment and the histogram has its own lock.
    With ``export_gpus`` (the default) the snapshot's GPUs are also exported under the DCGM names,
    so one registry serves everything the dashboard needs.
    """

    def __init__(self, registry: CollectorRegistry, *, export_gpus: bool = True) -> None:
        self.latest: FleetSnapshot | None = None
        self.recovery = _Histogram(RECOVERY_BUCKETS_S)
        registry.register(_FleetCollector(self))
        if export_gpus:
            registry.register(DcgmCollector(self._gpus))

    def _gpus(self) -> tuple[GpuSample, ...]:
        snap = self.latest
        return snap.gpus if snap is not None else ()

    def update(self, snapshot: FleetSnapshot) -> None:
        self.recovery.observe_many(snapshot.recovery_seconds)
        self.latest = snapshot
