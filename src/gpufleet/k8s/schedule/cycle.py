"""One scheduling cycle over a snapshot: the snapshot's pods → ``control.cycle`` → decisions.

Every rule of the cycle (queue order with the requeued/urgent flags, backfill, gangs, priority
preemption, pinning) is ``gpufleet.control.cycle.plan_cycle``, the same function the simulator
calls. This module only translates the Kubernetes world into its driver-neutral inputs:

* a :class:`~gpufleet.control.cycle.PendingUnit` per pending pod, or one per pod group (its
  pending members, ``min-available`` less the members already running), with the pod's
  tolerations matched against the fleet's taints, its ``nodeSelector``/required affinity as a
  node-eligibility mask over the state's rows, and the requeued flag for the replacement of an
  interrupted checkpointing Job's pod (``k8s.translate.pods.requeued_keys``);
* the victims: the running pods outside pod groups (a gang is not torn apart for another pod);
* ``evicting``: a pod this driver evicted (or anyone deleted) still terminates on a node, so its
  room is not free yet and no new preemption starts;
* gang room (``control.gang_room``, :func:`gang_room_input`): every running pod with the end
  its ``gpufleet.io/duration`` implies (from ``status.startTime``; a pod without one never
  ends), and the pods an eviction for a gang may take — those consolidation may move (a
  controller recreates them, no gang, no ``do-not-disrupt``), each assumed to lose the
  checkpoint write and the restart of a checkpointing Job (``JobSpec``'s defaults: a pod does
  not state them) and to leave within its termination grace period;
* team quotas (``k8s.queues``): each unit and victim tagged with its namespace's queue and its
  size in GPU-equivalents, and the queues' book passed as the simulator passes its own — so
  admission within quota, borrowing, reclaim and the "over quota" reason are the control layer's.

The plan is ``Bind`` for each pod placed (all members of a gang together), ``Preempt`` for the
victims of at most one preemption, and ``Refuse`` for each pod left pending with the placement
framework's "0/N nodes are available: …" reason (or why its request cannot be read, or what its
gang is waiting for).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import overload

import numpy as np

from gpufleet.catalog.gpus import GpuCatalog
from gpufleet.control.cycle import CyclePlan, PendingUnit, Victim
from gpufleet.control.cycle import plan_cycle as plan_units
from gpufleet.control.gang_room import (
    GangRoomBook,
    GangRoomInput,
    GangRoomSettings,
    Movable,
    eviction_loss_s,
)
from gpufleet.control.right_size import rows_within
from gpufleet.control.teams import Gate, scale_up_gates
from gpufleet.decisions import Bind, Refuse
from gpufleet.k8s.dra.claims import Holding, claim_key, reserved_for
from gpufleet.k8s.queues.tracker import LiveQuota
from gpufleet.k8s.queues.usage import tag_units, tag_victims
from gpufleet.k8s.schedule.blocked import blocked_pods
from gpufleet.k8s.translate.node_selector import Selector, matches
from gpufleet.k8s.translate.pods import PodInfo, tolerated_now
from gpufleet.k8s.translate.snapshot import Allocation, MigMasks, Snapshot
from gpufleet.placement.mig import bind_masks
from gpufleet.placement.policy import Policy
from gpufleet.queueing import BackfillPass
from gpufleet.queueing.teams.quota import QuotaBook
from gpufleet.state import GPU_MILLI, FleetState, ResourceRequest
from gpufleet.traces.jobs import JobSpec

# what a pod does not state: a checkpointing Job's checkpoint write and restart (JobSpec's
# defaults, as the live spot-cost rule assumes), and kube's default termination grace period
_UNSTATED = JobSpec("", 0.0, 0.0, ResourceRequest())
_WRITE_S = _UNSTATED.checkpoint_cost_s
_RESTART_S = _UNSTATED.restart_overhead_s
_GRACE_S = 30.0


def eligible_rows(state: FleetState, selector: Selector,
                  cache: dict[Selector, np.ndarray]) -> np.ndarray | None:
    """The rows whose Node labels satisfy ``selector`` (None: no selector, every row)."""
    if not selector:
        return None
    n = state.n
    mask = cache.get(selector)
    if mask is None or len(mask) != n:
        mask = np.array([matches(info.labels, selector) for info in state.nodes[:n]], dtype=bool)
        cache[selector] = mask
    return mask


def _rows_named(state: FleetState, names: frozenset[str]) -> np.ndarray:
    mask = np.zeros(state.n, dtype=bool)
    for name in names:
        if name in state.index:
            mask[state.index[name]] = True
    return mask


def device_mask(snap: Snapshot, pod: PodInfo) -> np.ndarray | None:
    """Where a pod's GPUs can come from: :func:`_device_source_mask`, and for a pod whose claim
    has CEL selectors placement does not read, only the nodes whose devices they admit
    (:func:`~gpufleet.k8s.dra.claims.selector_nodes`)."""
    pc = snap.claims.get(pod.key)
    cel = _rows_named(snap.state, pc.nodes) if pc is not None and pc.nodes is not None else None
    return _and(_device_source_mask(snap, pod), cel)


def _device_source_mask(snap: Snapshot, pod: PodInfo) -> np.ndarray | None:
    """Where a pod's GPUs can come from: a pod with ResourceClaims only from nodes whose
    devices are published as slices (its GPUs are written into its claims); a pod asking
    ``nvidia.com/gpu`` not from nodes that publish their GPUs only as devices (no device plugin
    there would honour the assignment) unless a DeviceClass maps its resource (then its claim
    is created there); a MIG device through a claim not from nodes with static MIG instances
    (:attr:`~gpufleet.k8s.dra.devices.NodeDevices.static_mig`); a pod the general allocator
    serves, any node (:func:`device_mask` keeps it to where its claims fit). None: no
    restriction."""
    if snap.dra is None:
        return None
    mig = pod.request is not None and pod.request.mig_profile is not None
    pc = snap.claims.get(pod.key)
    if pc is not None and pc.general:  # any driver's node: the general allocator's nodes
        return None
    if pod.uses_claims:
        return _rows_named(snap.state, snap.dra_nodes - snap.static_mig_nodes if mig
                           else snap.dra_nodes)
    if pod.key in snap.claims:  # extended resources a DeviceClass maps: a claim where needed
        if mig and snap.static_mig_nodes & snap.device_only_nodes:
            return ~_rows_named(snap.state, snap.static_mig_nodes & snap.device_only_nodes)
        return None
    if pod.request is not None and pod.request.num_gpu and snap.device_only_nodes:
        return ~_rows_named(snap.state, snap.device_only_nodes)
    return None


def _source(snap: Snapshot, pod: PodInfo) -> tuple[int, frozenset[str] | None]:
    """Where the pod's GPUs come from (part of its blocked-shape key: the node masks differ):
    0 the device plugin, 1 its claims, 2 a claim for its mapped extended resources; and the
    nodes its claim's CEL selectors admit (None: no such selector)."""
    pc = snap.claims.get(pod.key)
    return (1 if pod.uses_claims else 2 if pc is not None else 0,
            pc.nodes if pc is not None else None)


