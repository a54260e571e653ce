"""Nodes + pods from the API → a FleetState with every running pod's GPUs already taken.

Level-triggered by construction: the snapshot is rebuilt from the API objects alone, so after a
restart (or a failover) GPU assignments come back from the annotations gpufleet's binding put on
each pod (in the same update as its node). A bound pod without our annotations (another
scheduler's) gets GPUs picked the way placement's Reserve step would, on its node. The one
addition to the API's view is this replica's own binds and evictions the informer has not shown
yet (:mod:`.assume`), laid over the parsed pods.
"""

from __future__ import annotations

import operator
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpufleet.catalog.gpus import GpuCatalog, default_gpu_catalog
from gpufleet.decisions import Bind
from gpufleet.k8s.dra.claim_view import DraWorld, PodClaims, as_general, resolve
from gpufleet.k8s.dra.claims import Holding, holdings, taint_holdings
from gpufleet.k8s.translate.assume import AssumeCache, Overlay
from gpufleet.k8s.translate.node_selector import matches
from gpufleet.k8s.translate.nodes import NodeSpec, node_spec
from gpufleet.k8s.translate.pod_index import (
    CLAIMS,
    EXTENDED,
    INTERRUPTED,
    LIVE,
    PENDING,
    PLACED,
    RAN_BEFORE,
    TERMINATING,
    UNANNOTATED,
    Overlaid,
    PodIndex,
    groups_of,
    pods_by_key,
)
from gpufleet.k8s.translate.pods import PodInfo, pod_info, requeued_among
from gpufleet.placement.gpu_select import best_fit_gpu
from gpufleet.placement.mig import bind_masks, choose_mig
from gpufleet.placement.view import pod_view
from gpufleet.state import GPU_MILLI, FleetState, ResourceRequest

MigMasks = tuple[tuple[int, int, int], ...]


def same_objects(a: Sequence[object], b: Sequence[object]) -> bool:
    """Whether ``a`` and ``b`` hold the very same objects in the same order: an informer
    replaces an object on each event and the parse cache hands back the same parse for an
    unchanged one, so this is "nothing changed", at an identity test per object."""
    return len(a) == len(b) and all(map(operator.is_, a, b))


@dataclass(frozen=True, slots=True)
class Allocation:
    """A running pod's share of its node, as applied to the snapshot's state."""

    pod: PodInfo
    request: ResourceRequest
    bind: Bind
    masks: MigMasks


@dataclass(slots=True)
class Snapshot:
    """One cycle's view of the fleet. ``pods`` (every pod not terminal), ``pending_by_key``
    (ours, not bound, not terminating) and ``placed`` (on a node, not pending) may be the parse
    cache's own dicts (:class:`~gpufleet.k8s.translate.pod_index.PodIndex`), shared until the
    next build: read them, never write them. ``pending`` is what the driver goes on to plan:
    ``pending_by_key``'s pods in order until the driver sets it (made on first read: with
    thousands of pods waiting, a cycle that plans few of them never lists them all)."""

    state: FleetState
    pods: Mapping[str, PodInfo]
    allocations: dict[str, Allocation]
    taints: frozenset[str]
    unaccounted: dict[str, str] = field(default_factory=dict)  # bound pod → why not counted
    assumed: Overlay | None = None  # what the assume cache laid over the informer's pods
    requeued: frozenset[str] = frozenset()  # pending pods that replace an interrupted one
    # DRA (resource.k8s.io): pending pods' claims to write at bind, pods pinned to the node
    # their allocated claims name, nodes whose GPUs are devices only (no nvidia.com/gpu)
    claims: dict[str, PodClaims] = field(default_factory=dict)
    dra_nodes: frozenset[str] = frozenset()
    device_only_nodes: frozenset[str] = frozenset()
    static_mig_nodes: frozenset[str] = frozenset()  # slice nodes with static MIG instances
    dra: DraWorld | None = None
    # each allocated claim's devices as booked whole (a claim the state could not fit, or with
    # a result no slice publishes, is not here): what evicting its pod would free
    claim_holdings: dict[str, list[tuple[Holding, MigMasks]]] = field(default_factory=dict)
    pending_by_key: Mapping[str, PodInfo] = field(default_factory=dict)
    placed: Mapping[str, PodInfo] = field(default_factory=dict)
    evicting: bool = False  # a placed pod is terminating: its room is not free yet
    _pending: list[PodInfo] | None = None

    @property
    def pending(self) -> list[PodInfo]:
        if self._pending is None:
            self._pending = list(self.pending_by_key.values())
        return self._pending

    @pending.setter
    def pending(self, pods: list[PodInfo]) -> None:
        self._pending = pods


