"""The capacity controller's pure part: API-shaped facts in, the control layer's inputs out.

The rules are the control layer's, the same the simulator calls; this module only translates
what the live driver sees into their inputs:

* pending pods the cycle refused → ``PendingPod`` (a gang's members share its job id and size);
  a pod may go on spot only where it tolerates the spot taint (``pods.spot_ok``) and the deadline
  guard has not pinned it to on-demand (``translate.deadlines``); ``urgent`` is the guard's
  ``control.deadline.urgent`` (its slack cannot absorb scale-up's wait trigger); with team
  queues, each job's ``control.teams.Gate`` (``k8s.schedule.cycle.launch_gates``): nothing for
  work its quota or budget holds, spot only for a ``spot-only`` team's (the simulator's rule);
* right-sized nodes (``control.right_size.cap_for``, :func:`node_caps`): a pending pod that
  cannot move (consolidation's rule says no, or the fleet does not checkpoint, or it is a pod
  group's) and states more work (``gpufleet.io/duration``) than the scale-down horizon may use
  only nodes of at most ``max(2 × its GPUs, the smallest fitting type)`` — the cycle's
  eligibility mask and scale-up's ``PendingPod.max_node_gpus``, as in the simulator;
* the provider's offerings → prices per type and zone → ``control.offers.offer_list`` (the
  simulator's offer rule) and, for a provider without market history, a ``ZoneMarket`` per
  available spot zone;
* launches recorded or instances booting whose Node is not in the snapshot → ``InFlight``;
* gpufleet-launched Nodes in the snapshot → ``control.views.node_view``, with the empty and
  underused clocks of ``control.node_clocks``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from decimal import Decimal
from typing import Any

from gpufleet.catalog.instances import InstanceType
from gpufleet.cloud.provider import Instance, Offering
from gpufleet.control.deadline import GuardConfig, urgent
from gpufleet.control.node_clocks import Idle, SinceClock, idle_state
from gpufleet.control.offers import offer_list
from gpufleet.control.right_size import cap_for
from gpufleet.control.spot_swap import SwapNode
from gpufleet.control.teams import Gate
from gpufleet.control.value_of_time import Delay, spot_eligible, value_of_time
from gpufleet.control.views import node_view, spot_risk
from gpufleet.decisions import CapacityType
from gpufleet.k8s.translate.deadlines import deadline_view, pinned_on_demand
from gpufleet.k8s.translate.pods import PodInfo, finished, spot_ok, stays_on_drain
from gpufleet.k8s.translate.snapshot import Snapshot
from gpufleet.market.bidding import ZoneMarket
from gpufleet.provisioning import InFlight, NodeShape, NodeView, Offer, PendingPod, PodView
from gpufleet.provisioning.binpack import fits_shape, gpu_milli_of
from gpufleet.state import GPU_MILLI, FleetState, ResourceRequest
from gpufleet.traces.jobs import JobSpec


def _urgent(p: PodInfo, guards: GuardConfig | None, now: float) -> bool:
    """The deadline guard's ``urgent`` for a pending pod (False without guards)."""
    if guards is None:
        return False
    view = deadline_view(p, spot_ok(p))
    return view is not None and urgent(view.spec, 0.0, False, now, guards)


def node_caps(snap: Snapshot, types: Iterable[InstanceType], unneeded_s: float,
              checkpointing: bool, movable: Collection[str], guards: GuardConfig | None,
              now: float) -> dict[str, int]:
    """Job id (pod group or pod key) → the largest node in GPUs its pods may use
    (``control.right_size.cap_for``); absent: any node. ``types``: what scale-up may launch;
    ``movable``: the pods consolidation may move."""
    shapes = [t for t in types if t.gpus > 0]
    sizes: dict[tuple[object, ...], tuple[int, ...]] = {}
    groups: dict[str, int] = {}
    for p in snap.pending:
        if p.group is not None:
            groups[p.group] = groups.get(p.group, 0) + 1
    out: dict[str, int] = {}
    for p in snap.pending:
        req = p.request
        if req is None or p.refusal is not None or p.work_s is None:
            continue
        mig = req.mig_profile is not None
        key = (req, mig)
        if key not in sizes:
            sizes[key] = tuple(t.gpus for t in shapes if fits_shape(req, NodeShape.of(t, mig)))
        replicas = max(p.min_available, groups.get(p.group, 1)) if p.group is not None else 1
        cap = cap_for(req, checkpointing and p.key in movable, replicas, p.work_s, unneeded_s,
                      _urgent(p, guards, now), sizes[key])
        if cap is not None:
            job = p.group or p.key
            out[job] = min(cap, out.get(job, cap))
    return out


