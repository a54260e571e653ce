"""Pods that cannot fit, left out of the live cycle until capacity is freed.

A long queue of pods the fleet has no room for is asked the same question every cycle, and the
answer cannot change until room appears. ``control.cycle`` answers it once per shape, but the
driver still turns every pending pod into a unit and its refusal, each cycle — with 10,000 such
pods that is most of a cycle that only had one new pod to place. So, as the simulator tries
only new arrivals until capacity is freed (``sim.jobs``' ``capacity_freed``: kube-scheduler's
queueing hints with "capacity was freed" as the one hint), the live driver carries the pods a
cycle refused for want of room (:func:`blocked_pods`) into the next cycles: they are not
planned again, and keep the refusal already written on them, until one of these happens —

* *capacity was freed* (:func:`freed`): between the room the last cycle left (its snapshot's
  ``FleetState`` after its binds) and the room the next snapshot shows, a node appeared, a
  node's free CPU, memory, GPU milli, GPU memory or MIG slices grew (a pod on it deleted,
  finished or evicted, a claim deallocated, a bind that failed and was forgotten, an assumed
  bind that expired), a node's labels, taints or activity changed (Ready again, uncordoned,
  relabelled), the DRA node sets changed (slices published), or a team queue's quota changed.
  The rule reads the snapshots, not the watch events: every path by which room returns — the
  assume cache's expiries and forgotten binds included, which no informer event reports —
  shows as more room in the next snapshot, and a node's heartbeat does not;
* the pod itself changed (its ``resourceVersion``), or its ``PodScheduled`` condition does not
  say the carried refusal yet (the write is still to be made or failed);
* the carry is older than ``max_age_s`` (a full pass at least that often: kube-scheduler
  flushes its unschedulable pods every five minutes for the same reason), the replica's
  term changed, or an informer relisted.

Only single pods refused by placement ("0/N nodes are available: …") are carried: pod groups,
reclaim's nominated claimants and the pods a quota verdict or budget refuses are planned every
cycle (their answer changes with the books, not only with room), and none is carried while
``BackfillPass.starvation_s`` is set (a skipped starving head would not stop the backfill
behind it). A carried pod's refusal text is the one written when it was last tried — as kube-
scheduler's, it may name node counts that have since moved — and it still counts as refused
for the capacity loop and the pending metrics.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpufleet.control.cycle import CyclePlan, PendingUnit
from gpufleet.control.pending import unit_shape
from gpufleet.decisions import Refuse
from gpufleet.k8s.translate.pods import PodInfo
from gpufleet.k8s.translate.snapshot import Snapshot, same_objects
from gpufleet.state import NodeInfo


@dataclass(frozen=True)
class Room:
    """What a snapshot's fleet has free, by node (rows in ``nodes`` order)."""

    nodes: tuple[NodeInfo, ...]  # name, labels, taints (records never changed once added)
    active: np.ndarray
    free: np.ndarray  # rows × columns that only grow when room is freed
    used_mig: np.ndarray  # rows × GPUs: the MIG memory-slice bitmasks in use
    extra: Hashable  # the DRA node sets and the team queues' quotas


def room_of(snap: Snapshot, quotas: Hashable = None) -> Room:
    """The room ``snap.state`` shows now; ``quotas``: the team queues' nominal quotas (any
    change is capacity for the pods within them)."""
    s = snap.state
    n = s.n
    free = np.concatenate([s.cpu_free[:n, None], s.mem_free[:n, None],
                           s.free_milli[:n].astype(np.int64), s.gpu_mem_free[:n],
                           -s.mig_compute_used[:n].astype(np.int64)], axis=1)
    return Room(tuple(s.nodes[:n]), s.active[:n].copy(), free, s.mig_used[:n].copy(),
                (snap.dra_nodes, snap.device_only_nodes, snap.static_mig_nodes, quotas))


def freed(before: Room, now: Room) -> bool:
    """Whether ``now`` has room that ``before`` did not (the module docstring's list)."""
    if before.extra != now.extra:
        return True
    if same_objects(before.nodes, now.nodes):
        # the same node records row by row (a snapshot of unchanged Nodes reuses them): the
        # same names, labels and taints; only the arrays can differ
        return bool(np.any(now.free > before.free)
                    or np.any(before.used_mig & ~now.used_mig)
                    or np.any(before.active != now.active))
    at = {info.name: i for i, info in enumerate(before.nodes)}
    if any(info.name not in at for info in now.nodes):
        return True  # a node appeared
    rows = [at[info.name] for info in now.nodes]
    if np.any(now.free > before.free[rows]):
        return True
    if np.any(before.used_mig[rows] & ~now.used_mig):
        return True  # a MIG slice was released
    return any(bool(before.active[r]) != bool(now.active[i])
               or before.nodes[r].labels != info.labels or before.nodes[r].taints != info.taints
               for i, (r, info) in enumerate(zip(rows, now.nodes, strict=True)))


def blocked_pods(units: Iterable[PendingUnit], plan: CyclePlan) -> dict[str, Refuse]:
    """The pods of ``plan`` refused for want of room: single-pod units whose shape the plan
    left blocked and whose refusal is placement's ("0/N nodes are available: …")."""
    refusals = {r.job_id: r for r in plan.refusals}
    out: dict[str, Refuse] = {}
    if not plan.blocked:
        return out
    for u in units:
        if u.gang or len(u.placed_ids) != 1 or u.refusal is not None:
            continue
        r = refusals.get(u.placed_ids[0])
        if r is not None and r.message.startswith("0/") and unit_shape(u) in plan.blocked:
            out[r.job_id] = r
    return out