def mig_masks(state: FleetState, bind: Bind, catalog: GpuCatalog) -> MigMasks | None:
    """(gpu, slice mask, compute) per MIG slot of ``bind`` on its node's model
    (``placement.mig.bind_masks``); None when a slot does not exist there (a pod annotation is
    input, so it is checked first)."""
    if not bind.mig:
        return ()
    row = state.index[bind.node]
    model = state.model_names[state.model_id[row]] if state.model_id[row] >= 0 else ""
    if model not in catalog or catalog[model].mig is None:
        return None
    for slot in bind.mig:
        prof = catalog.mig_profile(model, slot.profile)
        if prof is None or slot.start not in prof.starts or slot.gpu >= state.num_gpus[row]:
            return None
    return bind_masks(state, bind, catalog)


def _reserve(state: FleetState, req: ResourceRequest, node: str, key: str,
             catalog: GpuCatalog) -> tuple[Bind, MigMasks] | None:
    """GPUs for an unannotated bound pod: placement's own Reserve step on its node."""
    row = state.index[node]
    view = pod_view(state, req, catalog)
    if req.mig_profile is not None:
        slot = choose_mig(view, row)
        if slot is None:
            return None
        bind = Bind(job_id=key, node=node, gpus=(), milli_per_gpu=0, mig=(slot,))
        return bind, bind_masks(state, bind, catalog)
    if req.num_gpu == 0:
        return Bind(job_id=key, node=node, gpus=(), milli_per_gpu=0), ()
    if int(view.gpu_ok[row].sum()) < req.num_gpu:
        return None
    gpus = best_fit_gpu(view, row, np.random.default_rng(0))
    milli = req.gpu_milli if req.is_shared else 1000
    return Bind(job_id=key, node=node, gpus=gpus, milli_per_gpu=milli), ()


@dataclass(slots=True)
class Accounted:
    """The nodes with the index's placed pods booked (:class:`ParseCache`), as the informer
    shows them (no assumption laid over): kept apart from any snapshot (each gets a copy with
    the cycle's assumptions booked on it), changed by each build only where the index's pods
    changed. ``allocations`` is in the index's placed order."""

    specs: tuple[NodeSpec, ...]  # the parsed nodes it stands on (identity: the same objects)
    state: FleetState
    allocations: dict[str, Allocation]


class ParseCache:
    """Parsed Nodes and Pods by (name, resourceVersion): a busy cluster changes few objects
    between two cycles, so each cycle re-parses only those; and the booked state of the last
    build, so each cycle books only the bound pods that changed (see :func:`build_snapshot`)."""

    def __init__(self) -> None:
        self.nodes: dict[str, tuple[str, NodeSpec]] = {}
        # the Node objects the last build was given (an informer's own, in its order) and
        # their parses sorted by name: a build given the very same objects (no Node event
        # since) reuses them rather than looking up each node (1,213 a cycle)
        self.node_objects: list[Mapping[str, Any]] = []
        self.node_parse: tuple[list[Mapping[str, Any]], tuple[NodeSpec, ...]] = ([], ())
        self.pods: dict[str, tuple[str, PodInfo]] = {}
        # the pods a snapshot reads, parsed and grouped, moved only as they change
        self.index = PodIndex()
        # the nodes-only state of the last build without DRA devices and the parsed nodes it
        # was built from: a cycle whose nodes parse to the same specs (a heartbeat changes a
        # Node's resourceVersion, not its spec) copies it instead of adding each node again (a
        # tenth of the controller's samples at 1,213 nodes, py-spy)
        self.fleet: tuple[tuple[NodeSpec, ...], FleetState, frozenset[str]] | None = None
        # the same nodes with the index's placed pods booked, while each books cleanly (no
        # DRA claims, no pod without our annotations, no over-commit), brought up to date by
        # the pods that changed: booking 8,335 bound pods anew each cycle was a fifth of the
        # controller's samples, and even comparing each with its booking grew a cycle with the
        # pods running (py-spy, 6,212 bound pods)
        self.accounted: Accounted | None = None

    def node(self, obj: Mapping[str, Any], cat: GpuCatalog) -> NodeSpec:
        meta = obj["metadata"]
        rv = meta.get("resourceVersion")
        hit = self.nodes.get(meta["name"])
        if hit is not None and rv and hit[0] == rv:
            return hit[1]
        spec = node_spec(obj, cat)
        if hit is not None and spec == hit[1]:
            spec = hit[1]  # a status heartbeat: the same node, kept as the same object
        if rv:
            self.nodes[meta["name"]] = (rv, spec)
        return spec

    def pod(self, obj: Mapping[str, Any], cat: GpuCatalog) -> PodInfo:
        meta = obj["metadata"]
        rv = meta.get("resourceVersion")
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        hit = self.pods.get(key)
        if hit is not None and rv and hit[0] == rv:
            return hit[1]
        info = pod_info(obj, cat)
        if rv:
            self.pods[key] = (rv, info)
        return info

    def prune(self, node_names: set[str], pod_keys: Collection[str] = ()) -> None:
        """Forget the parses of nodes not in ``node_names`` and of pods not in ``pod_keys``."""
        for k in [k for k in self.nodes if k not in node_names]:
            del self.nodes[k]
        for k in [k for k in self.pods if k not in pod_keys]:
            del self.pods[k]