def _and(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
    return b if a is None else a if b is None else a & b


def pending_units(snap: Snapshot, caps: Mapping[str, int] | None = None) -> list[PendingUnit]:
    """The snapshot's pending pods as the cycle's units (see the module docstring); a pod
    pinned to its allocated claims' node is bound there by the driver, not planned. ``caps``:
    job id → the largest node (GPUs) it may use (right-sized nodes,
    ``k8s.capacity.inputs.node_caps``): its rows within that size only. A unit's value of time
    is its pod's (resolved by ``k8s.settings.apply_levers``; a pod group: its members'
    highest), read by the gang room's prices."""
    state = snap.state
    masks: dict[Selector, np.ndarray] = {}
    caps = caps or {}
    within: dict[int, np.ndarray] = {}

    def capped(job: str, mask: np.ndarray | None) -> np.ndarray | None:
        cap = caps.get(job)
        if cap is None:
            return mask
        if cap not in within:
            within[cap] = rows_within(state, cap)
        return _and(mask, within[cap])

    groups: dict[str, list[PodInfo]] = {}
    units: list[PendingUnit] = []
    for p in snap.pending:
        pod_claims = snap.claims.get(p.key)
        if pod_claims is not None and pod_claims.pinned is not None:
            continue
        if p.group is not None:
            groups.setdefault(p.group, []).append(p)
            continue
        req = p.request
        if req is not None:
            req = replace(req, tolerations=tolerated_now(p, snap.taints))
        units.append(PendingUnit(
            p.key, req, p.priority, (p.key,), 1, submit_s=p.created_s,
            requeued=p.key in snap.requeued,
            urgent=p.on_demand_only and p.deadline_s is not None,
            eligible=capped(p.key, _and(eligible_rows(state, p.selector, masks),
                                        device_mask(snap, p))),
            refusal=p.refusal, preempt_never=p.preempt_never,
            shape=(req, 1, 1, False, p.selector, _source(snap, p), caps.get(p.key))
            if p.refusal is None else None, value_of_time=p.value_of_time or 0.0))
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
                reqs.add(replace(p.request, tolerations=tolerated_now(p, snap.taints)))
        if refusal is None and len(reqs) != 1:
            refusal = f"pod group {g}: members ask for different resources (not supported)"
        req = next(iter(reqs)) if len(reqs) == 1 else None
        min_available = max(p.min_available for p in members)
        need = max(min_available - bound.get(g, 0), 1)
        keys = tuple(p.key for p in members)
        units.append(PendingUnit(
            g, req, max(p.priority for p in members), keys, need,
            gang=min_available > 1, submit_s=min(p.created_s for p in members),
            requeued=any(k in snap.requeued for k in keys),
            eligible=capped(g, _and(eligible_rows(state, members[0].selector, masks),
                                    device_mask(snap, members[0]))), refusal=refusal,
            shape=(req, len(keys), need, True, members[0].selector, _source(snap, members[0]),
                   caps.get(g)) if refusal is None else None,
            value_of_time=max(p.value_of_time or 0.0 for p in members)))
    return units


VictimMemo = dict[str, tuple[Allocation, Victim]]


def claim_victim(snap: Snapshot, a: Allocation) -> Victim | None:
    """A running pod with claims as a victim: its CPU and memory and its claims' devices, or
    None when evicting it would not free them all.

    Evicting the pod frees its devices only through the controller-manager: once the pod is
    gone it deletes a template's claim, or unreserves a standalone one and deallocates it when
    no pod is left. So the pod is a victim only when each of its claims is allocated, reserved
    for it alone (a claim another pod shares stays allocated) and booked whole on the pod's
    node, and together they are one shape a request can say: whole GPUs, one share of one GPU,
    or one MIG device. The plan's room then is what the deallocation will free; the preemptor
    binds in a later cycle, once the snapshot shows it free."""
    pod = a.pod
    if snap.dra is None or pod.claims_wait or not pod.claim_names:
        return None
    held: list[tuple[Holding, MigMasks]] = []
    for name in pod.claim_names:
        c = snap.dra.claims.get(f"{pod.namespace}/{name}")
        if c is None or reserved_for(c) != [pod.uid]:
            return None
        got = snap.claim_holdings.get(claim_key(c))
        if not got:
            return None
        held += got
    if any(h.node != pod.node_name for h, _ in held):
        return None
    binds = [h.bind for h, _ in held]
    if all(not b.mig and b.milli_per_gpu == GPU_MILLI for b in binds):
        gpus = tuple(sorted(g for b in binds for g in b.gpus))
        if len(set(gpus)) != len(gpus):
            return None
        req = replace(a.request, num_gpu=len(gpus), gpu_milli=GPU_MILLI, gpu_memory_mib=0)
        bind = Bind(pod.key, pod.node_name, gpus, GPU_MILLI)
        masks: MigMasks = ()
    elif len(held) == 1 and not binds[0].mig:  # one share of one GPU
        (h, _), = held
        req = replace(a.request, num_gpu=1, gpu_milli=h.bind.milli_per_gpu,
                      gpu_memory_mib=h.request.gpu_memory_mib)
        bind = Bind(pod.key, pod.node_name, h.bind.gpus, h.bind.milli_per_gpu)
        masks = ()
    elif len(held) == 1:  # one MIG device
        (h, masks), = held
        req = replace(a.request, num_gpu=1, mig_profile=h.request.mig_profile)
        bind = Bind(pod.key, pod.node_name, (), 0, h.bind.mig)
    else:
        return None
    return Victim(pod.key, pod.priority, pod.created_s, req, bind, a.masks + masks,
                  workload=pod.group)


def victims_of(snap: Snapshot, memo: VictimMemo | None = None) -> list[Victim]:
    """Running pods preemption may evict — a pod with claims as :func:`claim_victim` has it —
    and not terminating already (evicted, or an eviction the assume cache holds: a
    budget drain, ``control.cycle`` step 6, runs whatever else is evicting and must not evict
    one twice). A pod group's pods carry the group as their ``workload``: priority preemption
    leaves them alone (a gang is never torn apart) and team reclaim takes a borrowed gang whole
    (``control.cycle`` step 5), as the simulator's ``gang_victims``.

    ``memo`` (the driver's, kept across cycles): the victim made for each allocation, reused
    while the snapshot carries the same allocation object (the incremental booking keeps
    them): at 8,000 running pods, making each ``Victim`` anew was a seventh of the loop."""
    out: list[Victim] = []
    for a in snap.allocations.values():
        pod = a.pod
        if pod.terminating:
            continue
        if pod.uses_claims:  # not memoised: its claims change while its allocation does not
            if (cv := claim_victim(snap, a)) is not None:
                out.append(cv)
            continue
        hit = memo.get(pod.key) if memo is not None else None
        if hit is not None and hit[0] is a:
            out.append(hit[1])
            continue
        v = Victim(pod.key, pod.priority, pod.created_s, a.request, a.bind, a.masks,
                   workload=pod.group)
        if memo is not None:
            memo[pod.key] = (a, v)
        out.append(v)
    if memo is not None and len(memo) > 2 * len(out) + 64:  # pods gone: drop their entries
        live = {v.job_id for v in out}
        for k in [k for k in memo if k not in live]:
            del memo[k]
    return out


class LazyVictims(Sequence[Victim]):
    """:func:`victims_of`, built on first read: ``control.cycle`` reads the victims only when
    some unit was left unplaced (or a budget drains), and most cycles place every pod."""

    __slots__ = ("_build", "_got")

    def __init__(self, build: Callable[[], list[Victim]]) -> None:
        self._build = build
        self._got: list[Victim] | None = None

    def _items(self) -> list[Victim]:
        if self._got is None:
            self._got = self._build()
        return self._got

    def __len__(self) -> int:
        return len(self._items())

    @overload
    def __getitem__(self, i: int) -> Victim: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[Victim]: ...

    def __getitem__(self, i: int | slice) -> Victim | Sequence[Victim]:
        return self._items()[i]

    def __iter__(self) -> Iterator[Victim]:
        return iter(self._items())

    @property
    def built(self) -> bool:
        return self._got is not None


def gang_room_input(
    snap: Snapshot, settings: GangRoomSettings, book: GangRoomBook,
    usd_per_gpu_h: Callable[[ResourceRequest], float | None], now: float,
    movable: Collection[str] = frozenset(), memo: VictimMemo | None = None,
    value_of_time: Callable[[PodInfo], float] | None = None,
) -> GangRoomInput | None:
    """The cycle's gang-room input (module docstring); the running pods are listed only when a
    pending pod group is due to be priced (``book.due``); None when none is and no rows are
    reserved (the step would do nothing). The running pods are preemption's victims
    (``victims_of``, with the driver's ``memo``): the same pods, made once. ``value_of_time``:
    a movable pod's owner's $ per GPU-hour of delay (``control.value_of_time``; None: 0)."""
    groups = {p.group for p in snap.pending if p.group is not None}
    if not any(book.due(g, now) for g in groups):
        return GangRoomInput(settings, book, usd_per_gpu_h) if book.reserved(now) else None
    running = victims_of(snap, memo)
    ends: dict[str, float] = {}
    moves: list[Movable] = []
    for v in running:
        pod = snap.allocations[v.job_id].pod
        if pod.work_s is not None:
            ends[pod.key] = (pod.started_s or pod.created_s) + pod.work_s
        if pod.key in movable and pod.group is None:
            grace = float(pod.grace_s) if pod.grace_s is not None else _GRACE_S
            moves.append(Movable(v, eviction_loss_s(0.0, _WRITE_S, _RESTART_S),
                                 min(grace, _WRITE_S) if grace else 0.0,
                                 value_of_time(pod) if value_of_time is not None else 0.0))
    return GangRoomInput(settings, book, usd_per_gpu_h, running, ends, moves)


def plan_cycle(
    snap: Snapshot,
    policy: Policy,
    rng: np.random.Generator,
    backfill: BackfillPass | None = None,
    now: float = 0.0,
    preemption: bool = True,
    quota: LiveQuota | None = None,
    gang_room: GangRoomInput | None = None,
    caps: Mapping[str, int] | None = None,
    victim_memo: VictimMemo | None = None,
    nominated: Sequence[str] = (),
    blocked_out: dict[str, Refuse] | None = None,
) -> CyclePlan:
    """Plan one cycle on ``snap``; the binds are then allocated into ``snap.state`` (the
    cycle's scratch copy), so what runs after placement this cycle — the capacity loop's node
    views — sees the room they take. ``quota``: the cycle's team queues (None: none);
    ``gang_room``: price pending pod groups (:func:`gang_room_input`; None: not priced);
    ``caps``: right-sized nodes (:func:`pending_units`); ``victim_memo``: the driver's
    :func:`victims_of` memo; ``nominated``: reclaim's claimants, first in the queue
    (``control.nominations``); ``blocked_out``: filled with the pods refused for want of room
    (``k8s.schedule.blocked.blocked_pods``: what the driver carries to the next cycles)."""
    units = pending_units(snap, caps)
    victims: Sequence[Victim] = LazyVictims(lambda: victims_of(snap, victim_memo)) \
        if preemption else []
    q = quota.input if quota is not None else None
    if quota is not None and q is not None:
        units = tag_units(units, quota.teams, policy.catalog)
        victims = tag_victims(victims, snap, quota.teams, policy.catalog)
    plan = plan_units(
        snap.state, units, policy, rng, backfill=backfill, now=now,
        victims=victims, evicting=snap.evicting, quota=q, gang_room=gang_room,
        nominated=nominated)
    if blocked_out is not None:
        blocked_out.update(blocked_pods(units, plan))
    request = {m: u.request for u in units for m in u.placed_ids}
    for b in plan.binds:
        req = request[b.job_id]
        assert req is not None, b
        snap.state.allocate(req, b, bind_masks(snap.state, b, policy.catalog))
    return plan


def launch_gates(snap: Snapshot, quota: LiveQuota | None, binds: Iterable[Bind],
                 refused: Iterable[str], catalog: GpuCatalog) -> dict[str, Gate] | None:
    """What scale-up may launch for each refused job — pod group or pod key —
    (``control.teams.scale_up_gates``, the simulator's rule), None without team queues.

    The walk goes in queue order over the refused units on a copy of the cycle's quota book
    with this cycle's binds counted as running (the simulator's book after its pass), so ten
    refused 1-GPU pods of a queue with one GPU of quota left launch for one."""
    q = quota.input if quota is not None else None
    if quota is None or q is None:
        return None
    bound = {b.job_id for b in binds}
    want = set(refused)
    units = sorted(tag_units(pending_units(snap), quota.teams, catalog), key=lambda u: u.key)
    book = QuotaBook(q.book.teams.values(), q.book.usage, q.book.model_usage)
    todo = []
    for u in units:
        ids = u.placed_ids
        if u.team is not None and all(i in bound for i in ids):
            book.admit(u.team, u.milli)
        elif any(i in want for i in ids):
            todo.append(u)
    gates = scale_up_gates([(u.team, u.milli) for u in todo], book, q.budgets)
    return {u.id: g for u, g in zip(todo, gates, strict=True)}