def pending_pods(snap: Snapshot, refused: Iterable[str], now: float,
                 guards: GuardConfig | None = None, checkpointing: bool = True,
                 gates: Mapping[str, Gate] | None = None,
                 caps: Mapping[str, int] | None = None) -> list[PendingPod]:
    """The refused pods with a readable request (``guards``: the deadline guards' settings, None
    when they are off; ``gates``: job id — pod group or pod key — → its team gate, None without
    queues, absent: ANY): those that cannot go on spot first, then the rest, each in the
    snapshot's order. A SKIP job contributes no pod; a SPOT one asks for spot only, whatever
    its toleration or pin (the budget is the harder limit, as in the cycle).

    ``ScaleUpPolicy`` lets booting on-demand nodes absorb pods greedily in list order, so a
    spot-tolerant pod listed first would take an on-demand node's room from a pod that has
    nowhere else to go, and a second node would be launched."""
    want = set(refused)
    sizes: dict[str, int] = {}
    for p in snap.pending:
        if p.group is not None:
            sizes[p.group] = sizes.get(p.group, 0) + 1
    out = []
    for p in snap.pending:
        if p.key not in want or p.request is None or p.refusal is not None:
            continue
        job = p.group or p.key
        gate = Gate.ANY if gates is None else gates.get(job, Gate.ANY)
        if gate is Gate.SKIP:
            continue
        req = replace(p.request, tolerations=frozenset())
        gang = max(p.min_available, sizes.get(p.group, 1)) if p.group is not None else 1
        ok = spot_ok(p)
        pinned = (p.on_demand_only or pinned_on_demand(p, ok, guards, now)
                  or not spot_eligible(bool(p.latency_sensitive), p.value_of_time or 0.0,
                                       p.work_s is not None))
        hurry = _urgent(p, guards, now)
        spot_only = gate is Gate.SPOT
        risk = None
        if ok and p.work_s is not None:  # what a reclaim would cost it (market.spot_cost); a
            # pod states its work, not its checkpoint costs: JobSpec's defaults stand for them
            risk = spot_risk(_spec(p, req), 0.0, False, now, checkpointing)
        out.append(PendingPod(job, req, spot_only or (ok and not pinned),
                              max(0.0, now - p.created_s), hurry, gang_size=gang,
                              spot_only=spot_only, risk=risk,
                              max_node_gpus=(caps or {}).get(job)))
    return sorted(out, key=lambda p: p.spot_ok)


def _spec(p: PodInfo, req: ResourceRequest, delay: Delay | None = None) -> JobSpec:
    """The pod as a job: its stated work (``gpufleet.io/duration``, 0 when not stated),
    deadline and price of delay (``delay``, else the pod's own fields: a pending pod's are
    resolved by ``k8s.settings.apply_levers``); a pod states no checkpoint or restart cost, so
    JobSpec's defaults stand for them."""
    if delay is None:
        delay = Delay(p.value_of_time or 0.0, bool(p.latency_sensitive))
    return JobSpec(p.key, p.created_s, p.work_s or 0.0, req, deadline_s=p.deadline_s,
                   value_of_time_usd_per_gpu_hour=delay.usd_per_gpu_hour,
                   latency_sensitive=delay.latency_sensitive)


def done_s(p: PodInfo, now: float) -> float:
    """The work a running pod has done: since its start (a lower bound after a restart; 0 when
    it has not started)."""
    return max(0.0, now - p.started_s) if p.started_s is not None else 0.0


def running_pods(infos: Iterable[PodInfo], now: float, checkpointing: bool,
                 delay: Callable[[PodInfo], Delay] | None = None) -> list[PendingPod]:
    """Running pods as scale-up would see them queued now, for the on-demand → spot swap
    (``control.spot_swap``: the launch is what scale-up would launch for them): spot-tolerant,
    with what a reclaim would cost each (``market.spot_cost``, its delay priced by ``delay``:
    ``k8s.settings.LiveDelays.of_pod``) where it states its work."""
    out = []
    for p in infos:
        if p.request is None:
            continue
        req = replace(p.request, tolerations=frozenset())
        risk = None
        if p.work_s is not None:
            risk = spot_risk(_spec(p, req, delay(p) if delay is not None else None),
                             done_s(p, now), False, now, checkpointing)
        out.append(PendingPod(p.key, req, True, 0.0, risk=risk))
    return out


def swap_node(view: NodeView, infos: Sequence[PodInfo], it: InstanceType, now: float,
              provisioning_delay_s: float,
              delay: Callable[[PodInfo], Delay] | None = None) -> SwapNode:
    """An on-demand node as the swap reads it (``control.spot_swap.SwapNode``): its price, its
    pods' GPUs, the least work any of them has done (``done_s``), one move's cost in
    seconds (checkpoint + restart, JobSpec's defaults, + the provisioning delay) and what an
    hour of their delay costs their owners (Σ GPUs × value of time, by ``delay``:
    ``k8s.settings.LiveDelays.of_pod``)."""
    specs = [_spec(p, p.request, delay(p) if delay is not None else None)
             for p in infos if p.request is not None]
    move = max((s.checkpoint_cost_s + s.restart_overhead_s for s in specs), default=0.0)
    return SwapNode(view.name, float(it.usd_per_hour), it.gpus,
                    tuple(p.job_id for p in view.pods),
                    sum(gpu_milli_of(s.request) for s in specs) / GPU_MILLI,
                    min((done_s(p, now) for p in infos), default=0.0),
                    move + provisioning_delay_s,
                    sum(gpu_milli_of(s.request) / GPU_MILLI * value_of_time(s) for s in specs))