def build_snapshot(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]] | Mapping[str, Mapping[str, Any]],
    catalog: GpuCatalog | None = None,
    cache: ParseCache | None = None,
    assumed: AssumeCache | None = None,
    dra: DraWorld | None = None,
    changed: Collection[str] | None = None,
) -> Snapshot:
    """The fleet as ``nodes`` and ``pods`` (the API's JSON) show it; ``cache`` re-uses parses of
    unchanged objects, the pods sorted by what the snapshot reads
    (:class:`~gpufleet.k8s.translate.pod_index.PodIndex`) and the last build's booked state
    (only the bound pods that changed are released or booked: :func:`_rebook`, with the full
    booking as its fallback and test oracle), ``assumed`` adds this replica's writes the
    informer has not shown yet, ``dra`` the ResourceSlices' devices and the claims'
    allocations (:mod:`gpufleet.k8s.dra.claim_view`).

    ``pods`` is a list, or the informer's store (pod key → object) with ``changed`` the keys
    changed since the last build on the same ``cache`` (:meth:`Informer.take
    <gpufleet.k8s.watch.informer.Informer.take>`): then only those pods are parsed and moved,
    and the cycle's cost does not grow with the pods that did not change (None: every pod is
    checked)."""
    cat = catalog or default_gpu_catalog()
    # the kept booking follows the index's updates: taken now, so a build that fails anywhere
    # below leaves none behind to be brought up to date from the wrong keys
    kept = cache.accounted if cache is not None else None
    if cache is not None:
        cache.accounted = None
    taints: set[str] = set()
    given = nodes if isinstance(nodes, list) else list(nodes)
    if cache is not None and same_objects(given, cache.node_objects):
        node_list, specs = cache.node_parse  # the very same Node objects: nothing changed
    else:
        node_list = sorted(given, key=lambda n: n["metadata"]["name"])
        specs = tuple(cache.node(n, cat) if cache is not None else node_spec(n, cat)
                      for n in node_list)
        if cache is not None:
            cache.prune({n["metadata"]["name"] for n in node_list})
            cache.node_objects, cache.node_parse = list(given), (node_list, specs)
    device_only: set[str] = set()
    # (ResourceSlices rewrite their nodes' specs each cycle: no reuse while any are served)
    reuse = cache is not None and (dra is None or not dra.devices)
    last = cache.fleet if cache is not None else None
    if reuse and last is not None and same_objects(last[0], specs):
        state, taints = last[1], set(last[2])  # the cache's own: copied before it is booked
        shared = True
    else:
        state, shared = FleetState(), False
        for spec in specs:
            devices = dra.devices.get(spec.name) if dra is not None else None
            if devices is not None:  # the slices are the inventory; the labels what's left
                if not spec.num_gpus:
                    device_only.add(spec.name)
                spec = devices.inventory.apply_to(spec)
            spec.add_to(state)
            taints |= spec.info.taints
        if reuse and cache is not None:
            cache.fleet = (specs, state.copy(), frozenset(taints))
    index = cache.index if cache is not None else PodIndex()
    if isinstance(pods, Mapping):
        index.update(pods, changed, cat)
    else:
        index.update(pods_by_key(pods), None, cat)
    # the pods this cycle sees otherwise than parsed: the assume cache's (after the parse: an
    # assumption is not a resourceVersion), then the DRA world's resolution of claims
    overlay = assumed.overlay_on(index.infos) if assumed is not None else None
    seen: Mapping[str, PodInfo] = overlay.replaced if overlay is not None else {}
    groups = _Groups(index)
    for info in seen.values():
        groups.put(info)
    # requeued: the pods that ran before, and the pods of a controller with an interrupted pod
    owners = {i.owner_uid for i in index[INTERRUPTED].values()}
    candidates = [*index[RAN_BEFORE].items(),
                  *(kv for o in owners for kv in index.owned_by.get(o, {}).items())]
    snap = Snapshot(state=state, pods={}, allocations={}, taints=frozenset(taints),
                    assumed=overlay, dra=dra, device_only_nodes=frozenset(device_only),
                    requeued=requeued_among(index[INTERRUPTED].values(),
                                            [seen.get(k, i) for k, i in candidates]))
    if dra is not None:
        snap.dra_nodes = frozenset(n for n in dra.devices if n in state.index)
        dra.node_labels = {info.name: info.labels for info in state.nodes[:state.n]}
        snap.static_mig_nodes = frozenset(n for n in snap.dra_nodes
                                          if dra.devices[n].static_mig)
        # a pod with extended resources resolves to itself unless a DeviceClass maps one or a
        # claim was made for it: with neither in the world, only pods with claims are read
        kinds = (CLAIMS, EXTENDED) if dra.extended or dra.extended_claims else (CLAIMS,)
        claimed = {k: None for g in kinds for k in index[g]}
        claimed.update(dict.fromkeys(k for k in seen if k not in claimed))
        for key in claimed:
            info = seen.get(key) or index.infos[key]
            if not set(kinds).intersection(groups_of(info)):
                continue
            got, claims = resolve(info, dra, cat)
            if claims is not None:
                snap.claims[key] = claims
            if got is not info:
                groups.put(got)
    snap.pods, snap.pending_by_key, snap.placed = groups.live, groups.pending, groups.placed
    gone, put = groups.placed.changes()
    snap.evicting = any(i.terminating for i in put.values()) or any(
        k not in gone and k not in put for k in index[TERMINATING])
    # a DRA world with no devices and no claims (an API that serves resource.k8s.io to a
    # cluster that uses the device plugin) books nothing of its own: the pods' bookings can
    # be carried over as without one
    plain = reuse and (dra is None or not dra.claims)
    base = None
    if cache is not None and plain and not index[UNANNOTATED]:
        if kept is not None and same_objects(kept.specs, specs):
            base = kept if _rebook(kept, index[PLACED], index.touched, cat) else None
        else:
            base = Accounted(specs, state.copy(), {})
            base = base if _rebook(base, index[PLACED], None, cat) else None
    booked = _overlaid(base, groups.placed, cat) if base is not None else None
    if booked is not None:
        snap.state, snap.allocations = booked
    else:  # the full booking: every placed pod, as this cycle sees it, in order
        bound: list[PodInfo] = []
        later: list[PodInfo] = []
        for info in groups.placed.values():
            (bound if info.assignment is not None else later).append(info)
        if shared:
            snap.state = state.copy()
        for info in bound:
            _account(snap, info, info.assignment, cat)
        if dra is not None:  # every allocated claim's devices, whoever allocated them
            _book_claims(snap, dra, cat)
        for info in later:  # pods without our annotations fill what the annotated ones left
            _account(snap, info, None, cat)
    if cache is not None and base is not None:
        cache.accounted = base
    if dra is not None:
        _whole_gpus_of_mig_nodes(snap, dra, cat)
    return snap


