"""The capacity controller's pure part: API-shaped facts in, the shared policies' inputs out.

The scale-up and scale-down *decisions* are the simulator's own code
(:class:`gpufleet.provisioning.ScaleUpPolicy`, :class:`gpufleet.provisioning.DisruptionPolicy`);
this module only translates what the live driver sees into their inputs:

* pending pods the cycle refused → ``PendingPod`` (a gang's members share its job id and size);
  a pod may go on spot only where it tolerates the spot taint ``karpenter.sh/capacity-type=spot``
  — ``control.admission``'s rule, read from the pod's own tolerations because the snapshot lists
  only taints some node already carries;
* the provider's offerings → ``Offer`` per instance type and capacity type (on-demand in the zone
  ``provisioning.on_demand_zone`` picks; spot at the cheapest zone available now) and, for a
  provider without market history, a ``ZoneMarket`` per available spot zone;
* launches recorded or instances booting whose Node is not in the snapshot → ``InFlight``;
* gpufleet-launched Nodes in the snapshot → ``NodeView`` (emptiness from :class:`EmptySince`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from gpufleet.catalog.gpus import default_gpu_catalog
from gpufleet.catalog.instances import InstanceType
from gpufleet.cloud.provider import Offering
from gpufleet.decisions import CapacityType
from gpufleet.k8s.translate.pods import PodInfo, finished, stays_on_drain, tolerates
from gpufleet.k8s.translate.snapshot import Snapshot
from gpufleet.market.bidding import ZoneMarket
from gpufleet.provisioning import InFlight, NodeShape, NodeView, Offer, PendingPod, PodView
from gpufleet.provisioning.zones import on_demand_zone

SPOT_TAINT = "karpenter.sh/capacity-type=spot:NoSchedule"


def spot_ok(pod: PodInfo) -> bool:
    """Whether the pod may be interrupted: it tolerates the spot taint (admission's rule)."""
    return any(tolerates(t, SPOT_TAINT) for t in pod.tolerations)


def pending_pods(snap: Snapshot, refused: Iterable[str], now: float) -> list[PendingPod]:
    """The refused pods with a readable request: those that cannot go on spot first, then the
    rest, each in the snapshot's order. ``ScaleUpPolicy`` lets booting on-demand nodes absorb
    pods greedily in list order, so a spot-tolerant pod listed first would take an on-demand
    node's room from a pod that has nowhere else to go, and a second node would be launched."""
    want = set(refused)
    sizes: dict[str, int] = {}
    for p in snap.pending:
        if p.group is not None:
            sizes[p.group] = sizes.get(p.group, 0) + 1
    out = []
    for p in snap.pending:
        if p.key not in want or p.request is None or p.refusal is not None:
            continue
        req = replace(p.request, tolerations=frozenset())
        gang = max(p.min_available, sizes.get(p.group, 1)) if p.group is not None else 1
        out.append(PendingPod(p.group or p.key, req, spot_ok(p), max(0.0, now - p.created_s),
                              gang_size=gang))
    return sorted(out, key=lambda p: p.spot_ok)


def offers_from(offerings: Sequence[Offering], types: Mapping[str, InstanceType],
                od_nodes: Mapping[tuple[str, str], int], mig: bool = False) -> list[Offer]:
    """One on-demand and (where some zone has capacity now) one spot offer per type; with
    ``mig`` (some pending pod asks for a MIG profile) each MIG-capable type is offered a second
    time with every GPU in MIG mode, as the simulator's offers do (``control.offers``): a MIG
    pod fits no whole-GPU shape, so without it a MIG pod would never get a node."""
    od: dict[str, dict[str, float]] = {}
    spot: dict[str, float] = {}
    for o in offerings:
        if o.instance_type not in types or not o.available:
            continue
        if o.capacity_type == CapacityType.ON_DEMAND:
            od.setdefault(o.instance_type, {})[o.zone] = float(o.price_per_hour)
        else:
            p = float(o.price_per_hour)
            spot[o.instance_type] = min(p, spot.get(o.instance_type, p))
    out = []
    for name in sorted(set(od) | set(spot)):
        it = types[name]
        shapes = [NodeShape.of(it)]
        if mig and mig_capable(it):
            shapes.append(NodeShape.of(it, mig=True))
        for shape in shapes:
            if name in od:
                zones = [z for z in it.zones if z in od[name]] or sorted(od[name])
                counts = {z: od_nodes.get((name, z), 0) for z in zones}
                zone = on_demand_zone(zones, od[name], counts)
                out.append(Offer(name, CapacityType.ON_DEMAND, shape, od[name][zone], zone))
            if name in spot:
                out.append(Offer(name, CapacityType.SPOT, shape, spot[name]))
    return out


def mig_capable(it: InstanceType) -> bool:
    """The type's GPU model can be put in MIG mode (A100, H100, …)."""
    cat = default_gpu_catalog()
    return it.gpu_model in cat and cat[it.gpu_model].mig is not None


def markets_from(offerings: Sequence[Offering],
                 types: Mapping[str, InstanceType]) -> dict[str, list[ZoneMarket]]:
    """Spot zones available now, with the current price as their only history."""
    out: dict[str, list[ZoneMarket]] = {}
    for o in offerings:
        if o.capacity_type != CapacityType.SPOT or not o.available or o.instance_type not in types:
            continue
        od = Decimal(types[o.instance_type].usd_per_hour)
        out.setdefault(o.instance_type, []).append(
            ZoneMarket(o.zone, od, (Decimal(o.price_per_hour),)))
    return out


def inflight(booting: Iterable[tuple[str, CapacityType, str, bool]],
             types: Mapping[str, InstanceType]) -> list[InFlight]:
    """(instance type, capacity type, zone, MIG mode) of each launch not yet a Node in the
    snapshot: a MIG node booting absorbs MIG pods, not whole-GPU ones (and the reverse)."""
    return [InFlight(NodeShape.of(types[t], mig), ct == CapacityType.SPOT, z)
            for t, ct, z, mig in booting if t in types]


@dataclass
class EmptySince:
    """When each node last became empty — or, for the consolidation clock, under-used (in
    memory: a restarted controller starts the clocks again, which only ever delays a
    scale-down)."""

    since: dict[str, float] = field(default_factory=dict)

    def update(self, nodes: Iterable[str], busy: set[str], now: float) -> dict[str, float | None]:
        out: dict[str, float | None] = {}
        names = set(nodes)
        for n in names:
            if n in busy:
                self.since.pop(n, None)
                out[n] = None
            else:
                out[n] = self.since.setdefault(n, now)
        for gone in set(self.since) - names:
            del self.since[gone]
        return out


def node_views(snap: Snapshot, managed: Mapping[str, tuple[InstanceType, bool]],
               empty_since: Mapping[str, float | None],
               movable: Collection[str] = frozenset()) -> list[NodeView]:
    """A ``NodeView`` for each gpufleet-launched node in the snapshot (its room and its pods).
    ``managed``: node → (instance type, spot); ``movable``: keys of the pods consolidation may
    move (:func:`gpufleet.k8s.disruption.consolidation_mark.movable`). A node on a MIG config has
    the MIG shape and its slices' use, so consolidation packs MIG pods by the placement rule."""
    st = snap.state
    pods: dict[str, list[PodView]] = {}
    for a in snap.allocations.values():
        if a.bind.node in managed:
            _, spot = managed[a.bind.node]
            pods.setdefault(a.bind.node, []).append(
                PodView(a.pod.key, a.request, a.pod.key in movable, spot_ok(a.pod)))
    out = []
    for name, (it, spot) in sorted(managed.items()):
        row = st.index.get(name)
        if row is None:
            continue
        gpus = int(st.num_gpus[row])
        # every GPU in MIG mode (an ``all-*`` config): the MIG shape; a node with only some
        # GPUs in MIG mode has no NodeShape and is seen as whole GPUs (conservative for room:
        # MIG GPUs with a slice in use show as taken)
        mig = gpus > 0 and bool((st.mig_compute_total[row, :gpus] > 0).all())
        mig_kw: dict[str, Any] = {}
        if mig:
            mig_kw = dict(mig_used=tuple(int(x) for x in st.mig_used[row, :gpus]),
                          mig_compute_used=tuple(int(x) for x in st.mig_compute_used[row, :gpus]))
        out.append(NodeView(
            name, NodeShape.of(it, mig), spot, tuple(int(x) for x in st.free_milli[row, :gpus]),
            int(st.cpu_free[row]), int(st.mem_free[row]), tuple(pods.get(name, ())),
            empty_since.get(name), None, **mig_kw, usd_per_hour=float(it.usd_per_hour)))
    return out


def with_underused(views: Sequence[NodeView], since: EmptySince, threshold: float,
                   now: float) -> list[NodeView]:
    """``views`` with ``underused_since``: when each node's GPU allocation last fell below
    ``threshold`` (the simulator's rule; ``since`` keeps the clocks between cycles)."""
    busy = {v.name for v in views if v.allocation >= threshold}
    at = since.update([v.name for v in views], busy, now)
    return [replace(v, underused_since=at[v.name]) for v in views]


def pods_to_evict(node: str, pods: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(namespace, name) of the pods that still keep ``node`` busy: bound there, not finished,
    not already terminating; DaemonSet and mirror pods go with the node (the drain's rule)."""
    out = []
    for p in pods:
        meta = p.get("metadata") or {}
        if (p.get("spec") or {}).get("nodeName") != node or meta.get("deletionTimestamp"):
            continue
        if finished(p) or stays_on_drain(p):
            continue
        out.append((meta.get("namespace", "default"), meta["name"]))
    return out
