"""Live fleet and cost metrics: the simulator's exporter names, computed from the informers.

The dashboard (``dashboards/gpufleet.json``) reads ``gpufleet_*`` families that the simulator's
exporter (:func:`gpufleet.metrics.fleet.fleet_families`) produces from a
:class:`~gpufleet.metrics.snapshot.FleetSnapshot`. On a live fleet this module builds the same
snapshot from the Nodes and Pods the controller watches, so every panel works unchanged:

* nodes by capacity type / zone / state, GPUs provisioned and allocated, pending and running
  pods by namespace ("tenant") and GPU shape, interrupted nodes, recoveries, fragmentation (free
  milli-GPU on partly taken GPUs over all free milli-GPU, as the simulator defines it, from the
  last scheduling cycle's state); the
  per-GPU DCGM families come from dcgm-exporter on a live fleet, not from here;
* cost: each Node costs its price (:class:`PriceBook`: the catalog's on-demand price, a spot
  price from the provider's offerings or the spot price snapshot) from its ``creationTimestamp``
  to the last time it was seen; a namespace is charged, as in the simulator, its running pods'
  share of their node's GPUs × the node's price over the time they have been running. Besides the
  simulator's per-tenant families, ``gpufleet_node_cost_dollars_total`` (and its rate
  ``gpufleet_node_cost_dollars_per_second``) break the spend down by capacity type, zone and
  instance type — price × node-hours.

Totals are exact integrals of that timeline, not sums of per-scrape increments: a node's or
pod's cost is recomputed from its start time at every scrape and, once it disappears, its last
value moves to a closed tally, so the counters never go down. Prices are fixed per node when it
is first seen (a spot node keeps the price it was launched at).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpufleet.catalog.gpus import GpuCatalog, default_gpu_catalog
from gpufleet.catalog.instances import InstanceCatalog, default_instance_catalog
from gpufleet.catalog.spot_prices import SpotPrice
from gpufleet.cloud.provider import Offering
from gpufleet.decisions import CapacityType
from gpufleet.k8s.disruption.interruption import mark_of
from gpufleet.k8s.disruption.recovery_clock import running_since
from gpufleet.k8s.translate import names
from gpufleet.k8s.translate.nodes import NodeSpec
from gpufleet.k8s.translate.pods import PodInfo, parse_time
from gpufleet.k8s.translate.snapshot import ParseCache
from gpufleet.metrics.fleet import RECOVERY_BUCKETS_S, _Histogram, fleet_families
from gpufleet.metrics.snapshot import FleetSnapshot, NodeSample
from gpufleet.state import GPU_MILLI, FleetState

NodeKey = tuple[str, str, str]  # (capacity_type, zone, instance_type)


class PriceBook:
    """USD per hour of a node by (instance type, zone, capacity type).

    On-demand: the catalog's list price. Spot: the provider's offering for that type and zone
    when given, else the spot snapshot's latest price there, else the cheapest zone's of that
    type, else — never guess low — the on-demand price. An instance type the catalog does not
    know costs nothing here and is reported by :meth:`known`."""

    def __init__(self, catalog: InstanceCatalog | None = None,
                 offerings: Iterable[Offering] = (),
                 spot_prices: Iterable[SpotPrice] = ()) -> None:
        cat = catalog if catalog is not None else default_instance_catalog()
        self.on_demand = {it.name: float(it.usd_per_hour) for it in cat}
        latest: dict[tuple[str, str], SpotPrice] = {}
        for sp in spot_prices:
            got = latest.get((sp.instance_type, sp.zone))
            if got is None or sp.timestamp > got.timestamp:
                latest[(sp.instance_type, sp.zone)] = sp
        self.spot: dict[tuple[str, str], float] = {
            k: float(v.price_per_hour) for k, v in latest.items()}
        self.on_demand_offered: dict[tuple[str, str], float] = {}
        for o in offerings:
            book = self.spot if o.capacity_type == CapacityType.SPOT else self.on_demand_offered
            book[(o.instance_type, o.zone)] = float(o.price_per_hour)
        self.spot_any_zone: dict[str, float] = {}
        for (it, _), price in self.spot.items():
            self.spot_any_zone[it] = min(price, self.spot_any_zone.get(it, price))

    def known(self, instance_type: str) -> bool:
        return instance_type in self.on_demand or instance_type in self.spot_any_zone

    def price(self, instance_type: str, zone: str, capacity_type: str) -> float:
        if capacity_type == CapacityType.SPOT.value:
            got = self.spot.get((instance_type, zone), self.spot_any_zone.get(instance_type))
            if got is not None:
                return got
        return self.on_demand_offered.get((instance_type, zone),
                                          self.on_demand.get(instance_type, 0.0))


@dataclass(frozen=True, slots=True)
class _Seen:
    key: NodeKey
    price: float  # USD/hour, fixed when first seen
    since: float  # epoch seconds: creationTimestamp


def gpu_shape(info: PodInfo) -> str:
    """The simulator's shape label: "1", "0.5", "8", or "mig-1g.5gb"."""
    r = info.request
    if r is None:
        return "0"
    if r.mig_profile is not None:
        return f"mig-{r.mig_profile}"
    if r.is_shared:
        return f"{r.gpu_milli / GPU_MILLI:g}"
    return str(r.num_gpu)