class _Groups:
    """The index's live, pending and placed pods as this cycle sees them
    (:class:`~gpufleet.k8s.translate.pod_index.Overlaid`): a pod seen otherwise than parsed
    (assumed, or resolved against claims) put in its groups
    (:func:`~gpufleet.k8s.translate.pod_index.groups_of`)."""

    def __init__(self, index: PodIndex) -> None:
        self.live, self.pending, self.placed = (
            Overlaid(index[g]) for g in (LIVE, PENDING, PLACED))

    def put(self, info: PodInfo) -> None:
        now = groups_of(info)
        for group, members in ((LIVE, self.live), (PENDING, self.pending),
                               (PLACED, self.placed)):
            if group in now:
                members.put(info.key, info)
            else:
                members.drop(info.key)


def _whole_gpus_of_mig_nodes(snap: Snapshot, dra: DraWorld, cat: GpuCatalog) -> None:
    """Placement books a MIG GPU as MIG slots and so never gives a whole GPU on a node in
    dynamic MIG mode, where NVIDIA's driver publishes each GPU whole as well. A pending pod
    whose claim asks N whole GPUs that no node it may use outside MIG mode has free now goes
    to the general allocator when such a node has them (kube's allocator gives the whole
    device; it is booked as all of the GPU's slices), kept to those nodes."""
    state = snap.state
    mig = [n for n, d in dra.devices.items()
           if d.inventory.mig_gpus and not d.static_mig and n in state.index]
    if not mig:
        return
    n = state.n
    free = ((state.free_milli[:n] == GPU_MILLI) & ~state.mig_enabled[:n]).sum(axis=1)
    for k, info in enumerate(snap.pending):
        pc = snap.claims.get(info.key)
        ask = pc.ask if pc is not None else None
        if pc is None or ask is None or pc.general or pc.pinned is not None or pc.extended \
                or ask.profile is not None or ask.share_memory_mib or ask.options:
            continue
        rows = [state.index[name] for name in dra.devices
                if name in state.index and (pc.nodes is None or name in pc.nodes)]
        if any(free[r] >= ask.count and matches(state.nodes[r].labels, info.selector)
               for r in rows):
            continue
        got = as_general(info, pc, dra, cat, frozenset(mig))
        if got is not None:
            info, snap.claims[info.key] = got
            snap.pending[k] = info
            snap.pods = {**snap.pods, info.key: info}  # the index's dicts are not written
            snap.pending_by_key = {**snap.pending_by_key, info.key: info}


