"""This replica's own writes, held in the parsed state until the informer shows them.

A Binding or an Eviction is in the API the moment the call returns, but reaches the informer
only with its watch event — milliseconds on a quiet server, seconds on a busy one. A cycle that
runs in between sees the bound pod still pending (it would be planned again, and its GPUs would
look free to the next pod) and the evicted pod still running (the "eviction in progress" guard
of preemption would not hold, and a second victim would go). kube-scheduler's scheduler cache
(``pkg/scheduler/backend/cache/interface.go``) closes the window with a small state machine per
pod, which this module follows:

* ``assume(bind, uid)`` — the plan is about to bind the pod (kube's ``AssumePod``): it counts as
  bound on the plan's node, GPUs, milli and MIG slot;
* ``finish(key)`` — the Binding was accepted (``FinishBinding``): from now on the assumption
  may expire, ``ttl_s`` later;
* ``forget(key)`` — the Binding failed, or the API answered 409 (someone changed or bound the
  pod first): the assumption goes at once (``ForgetPod``), the informer's view is the truth;
* ``evicted(key, uid)`` — an Eviction was accepted: the pod counts as terminating (and still
  holds its GPUs, as a terminating pod does) until the informer shows it terminating or gone;
* :meth:`AssumeCache.overlay` — each cycle, on the informer's parsed pods: an assumption the
  informer now confirms (the pod bound — on any node: the API wins —, terminating, gone, or a
  new pod under the same name) is dropped (kube's ``AddPod`` / ``RemovePod``), one past its
  deadline is dropped as expired, and the rest are laid over the parse as ``PodInfo`` copies.

It works on parsed ``PodInfo`` (not on the pod JSON): the parse cache keys a parse by the pod's
``resourceVersion``, which an assumption does not change, so an edit of the JSON is read back as
the pod before the edit. It stays level-triggered: the cache only ever *adds* this replica's
recent writes to what the API shows, it starts empty (after a restart or a new leader term
everything comes from the API), and every entry ends by confirmation, failure or expiry.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from gpufleet.decisions import Bind
from gpufleet.k8s.translate.pods import PodInfo, binding_annotations

DEFAULT_TTL_S = 30.0  # kube-scheduler's durationToExpireAssumedPod before it became "never"


@dataclass(slots=True)
class _Entry:
    uid: str
    bind: Bind | None  # None: an eviction
    deadline: float | None = None  # set once the write was accepted; None while in flight


@dataclass(slots=True)
class Overlay:
    """One cycle's parsed pods with the assumptions laid over them, and what happened to the
    assumptions on the way (the controller's metrics)."""

    infos: list[PodInfo]  # :meth:`AssumeCache.overlay`'s pods, in the order given
    replaced: dict[str, PodInfo] = field(default_factory=dict)  # pods an assumption changes
    binds: list[str] = field(default_factory=list)  # pods held as bound (informer: pending)
    evictions: list[str] = field(default_factory=list)  # pods held as terminating
    confirmed: int = 0  # assumptions the informer now shows (or made moot)
    expired: int = 0  # assumptions dropped at their deadline, unconfirmed


class AssumeCache:
    """Binds and evictions this replica made that the informer may not show yet (see module)."""

    def __init__(self, ttl_s: float = DEFAULT_TTL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self.clock = clock
        self._binds: dict[str, _Entry] = {}
        self._evictions: dict[str, _Entry] = {}
        self._lock = threading.Lock()  # the elector's thread clears while the loop overlays

    def __len__(self) -> int:
        with self._lock:
            return len(self._binds) + len(self._evictions)

    # -- the writes ---------------------------------------------------------------------------
    def assume(self, bind: Bind, uid: str) -> None:
        """The pod ``bind.job_id`` (UID ``uid``) is being bound as ``bind``."""
        with self._lock:
            self._binds[bind.job_id] = _Entry(uid, bind)

    def finish(self, key: str) -> None:
        """The Binding of ``key`` was accepted: its assumption expires ``ttl_s`` from now."""
        with self._lock:
            got = self._binds.get(key)
            if got is not None:
                got.deadline = self.clock() + self.ttl_s

    def forget(self, key: str) -> None:
        """The Binding of ``key`` failed (or 409): the API's view of the pod stands."""
        with self._lock:
            self._binds.pop(key, None)

    def evicted(self, key: str, uid: str) -> None:
        """An Eviction of ``key`` (UID ``uid``) was accepted: terminating until seen so."""
        with self._lock:
            self._evictions[key] = _Entry(uid, None, self.clock() + self.ttl_s)

    def clear(self) -> None:
        """Forget everything: a new leader term starts from the API alone."""
        with self._lock:
            self._binds.clear()
            self._evictions.clear()

    # -- what the cycle reads -----------------------------------------------------------------
    def bound_nodes(self) -> dict[str, str]:
        """Pod key → node of every bind held: the drain counts them on their node."""
        with self._lock:
            return {k: e.bind.node for k, e in self._binds.items() if e.bind is not None}

    def evicting(self) -> frozenset[str]:
        """Pods whose eviction is held: the drain does not evict them again."""
        with self._lock:
            return frozenset(self._evictions)

    def overlay(self, infos: Iterable[PodInfo]) -> Overlay:
        """The informer's parsed pods with every live assumption applied (see the module), as
        :meth:`overlay_on` decides it, in ``infos``' order."""
        infos = list(infos)
        out = self.overlay_on({i.key: i for i in infos})
        out.infos = [out.replaced.get(i.key, i) for i in infos]
        return out

    def overlay_on(self, infos: Mapping[str, PodInfo]) -> Overlay:
        """The live assumptions laid over ``infos`` (pod key → the informer's parsed pod):
        ``Overlay.replaced`` holds the pods an assumption changes; every other pod stands as
        parsed. The pass goes over the (few) assumptions, not over every pod.

        It runs on a copy of the assumptions, outside the lock: the binding threads'
        ``finish``/``forget`` must not wait for it. An entry the pass decided to drop goes only
        if it is still the same entry (a new ``assume`` of the pod in between stays)."""
        now = self.clock()
        out = Overlay(infos=[])
        with self._lock:
            binds, evictions = dict(self._binds), dict(self._evictions)
        drop: list[tuple[dict[str, _Entry], str, _Entry]] = []
        for key, b in binds.items():
            info = infos.get(key)
            if info is None:  # deleted: nothing to hold
                drop.append((self._binds, key, b))
                out.confirmed += 1
                continue
            seen_done = bool(info.uid != b.uid or info.node_name or info.terminating
                             or info.terminal)
            if _ends(b, seen_done, now, out):
                drop.append((self._binds, key, b))
                continue
            assert b.bind is not None
            ann = dict(info.annotations)
            ann.update(binding_annotations(b.bind, ann))
            out.replaced[key] = replace(info, node_name=b.bind.node, assignment=b.bind,
                                        annotations=ann)
            out.binds.append(key)
        for key, e in evictions.items():
            info = out.replaced.get(key) or infos.get(key)
            if info is None:
                drop.append((self._evictions, key, e))
                out.confirmed += 1
                continue
            if _ends(e, info.uid != e.uid or info.terminating or info.terminal, now, out):
                drop.append((self._evictions, key, e))
                continue
            out.replaced[key] = replace(info, terminating=True)
            out.evictions.append(key)
        with self._lock:
            for live, key, entry in drop:
                if live.get(key) is entry:
                    del live[key]
        return out


def _ends(entry: _Entry, confirmed: bool, now: float, out: Overlay) -> bool:
    """Whether an assumption ends this cycle — the informer shows it done (or moot), or its
    deadline passed — counted in ``out`` as confirmed or expired."""
    if confirmed:
        out.confirmed += 1
        return True
    if entry.deadline is not None and now > entry.deadline:
        out.expired += 1
        return True
    return False
