"""The informer's pods, parsed and sorted into what a snapshot reads, changed per event.

A cycle's snapshot needs every pod parsed (:func:`~gpufleet.k8s.translate.pods.pod_info`) and
split: the pending pods this scheduler owns, the pods on nodes, and the few that the assume
cache, the requeue rule and the DRA claims look at. Redone from every pod each cycle, that is
most of a cycle when thousands of pods wait that cannot fit (kube-scheduler keeps such pods in
its unschedulable queue for the same reason, and touches them only when an event concerns
them). :class:`PodIndex` keeps the split between cycles and moves only the pods whose objects
changed: the informer hands over the keys its watch saw added, modified or deleted
(:meth:`~gpufleet.k8s.watch.informer.Informer.take`), and a relist (or any caller without
them) rebuilds from every object — the same code with every key changed, which is also the
test oracle of the incremental path.

Each group is a dict in the informer's order: a pod that stays in a group keeps its place, a
pod that joins one goes last (as a new pod goes last in the informer), and one that leaves is
dropped. Parses are kept by ``resourceVersion``, so an object re-sent unchanged (a relist) is
not parsed again.
"""

from __future__ import annotations

from collections.abc import (
    Collection,
    ItemsView,
    Iterable,
    Iterator,
    Mapping,
    ValuesView,
)
from collections.abc import Set as AbstractSet
from typing import Any

from gpufleet.catalog.gpus import GpuCatalog
from gpufleet.k8s.translate.pods import PodInfo, pod_info

# the groups a parsed pod can be in (one pod may be in several)
LIVE = "live"  # not terminal: everything a snapshot lists
PENDING = "pending"  # ours, pending: what a cycle plans
PLACED = "placed"  # not terminal, not pending, on a node: what holds room
UNANNOTATED = "unannotated"  # placed without our assignment: booked where placement would put it
TERMINATING = "terminating"  # placed and being deleted: its room is not free yet
INTERRUPTED = "interrupted"  # an interrupted pod of a controller: its replacement is requeued
RAN_BEFORE = "ran-before"  # pending after failed runs: requeued
OWNED = "owned"  # pending, of a controller: requeued when a sibling was interrupted
CLAIMS = "claims"  # what a DRA world resolves: pods with ResourceClaims
EXTENDED = "extended"  # and pods with extended resources a DeviceClass may map
# the groups kept as dicts key → pod (OWNED is kept by controller: ``PodIndex.owned_by``)
GROUPS = (LIVE, PENDING, PLACED, UNANNOTATED, TERMINATING, INTERRUPTED, RAN_BEFORE, CLAIMS,
          EXTENDED)


def groups_of(info: PodInfo) -> tuple[str, ...]:
    """The groups ``info`` belongs in (the module docstring's list)."""
    out: list[str] = []
    if info.owner_uid and info.interrupted:
        out.append(INTERRUPTED)
    if info.terminal:
        return tuple(out)
    out.append(LIVE)
    if info.pending:
        if info.ours:
            out.append(PENDING)
        if info.ignored_failures > 0:
            out.append(RAN_BEFORE)
        if info.owner_uid:
            out.append(OWNED)
    elif info.node_name:
        out.append(PLACED)
        if info.assignment is None:
            out.append(UNANNOTATED)
        if info.terminating:
            out.append(TERMINATING)
    if info.ours or not info.pending:
        if info.uses_claims:
            out.append(CLAIMS)
        elif info.extended:
            out.append(EXTENDED)
    return tuple(out)


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{meta.get('namespace')}/{meta.get('name')}"