def _rebook(base: Accounted, placed: Mapping[str, PodInfo], keys: Collection[str] | None,
            cat: GpuCatalog) -> bool:
    """Bring ``base`` to ``placed`` (the index's placed pods, every one with our assignment and
    on ``base``'s nodes), looking only at the ``keys`` that may have changed (None: every key
    of either; :func:`_move`): the same arrays a full booking gives (sums and disjoint MIG
    masks do not depend on order; only the rows' change counters differ, and nothing compares
    those across states), and ``allocations`` in ``placed``'s order. False when a booking
    does not fit as written (:func:`_book`, the full booking's own) — ``base`` is then
    half-changed and must be dropped: the caller books in full, which books the over-commit as
    it always has."""
    if keys is None:
        keys = [*base.allocations, *(k for k in placed if k not in base.allocations)]
    if not _move(base.state, base.allocations, ((k, placed.get(k)) for k in keys), cat):
        return False
    held = base.allocations
    if len(held) != len(placed) or list(held) != list(placed):  # a pod made anew goes last
        base.allocations = {k: held[k] for k in placed}
    return True


def _overlaid(base: Accounted, view: Overlaid,
              cat: GpuCatalog) -> tuple[FleetState, dict[str, Allocation]] | None:
    """``base`` as this cycle sees its placed pods (``view``: the index's, with the assumed or
    resolved pods put in or taken out), on a copy: the state and the allocations in
    ``view``'s order, as the full booking gives them; None when a pod put in has no
    assignment of ours or does not fit as written (the caller books in full)."""
    state, allocations = base.state.copy(), dict(base.allocations)
    gone, put = view.changes()
    if not _move(state, allocations, [*((k, None) for k in gone), *put.items()], cat):
        return None
    return state, allocations