def _rv(obj: Mapping[str, Any] | None) -> str:
    return str(((obj or {}).get("metadata") or {}).get("resourceVersion") or "")


def _says(obj: Mapping[str, Any], message: str) -> bool:
    """Whether the pod's ``PodScheduled`` condition already carries ``message``."""
    for c in (obj.get("status") or {}).get("conditions") or ():
        if c.get("type") == "PodScheduled":
            return bool(c.get("status") == "False" and c.get("message") == message)
    return False


class BlockedPods:
    """The carry across cycles (module docstring): ``observe`` each cycle's room first (it
    clears the carry when capacity was freed), ``split`` the pending pods into those to plan
    and the carried ones, ``record`` what the plan refused for want of room.

    After a ``split`` the carry (``pods``) holds exactly the pods it carried, and ``messages``
    counts their refusals by text (the pending metrics' reasons), kept as entries come and go.
    Told which pods changed, a split looks only at them, at the pods recorded since the last
    one, and at the pending pods it did not carry (``_loose``: kept from split to split), so
    its work does not grow with the pods carried."""

    def __init__(self, max_age_s: float = 60.0) -> None:
        self.max_age_s = max_age_s
        self.pods: dict[str, tuple[str, Refuse]] = {}  # pod key → (resourceVersion, refusal)
        self.messages: Counter[str] = Counter()  # the carried refusals' texts
        # the informer's object each carried pod was last checked on: the informer replaces a
        # pod's object on every event, so the same object needs no second look
        self._checked: dict[str, Mapping[str, Any]] = {}
        self._fresh: set[str] = set()  # recorded since the last split, not checked yet
        # every pod pending as listed and not carried, as of the last split (a superset while
        # a pod's leaving is not seen yet); None: not known, the next split looks at every pod
        self._loose: set[str] | None = None
        self._room: Room | None = None
        self._since = 0.0
        self.clears = 0

    def clear(self) -> None:
        """Forget every carried pod: the next cycle plans the whole queue."""
        if self.pods:
            self.clears += 1
        self.pods = {}
        self.messages = Counter()
        self._checked = {}
        self._fresh = set()
        self._loose = None
        self._room = None

    def observe(self, room: Room, now: float) -> None:
        """Clear the carry when ``room`` shows capacity freed since the last ``record``, or the
        carry is older than ``max_age_s``."""
        if self._room is None or now - self._since >= self.max_age_s or freed(self._room, room):
            self.clear()

    def split(self, pending: Sequence[PodInfo] | Mapping[str, PodInfo],
              objects: Mapping[str, Mapping[str, Any]], tried_anyway: Collection[str] = (),
              changed: Collection[str] | None = None, listed: Collection[str] | None = None
              ) -> tuple[list[PodInfo], Collection[str]]:
        """(the pods to plan, the carried pods' keys — a view of the carry: read it before
        the next ``record``): a carried pod is left out while it is unchanged since it was
        refused and its condition says that refusal.

        ``pending``: what may be planned now, a list or pod key → pod; ``changed``: the pods
        whose objects changed since the last split (None: any may have, each pod is looked
        at); ``listed``: the pods pending as the informer lists them, before this replica's
        held binds and writes (None: ``pending``). With ``changed``, the pods to plan come in
        key order, else in ``pending``'s."""
        queued = pending if isinstance(pending, Mapping) else {p.key: p for p in pending}
        listed = queued.keys() if listed is None else listed
        carry = self.pods
        if changed is None or self._loose is None:
            look: Iterable[str] = list(carry)
        else:
            look = {*(k for k in changed if k in carry), *self._fresh,
                    *(k for k in tried_anyway if k in carry)}
        loose: set[str] = set() if self._loose is None or changed is None else self._loose
        for k in look:
            got, obj = carry[k], objects.get(k)
            if k in queued and k not in tried_anyway and obj is not None and (
                    obj is self._checked.get(k) or (
                        got[0] == _rv(obj) and _says(obj, got[1].message))):
                self._checked[k] = obj
            else:  # changed, not pending now (bound, gone, its write held), or tried anyway
                self._forget(k)
                loose.add(k)
        self._fresh = set()
        if changed is None or self._loose is None:  # every pod: a pass over them all
            loose.update(k for k in listed if k not in carry)
            plan = [p for k, p in queued.items() if k not in carry]
        else:
            for k in changed:
                if k in listed and k not in carry:
                    loose.add(k)
                elif k not in listed:
                    loose.discard(k)
            plan = [queued[k] for k in sorted(loose) if k in queued]
        self._loose = loose
        return plan, carry.keys()

    def _forget(self, key: str) -> None:
        got = self.pods.pop(key, None)
        self._checked.pop(key, None)
        if got is not None:
            self.messages[got[1].message] -= 1
            if not self.messages[got[1].message]:
                del self.messages[got[1].message]

    def record(self, refused: Mapping[str, Refuse], objects: Mapping[str, Mapping[str, Any]],
               room: Room, now: float) -> None:
        """Carry ``refused`` (:func:`blocked_pods` of this cycle's plan, at the pods'
        ``resourceVersion`` the cycle read) from ``room``: the fleet after this cycle's
        binds."""
        if self._room is None:
            self._since = now
        for k, r in refused.items():
            self._forget(k)
            obj = objects.get(k)
            self.pods[k] = (_rv(obj), r)
            self.messages[r.message] += 1
            if obj is not None and _says(obj, r.message):  # checked now, in this cycle's pass
                self._checked[k] = obj
            else:  # its refusal is still to be written: looked at again by the next split
                self._fresh.add(k)
            if self._loose is not None:
                self._loose.discard(k)
        self._room = room