class PodIndex:
    """Parsed pods by key, each group of :data:`GROUPS` as a dict key → parsed pod, and the
    :data:`OWNED` pods (only) by their controller's uid (``owned_by``: the requeue rule reads
    only the pods of controllers with an interrupted pod)."""

    def __init__(self) -> None:
        self.infos: dict[str, PodInfo] = {}  # every pod, terminal ones too
        self._rv: dict[str, str] = {}
        self.groups: dict[str, dict[str, PodInfo]] = {g: {} for g in GROUPS}
        self.owned_by: dict[str, dict[str, PodInfo]] = {}
        # the keys the last update was given (None: it read every object), for what the
        # snapshot keeps beside the index (its booked pods) to follow the same changes
        self.touched: Collection[str] | None = None

    def update(self, pods: Mapping[str, Mapping[str, Any]], changed: Collection[str] | None,
               catalog: GpuCatalog) -> None:
        """Bring the index to ``pods`` (key → the API's pod; the informer's store) given the
        keys changed since the last update (None: any may have: each object is checked, and a
        parse is re-used only for the same ``resourceVersion``)."""
        self.touched = changed
        if changed is None:
            self._rebuild(pods, catalog)
            return
        for key in changed:
            obj = pods.get(key)
            if obj is None:
                self._drop(key)
            else:
                self._put(key, obj, catalog)

    def _rebuild(self, pods: Mapping[str, Mapping[str, Any]], catalog: GpuCatalog) -> None:
        fresh = PodIndex()  # filled apart, then taken whole: a failed parse leaves self as it was
        for key, obj in pods.items():
            rv = obj["metadata"].get("resourceVersion") or ""
            info = self.infos.get(key)
            if info is None or not rv or self._rv.get(key) != rv:
                info = pod_info(obj, catalog)
            fresh._place(key, rv, info)
        self.infos, self._rv, self.groups = fresh.infos, fresh._rv, fresh.groups
        self.owned_by = fresh.owned_by

    def _put(self, key: str, obj: Mapping[str, Any], catalog: GpuCatalog) -> None:
        rv = obj["metadata"].get("resourceVersion") or ""
        old = self.infos.get(key)
        if old is not None and rv and self._rv.get(key) == rv:
            return
        info = pod_info(obj, catalog)
        if old is not None and old.uid != info.uid:  # a new pod under the name: it goes last
            self._drop(key)
        self._place(key, rv, info)

    def _place(self, key: str, rv: str, info: PodInfo) -> None:
        self._unown(key)
        self.infos[key] = info
        self._rv[key] = rv
        now = groups_of(info)
        for g, members in self.groups.items():
            if g in now:
                members[key] = info  # in place when it stays, last when it joins
            else:
                members.pop(key, None)
        if OWNED in now:
            self.owned_by.setdefault(info.owner_uid, {})[key] = info

    def _unown(self, key: str) -> None:
        old = self.infos.get(key)
        mine = self.owned_by.get(old.owner_uid) if old is not None else None
        if old is not None and mine is not None:
            mine.pop(key, None)
            if not mine:
                del self.owned_by[old.owner_uid]

    def _drop(self, key: str) -> None:
        self._unown(key)
        self.infos.pop(key, None)
        self._rv.pop(key, None)
        for members in self.groups.values():
            members.pop(key, None)

    def __getitem__(self, group: str) -> dict[str, PodInfo]:
        return self.groups[group]


def pods_by_key(pods: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """A list of the API's pods as the key → object mapping :meth:`PodIndex.update` reads."""
    return {_key(obj): obj for obj in pods}


class Overlaid(Mapping[str, PodInfo]):
    """One group of the index as a cycle sees it: the index's own dict, with the few pods this
    cycle sees otherwise than parsed (assumed by this replica, resolved against claims) put in
    or taken out — without a copy of the group, which at ten thousand pending pods cost more
    than the rest of a cycle. A pod put in keeps its place when the group had it and goes last
    when it did not, as in a copy. Valid until the index's next update."""

    __slots__ = ("_base", "_gone", "_put")

    def __init__(self, base: dict[str, PodInfo]) -> None:
        self._base = base
        self._put: dict[str, PodInfo] = {}
        self._gone: set[str] = set()

    def put(self, key: str, info: PodInfo) -> None:
        self._put[key] = info  # a key dropped before stays gone from its place: it goes last

    def drop(self, key: str) -> None:
        self._put.pop(key, None)
        if key in self._base:
            self._gone.add(key)

    def __getitem__(self, key: str) -> PodInfo:
        got = self._put.get(key)
        if got is not None:
            return got
        if key in self._gone:
            raise KeyError(key)
        return self._base[key]

    def __contains__(self, key: object) -> bool:
        return key in self._put or (key not in self._gone and key in self._base)

    def __iter__(self) -> Iterator[str]:
        if not self._put and not self._gone:
            return iter(self._base)
        return self._walk()

    def _walk(self) -> Iterator[str]:
        for k in self._base:
            if k not in self._gone:
                yield k
        for k in self._put:
            if k not in self._base or k in self._gone:
                yield k

    def values(self) -> ValuesView[PodInfo]:
        if not self._put and not self._gone:
            return self._base.values()
        return ValuesView(self)

    def items(self) -> ItemsView[str, PodInfo]:
        if not self._put and not self._gone:
            return self._base.items()
        return ItemsView(self)

    def changes(self) -> tuple[AbstractSet[str], Mapping[str, PodInfo]]:
        """The base's keys taken out, and the pods put in (in the order they were put)."""
        return self._gone, self._put

    def __len__(self) -> int:
        if not self._put and not self._gone:
            return len(self._base)
        return len(self._base) - len(self._gone) + sum(
            1 for k in self._put if k not in self._base or k in self._gone)
