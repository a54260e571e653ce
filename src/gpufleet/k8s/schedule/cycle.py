"""One scheduling cycle over a snapshot: the pending pods in queue order → decisions as data.

This is the control step the Kubernetes driver runs; every rule in it is the shared policy code:
queue order (``queueing.order.queue_key``), the backfill pass with its blocked-shape memo
(``queueing.order.BackfillPass``), placement (``placement`` policies), gang admission
(``queueing.gang.place_gang``: every member or none) and priority preemption
(``queueing.preemption``). What it returns is plain data the driver applies:

* ``Bind`` for each pod placed (all members of a gang together);
* ``Preempt`` for the victims of at most one preemption per cycle, and none while an earlier
  eviction is still terminating (its pod still holds the room the preemptor waits for);
* ``Refuse`` for each pod left pending, with the placement framework's "0/N nodes are available:
  …" reason (or why its request cannot be read, or what its gang is waiting for).

Placed pods are allocated into the snapshot's state as the pass goes, so later pods see them —
the state is the driver's per-cycle scratch copy, rebuilt from the API next cycle.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import numpy as np

from gpufleet.decisions import Bind, Preempt
from gpufleet.k8s.translate.node_selector import Selector, matches
from gpufleet.k8s.translate.pods import PodInfo, tolerated
from gpufleet.k8s.translate.snapshot import Snapshot
from gpufleet.placement import PlacementResult
from gpufleet.placement.mig import bind_masks
from gpufleet.placement.policy import Policy
from gpufleet.queueing import BackfillPass, queue_key
from gpufleet.queueing.gang import place_gang
from gpufleet.queueing.preemption import Victim, plan_preemption
from gpufleet.state import FleetState, ResourceRequest


@dataclass(frozen=True, slots=True)
class Refuse:
    """Leave ``job_id`` pending: ``message`` goes on its PodScheduled condition and an Event."""

    job_id: str
    message: str
    never: bool = False  # no node of this fleet could ever host it


@dataclass(slots=True)
class Unit:
    """What the queue orders: one pod, or the pending members of one gang."""

    uid: str
    pods: list[PodInfo]
    request: ResourceRequest | None
    refusal: str | None
    priority: int
    created_s: float
    bound_members: int = 0
    min_available: int = 1
    selector: Selector = ()

    @property
    def is_gang(self) -> bool:
        return len(self.pods) > 1 or self.min_available > 1


@dataclass(slots=True)
class CyclePlan:
    decisions: list[Bind | Preempt | Refuse] = field(default_factory=list)

    def of(self, kind: type) -> list:
        return [d for d in self.decisions if isinstance(d, kind)]


def _units(snap: Snapshot) -> list[Unit]:
    groups: dict[str, list[PodInfo]] = {}
    units: list[Unit] = []
    for p in snap.pending:
        if p.group is not None:
            groups.setdefault(p.group, []).append(p)
            continue
        req = p.request
        if req is not None:
            req = replace(req, tolerations=tolerated(p.tolerations, snap.taints))
        units.append(Unit(p.key, [p], req, p.refusal, p.priority, p.created_s,
                          selector=p.selector))
    bound: dict[str, int] = {}
    for a in snap.allocations.values():
        if a.pod.group is not None:
            bound[a.pod.group] = bound.get(a.pod.group, 0) + 1
    for g, members in groups.items():
        members.sort(key=lambda p: p.key)
        reqs = set()
        refusal = next((p.refusal for p in members if p.refusal), None)
        for p in members:
            if p.request is not None:
                reqs.add(replace(p.request, tolerations=tolerated(p.tolerations, snap.taints)))
        if refusal is None and len(reqs) != 1:
            refusal = f"pod group {g}: members ask for different resources (not supported)"
        units.append(Unit(
            g, members, next(iter(reqs)) if len(reqs) == 1 else None, refusal,
            max(p.priority for p in members), min(p.created_s for p in members),
            bound.get(g, 0), max(p.min_available for p in members), members[0].selector,
        ))
    return units


@contextmanager
def only_selected(state: FleetState, selector: Selector,
                  cache: dict[Selector, object]) -> Iterator[tuple[int, int]]:
    """Hide the nodes ``selector`` excludes (inactive) for one placement; yields (live, kept).

    Every filter and scorer starts from the active mask, so this is the whole of node
    selection; the state is exactly restored afterwards.
    """
    n = state.n
    live = int(state.active[:n].sum())
    if not selector:
        yield live, live
        return
    mask = cache.get(selector)
    if mask is None or len(mask) != n:  # type: ignore[arg-type]
        mask = np.array([matches(info.labels, selector) for info in state.nodes[:n]], dtype=bool)
        cache[selector] = mask
    saved = state.active[:n].copy()
    state.active[:n] &= mask
    try:
        yield live, int(state.active[:n].sum())
    finally:
        state.active[:n] = saved


def with_selection(message: str, live: int, kept: int) -> str:
    """Put the nodes the selector excluded back into the framework's "0/N nodes" reason."""
    if live == kept:
        return message
    head = f"0/{kept} nodes are available: "
    extra = f"{live - kept} node(s) didn't match Pod's node affinity/selector"
    rest = message.partition(head)[2]
    new = f"0/{live} nodes are available: {extra}" + (
        f", {rest}" if rest and not rest.startswith("no nodes") else "")
    return message.replace(head + rest, new) if head in message else message