def _move(state: FleetState, held: dict[str, Allocation],
          changes: Iterable[tuple[str, PodInfo | None]], cat: GpuCatalog) -> bool:
    """Bring the bookings ``held`` on ``state`` to ``changes`` (each key with its pod as it is
    now, None: gone): a pod booked as before is kept (re-pointed at its new parse), a changed
    one released and booked again in its place, a gone one released and dropped, a new one
    booked last. Every release comes first: a booking may take what another pod left. False
    when a pod has no assignment of ours or does not fit as written (``state`` and ``held``
    are then half-changed)."""
    new: list[tuple[str, PodInfo]] = []
    for key, info in changes:
        a = held.get(key)
        if a is not None:
            if a.pod is info:  # the parse cache's same object: the same booking
                continue
            if info is not None and info.assignment == a.bind and (
                    info.request or _NOTHING) == a.request:
                held[key] = Allocation(info, a.request, a.bind, a.masks)
                continue
            state.release(a.request, a.bind, a.masks)
            if info is None:
                del held[key]
        if info is not None:
            new.append((key, info))
    for key, info in new:
        if info.assignment is None:
            return False
        booked = _book(state, info, info.assignment, cat)
        if isinstance(booked, str):
            return False
        held[key] = booked
    return True


def _book_claims(snap: Snapshot, dra: DraWorld, cat: GpuCatalog) -> None:
    state = snap.state
    held, bad = holdings(dra.claims.values(), dra.devices, cat)
    snap.unaccounted.update({f"claim {k}": v for k, v in bad.items()})
    partly = set(bad)
    for h in held:
        if h.node not in state.index:
            partly.add(h.claim)
            continue
        masks = bind_masks(state, h.bind, cat)
        try:
            state.allocate(h.request, h.bind, masks)
        except ValueError as exc:
            snap.unaccounted[f"claim {h.claim}"] = str(exc)
            _book_rest(state, h.request, h.bind)
            partly.add(h.claim)
            continue
        snap.claim_holdings.setdefault(h.claim, []).append((h, masks))
    for key in partly:
        snap.claim_holdings.pop(key, None)
    for h in taint_holdings(dra.devices, cat):  # tainted devices: what no claim holds yet
        if h.node not in state.index:
            continue
        try:
            state.allocate(h.request, h.bind, bind_masks(state, h.bind, cat))
        except ValueError:
            _book_rest(state, h.request, h.bind)


def _book_rest(state: FleetState, req: ResourceRequest, bind: Bind) -> None:
    """An allocated device (or a bound pod) the state cannot fit (over-committed by whoever
    wrote it) still holds its GPUs: book what is left of them, so placement never hands out
    the room it has. Left unbooked, a GPU would look freer than it is. MIG slices already
    taken are counted by their first holder. ``req`` carries no cpu or memory: GPU room is
    what placement would hand out twice."""
    if not bind.gpus:
        return
    i = state.index[bind.node]
    for g in bind.gpus:
        left = int(state.free_milli[i, g])
        if left > 0:
            part = Bind(bind.job_id, bind.node, (g,), min(left, bind.milli_per_gpu))
            state.allocate(req, part)  # a holding's request: one GPU, no cpu or memory


_NOTHING = ResourceRequest()  # an unreadable request (e.g. two MIG kinds) books nothing


def _account(snap: Snapshot, info: PodInfo, bind: Bind | None, cat: GpuCatalog) -> None:
    got = _book(snap.state, info, bind, cat)
    if isinstance(got, str):
        snap.unaccounted[info.key] = got
    else:
        snap.allocations[info.key] = got


def _book(state: FleetState, info: PodInfo, bind: Bind | None,
          cat: GpuCatalog) -> Allocation | str:
    """Book a bound pod's share of its node (``bind`` None: GPUs picked as placement's Reserve
    would, for a pod without our annotations); or why it could not be booked as written — a
    pod over-committed by whoever bound it still takes what is left of its GPUs."""
    req = info.request or _NOTHING
    if info.node_name not in state.index:
        return f"node {info.node_name} is not in the fleet"
    if bind is None:
        got = _reserve(state, req, info.node_name, info.key, cat)
        if got is None:
            return f"no free GPUs left for it on {info.node_name}"
        bind, masks = got
    else:
        found = mig_masks(state, bind, cat)
        if found is None:
            return f"MIG slot {bind.mig} does not exist on {info.node_name}"
        masks = found
    try:
        state.allocate(req, bind, masks)
    except ValueError as exc:
        if not masks:  # the pod runs there all the same: what is left of its GPUs is taken
            _book_rest(state, ResourceRequest(), bind)
        return str(exc)
    return Allocation(info, req, bind, masks)