def arrivals(snap: Snapshot, seen: Collection[str]) -> tuple[list[tuple[float, float]], set[str]]:
    """The pods no earlier cycle saw, as ``(created_s, GPUs)`` arrivals for the headroom's sample
    (``control.headroom``) in creation order, and the keys to remember (those in the snapshot:
    a pod that left is not counted again, and the set stays the snapshot's size). A requeued
    pod replaces an interrupted one and is no arrival, as the simulator counts only first
    arrivals."""
    new = sorted((p.created_s, gpu_milli_of(p.request) / GPU_MILLI)
                 for k, p in snap.pods.items()
                 if k not in seen and k not in snap.requeued and p.request is not None)
    return new, set(snap.pods)


def offers_from(offerings: Sequence[Offering], types: Mapping[str, InstanceType],
                od_nodes: Mapping[tuple[str, str], int], mig: bool = False) -> list[Offer]:
    """The control layer's offers (``control.offers.offer_list``) at the provider's prices:
    on-demand per type and zone offered, spot at the cheapest zone available now."""
    od: dict[str, dict[str, float]] = {}
    spot: dict[str, float] = {}
    for o in offerings:
        if o.instance_type not in types or not o.available:
            continue
        p = float(o.price_per_hour)
        if o.capacity_type == CapacityType.ON_DEMAND:
            od.setdefault(o.instance_type, {})[o.zone] = p
        else:
            spot[o.instance_type] = min(p, spot.get(o.instance_type, p))
    return offer_list(types.values(), od, spot, od_nodes, mig)


def live_offers(offerings: Sequence[Offering], live: Iterable[Instance],
                types: Mapping[str, InstanceType], mig: bool) -> list[Offer]:
    """:func:`offers_from` with the on-demand instances of ``live`` counted per (type, zone)."""
    od_nodes: dict[tuple[str, str], int] = {}
    for i in live:
        if i.capacity_type == CapacityType.ON_DEMAND:
            od_nodes[(i.instance_type, i.zone)] = od_nodes.get((i.instance_type, i.zone), 0) + 1
    return offers_from(offerings, types, od_nodes, mig=mig)


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


def shape_in_state(state: FleetState, name: str, it: InstanceType) -> NodeShape:
    """The Node's packing shape: MIG when every GPU is in MIG mode (an ``all-*`` config); a
    node with only some GPUs in MIG mode has no NodeShape and is seen as whole GPUs
    (conservative for room: MIG GPUs with a slice in use show as taken)."""
    row = state.index[name]
    gpus = int(state.num_gpus[row])
    return NodeShape.of(it, gpus > 0 and bool((state.mig_compute_total[row, :gpus] > 0).all()))


def alloc_milli(v: NodeView) -> float:
    """The milli-GPU the view's pods hold (a MIG node: its compute slices' share)."""
    if v.shape.mig:
        return v.allocation * GPU_MILLI * v.shape.gpus
    return GPU_MILLI * v.shape.gpus - sum(v.free_milli)


def node_views(snap: Snapshot, managed: Mapping[str, tuple[InstanceType, bool]],
               pods: Sequence[Mapping[str, Any]], empty: SinceClock, underused: SinceClock,
               threshold: float, now: float,
               movable: Collection[str] = frozenset()) -> list[NodeView]:
    """A ``NodeView`` (``control.views.node_view``) for each gpufleet-launched Node in the
    snapshot, with its pods and clocks. ``managed``: node → (instance type, spot); ``pods``: the
    API's pods (whether a node is empty is :func:`pods_to_evict`'s answer); ``movable``: keys
    of the pods consolidation may move (``consolidation_mark.movable_keys``); ``threshold``:
    the scenario's ``utilization_threshold``. Both clocks are updated as of ``now``."""
    views = views_without_clocks(snap, managed, movable)
    state = {v.name: idle_state(len(pods_to_evict(v.name, pods)), alloc_milli(v), v.shape.gpus,
                                threshold) for v in views}
    names = list(state)
    e = empty.update(names, [n for n, s in state.items() if s is Idle.EMPTY], now)
    u = underused.update(names, [n for n, s in state.items() if s is Idle.UNDERUSED], now)
    return [replace(v, empty_since=e[v.name], underused_since=u[v.name]) for v in views]


def views_without_clocks(snap: Snapshot, managed: Mapping[str, tuple[InstanceType, bool]],
                         movable: Collection[str] = frozenset()) -> list[NodeView]:
    """The managed Nodes' room and pods, neither empty nor underused (a consolidation's
    re-check of one marked Node needs no clock)."""
    st = snap.state
    on: dict[str, list[PodView]] = {}
    for a in snap.allocations.values():
        if a.bind.node in managed:
            on.setdefault(a.bind.node, []).append(
                PodView(a.pod.key, a.request, a.pod.key in movable, spot_ok(a.pod)))
    out = []
    for name, (it, spot) in sorted(managed.items()):
        if name not in st.index:
            continue
        out.append(node_view(st, name, shape_in_state(st, name, it), spot,
                             float(it.usd_per_hour), tuple(on.get(name, ()))))
    return out


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