class LiveFleet:
    """Turns the informers' objects into a :class:`FleetSnapshot` (and the node-cost tallies)."""

    def __init__(self, prices: PriceBook | None = None, gpus: GpuCatalog | None = None) -> None:
        self.prices = prices or PriceBook()
        self.gpus = gpus or default_gpu_catalog()
        self._lock = threading.Lock()
        self._cache = ParseCache()  # re-parse only the objects that changed since last scrape
        self._nodes: dict[str, _Seen] = {}
        self._node_live: dict[str, float] = {}  # node → dollars so far
        self._node_closed: dict[NodeKey, float] = defaultdict(float)
        self._pod_live: dict[str, tuple[str, float]] = {}  # pod uid → (namespace, dollars)
        self._pod_closed: dict[str, float] = defaultdict(float)
        self._interrupted: set[str] = set()
        self._recoveries: list[float] = []
        self.node_totals: dict[NodeKey, float] = {}
        self.node_rates: dict[NodeKey, float] = {}
        self.fragmentation = 0.0  # from the last scheduling cycle's state (observe_state)

    def add_recoveries(self, seconds: Iterable[float]) -> None:
        with self._lock:
            self._recoveries.extend(seconds)

    def _share(self, info: PodInfo, gpus: int, model: str, compute_slices: int) -> float:
        """The pod's share of its node's GPUs (what its namespace pays of the node's price)."""
        r = info.request
        if r is None or gpus <= 0:
            return 0.0
        if r.mig_profile is not None:
            prof = self.gpus.mig_profile(model, r.mig_profile) if model in self.gpus else None
            slices = compute_slices or 7
            return (prof.compute / slices if prof is not None else 1.0 / slices) / gpus
        return r.total_gpu_milli / (GPU_MILLI * gpus)

    def snapshot(self, nodes: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]],
                 now: float) -> FleetSnapshot:
        with self._lock:
            return self._snapshot(nodes, pods, now)

    def _snapshot(self, nodes: Sequence[Mapping[str, Any]],
                  pods: Sequence[Mapping[str, Any]], now: float) -> FleetSnapshot:
        specs: dict[str, NodeSpec] = {}
        spec: NodeSpec | None  # each Node's, then each pod's Node's (None: not a node we price)
        samples: list[NodeSample] = []
        self.node_rates = defaultdict(float)
        for node in nodes:
            meta = node["metadata"]
            name = meta["name"]
            labels = meta.get("labels") or {}
            try:
                spec = self._cache.node(node, self.gpus)
            except (ValueError, KeyError):
                continue
            specs[name] = spec
            seen = self._nodes.get(name)
            if seen is None:
                it = labels.get(names.INSTANCE_TYPE, "")
                zone = labels.get(names.ZONE, "")
                ct = labels.get(names.CAPACITY_TYPE, CapacityType.ON_DEMAND.value)
                seen = _Seen((ct, zone, it), self.prices.price(it, zone, ct),
                             parse_time(meta.get("creationTimestamp")) or now)
                self._nodes[name] = seen
            self._node_live[name] = seen.price * max(0.0, now - seen.since) / 3600.0
            self.node_rates[seen.key] += seen.price / 3600.0
            marked = mark_of(node) is not None
            if marked:
                self._interrupted.add(name)
            ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                        for c in (node.get("status") or {}).get("conditions") or ())
            state = "draining" if marked or (node.get("spec") or {}).get("unschedulable") \
                else "ready" if ready else "provisioning"
            samples.append(NodeSample(name=name, instance_type=seen.key[2], zone=seen.key[1],
                                      capacity_type=seen.key[0], state=state,
                                      gpu_model=spec.gpu_model, gpus=spec.num_gpus,
                                      allocated_milli=0))
        for gone in [n for n in self._nodes if n not in specs]:
            self._node_closed[self._nodes[gone].key] += self._node_live.pop(gone, 0.0)
            del self._nodes[gone]

        pending: dict[tuple[str, str], int] = defaultdict(int)
        running: dict[tuple[str, str], int] = defaultdict(int)
        alloc: dict[str, float] = defaultdict(float)
        rate: dict[str, float] = defaultdict(float)
        live_pods: set[str] = set()
        for pod in pods:
            try:
                info = self._cache.pod(pod, self.gpus)
            except (ValueError, KeyError):
                continue
            if info.terminal and info.uid in self._pod_live:
                self._finish(info, pod, specs, now)  # closed below at its exact end
            if info.terminal or (not info.ours and not info.node_name):
                continue
            shape = gpu_shape(info)
            if info.pending:
                if info.ours:
                    pending[(info.namespace, shape)] += 1
                continue
            spec = specs.get(info.node_name)
            seen = self._nodes.get(info.node_name)
            if spec is None or seen is None:
                continue
            share = self._share(info, spec.num_gpus, spec.gpu_model, spec.mig_compute_slices)
            alloc[info.node_name] += share * spec.num_gpus
            if info.terminating:
                continue
            running[(info.namespace, shape)] += 1
            start = running_since(pod)
            if start is None or share <= 0:
                continue
            live_pods.add(info.uid)
            rate[info.namespace] += seen.price * share
            self._pod_live[info.uid] = (
                info.namespace, seen.price * share * max(0.0, now - start) / 3600.0)
        # the parses of objects no longer listed go: a long-lived controller sees every pod the
        # cluster ever ran
        self._cache.prune({n["metadata"]["name"] for n in nodes},
                          {f"{p['metadata'].get('namespace')}/{p['metadata'].get('name')}"
                           for p in pods})
        for gone in [u for u in self._pod_live if u not in live_pods]:
            ns, dollars = self._pod_live.pop(gone)
            self._pod_closed[ns] += dollars
        cost_total: dict[str, float] = defaultdict(float, self._pod_closed)
        for ns, dollars in self._pod_live.values():
            cost_total[ns] += dollars
        for key in (*pending, *running):
            cost_total.setdefault(key[0], 0.0)
            rate.setdefault(key[0], 0.0)

        totals: dict[NodeKey, float] = defaultdict(float, self._node_closed)
        for name, dollars in self._node_live.items():
            totals[self._nodes[name].key] += dollars
        self.node_totals = dict(totals)
        samples = [replace(s, allocated_milli=round(alloc.get(s.name, 0.0) * GPU_MILLI))
                   for s in samples]
        recoveries, self._recoveries = tuple(self._recoveries), []
        return FleetSnapshot(
            time_s=now, gpus=(), nodes=tuple(samples), jobs_pending=dict(pending),
            jobs_running=dict(running), spot_interruptions_total=len(self._interrupted),
            recovery_seconds=recoveries, cost_usd_total_by_tenant=dict(cost_total),
            cost_usd_per_hour_by_tenant=dict(rate),
            fragmentation_ratio=self.fragmentation)

    def _finish(self, info: PodInfo, pod: Mapping[str, Any], specs: Mapping[str, Any],
                now: float) -> None:
        """A pod that just ended: its cost up to its containers' finish, not to the last scrape."""
        spec, seen = specs.get(info.node_name), self._nodes.get(info.node_name)
        status = pod.get("status") or {}
        ends = [parse_time((c.get("state") or {}).get("terminated", {}).get("finishedAt"))
                for c in status.get("containerStatuses") or ()]
        starts = [parse_time((c.get("state") or {}).get("terminated", {}).get("startedAt"))
                  for c in status.get("containerStatuses") or ()]
        end, start = max(ends, default=0.0), max(starts, default=0.0)
        if spec is None or seen is None or not end or not start:
            return
        share = self._share(info, spec.num_gpus, spec.gpu_model, spec.mig_compute_slices)
        self._pod_live[info.uid] = (info.namespace,
                                    seen.price * share * max(0.0, min(end, now) - start) / 3600)

    def observe_state(self, state: FleetState) -> None:
        """Fragmentation as the simulator defines it — the share of free milli-GPU that sits on
        partly taken GPUs — from the state the scheduler's cycle just built (building another
        snapshot per scrape would double the controller's work)."""
        free = state.free_milli[: state.n][state.active[: state.n]]
        free = free[free >= 0]
        total = int(free.sum())
        partial = int(free[(free > 0) & (free < GPU_MILLI)].sum())
        self.fragmentation = partial / total if total else 0.0