def plan_cycle(
    snap: Snapshot,
    policy: Policy,
    rng: np.random.Generator,
    backfill: BackfillPass | None = None,
    now: float = 0.0,
    preemption: bool = True,
) -> CyclePlan:
    plan = CyclePlan()
    state = snap.state
    units = sorted(_units(snap),
                   key=lambda u: (*queue_key(u.priority, False, u.created_s, 0), u.uid))
    by_id = {u.uid: u for u in units}
    shape_of: dict[str, Hashable] = {}
    masks: dict[Selector, object] = {}
    reasons: dict[Hashable, tuple[str, bool]] = {}
    for u in units:
        shape_of[u.uid] = ((u.request, len(u.pods), u.min_available, u.selector)
                           if u.refusal is None else u.uid)

    def refuse(u: Unit, msg: str, never: bool = False) -> None:
        plan.decisions.extend(Refuse(p.key, msg, never) for p in u.pods)

    def try_place(uid: str) -> bool:
        u = by_id[uid]
        shape = shape_of[uid]
        if u.refusal is not None or u.request is None:
            reasons[shape] = (u.refusal or "unreadable request", True)
            return False
        need = u.min_available - u.bound_members
        if len(u.pods) < need:
            reasons[shape] = (f"pod group {uid}: waiting for {need} members, "
                              f"{len(u.pods)} pending", False)
            return False
        with only_selected(state, u.selector, masks) as (live, kept):
            if len(u.pods) == 1 and not u.is_gang:
                res = policy.place(state, u.request, rng)
                if not isinstance(res, PlacementResult):
                    reasons[shape] = (with_selection(res.reason, live, kept), res.never)
                    return False
                placed = [res]
            else:
                got = place_gang(state, u.request, len(u.pods), policy, rng, uid)
                if not isinstance(got, list):
                    reasons[shape] = (f"pod group {uid} ({len(u.pods)} pods, all or nothing): "
                                      f"{with_selection(got.reason, live, kept)}", got.never)
                    return False
                placed = got
        for p, res in zip(u.pods, placed, strict=True):
            bind = res.to_bind(state, p.key)
            state.allocate(u.request, bind, bind_masks(state, bind, policy.catalog))
            plan.decisions.append(bind)
        return True

    cand = [(u.uid, shape_of[u.uid], u.created_s) for u in units]
    result = (backfill or BackfillPass()).run(cand, now, try_place, len(set(shape_of.values())))
    started = set(result.started)
    left = [u for u in units if u.uid not in started]
    for u in left:
        shape = shape_of[u.uid]
        if shape in reasons:
            refuse(u, *reasons[shape])
        elif result.stopped_for is not None:
            refuse(u, f"waiting behind {result.stopped_for}, which has starved past the limit")
        else:
            refuse(u, "not tried this cycle")
    if preemption:
        _preempt(snap, left, policy, plan, masks)
    return plan


def _preempt(snap: Snapshot, left: list[Unit], policy: Policy, plan: CyclePlan,
             masks: dict[Selector, object]) -> None:
    """One preemption per cycle, for the first pending pod (queue order) it can help."""
    if any(p.terminating and p.node_name for p in snap.pods.values()):
        return  # an eviction is still in progress: its room is not free yet
    victims = [
        Victim(a.pod.key, a.pod.priority, a.pod.created_s, a.request, a.bind, a.masks)
        for a in snap.allocations.values()
        if a.pod.group is None
    ]
    if not victims:
        return
    for u in left:
        if u.is_gang or u.request is None or u.refusal or u.pods[0].preempt_never:
            continue
        if not any(v.priority < u.priority for v in victims):
            continue
        with only_selected(snap.state, u.selector, masks):
            got = plan_preemption(snap.state, u.request, u.priority, victims, policy, u.uid)
        if got is not None:
            plan.decisions.extend(got.preempts)
            return