def node_cost_families(totals: Mapping[NodeKey, float],
                       rates: Mapping[NodeKey, float]) -> list[Metric]:
    labels = ["capacity_type", "zone", "instance_type"]
    total = CounterMetricFamily("gpufleet_node_cost_dollars",
                                "Spend on nodes (price x node-hours), dollars.", labels=labels)
    for key in sorted(totals):
        total.add_metric(list(key), totals[key])
    rate = GaugeMetricFamily("gpufleet_node_cost_dollars_per_second",
                             "Current spend rate of the nodes, dollars per second (x3600: $/h).",
                             labels=labels)
    for key in sorted(rates):
        rate.add_metric(list(key), rates[key])
    return [total, rate]


class LiveFleetCollector(Collector):
    """Renders the live fleet at scrape time, only while ``active()`` (the leading replica: a
    standby exporting too would double every sum on the dashboard)."""

    def __init__(self, fleet: LiveFleet, nodes: Callable[[], Sequence[Mapping[str, Any]]],
                 pods: Callable[[], Sequence[Mapping[str, Any]]], active: Callable[[], bool],
                 clock: Callable[[], float]) -> None:
        self.fleet = fleet
        self.nodes, self.pods, self.active, self.clock = nodes, pods, active, clock
        self.recovery = _Histogram(RECOVERY_BUCKETS_S)

    def collect(self) -> Iterator[Metric]:
        if not self.active():
            return
        snap = self.fleet.snapshot(self.nodes(), self.pods(), self.clock())
        self.recovery.observe_many(snap.recovery_seconds)
        yield from (f for f in fleet_families(snap, self.recovery)
                    if f.name != "gpufleet_sim_time_seconds")
        yield from node_cost_families(self.fleet.node_totals, self.fleet.node_rates)
