"""Recovery time of an interruption: notice → the owner's replacement pod Running elsewhere.

The clock starts at the mark's ``noticed_at`` (the first source to learn of the reclaim) and
stops when a pod of the same controlling owner (the Job, for a Job's pod) other than the one on
the interrupted node is Running on another node — the moment the work is going again. The start
of its containers (``state.running.startedAt``) is the stop time when the API says it, so a slow
cycle does not lengthen the figure.

Owners are noted every cycle from the pods still on marked nodes (including pods already
terminating), so a controller restarted mid-drain picks up the owners whose pods are still
there; an owner whose pod had already gone before the restart is not timed (the histogram is this
process's observations, as every Prometheus counter is).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpufleet.k8s.disruption.interruption import InterruptionMark
from gpufleet.k8s.translate.pods import finished, parse_time, stays_on_drain

MAX_WAIT_S = 24 * 3600.0  # an owner never replaced (the Job was deleted) is forgotten after this


@dataclass(frozen=True, slots=True)
class _Waiting:
    noticed_at: float
    node: str
    pod_uid: str


def controller_uid(pod: Mapping[str, Any]) -> str | None:
    for o in (pod.get("metadata") or {}).get("ownerReferences") or ():
        if o.get("controller"):
            return o.get("uid")
    return None


def running_since(pod: Mapping[str, Any]) -> float | None:
    """When the pod's containers started running; None unless the pod is Running."""
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return None
    started = [parse_time((c.get("state") or {}).get("running", {}).get("startedAt"))
               for c in status.get("containerStatuses") or ()]
    started = [s for s in started if s]
    return max(started) if started else parse_time(status.get("startTime")) or None


class RecoveryClock:
    """Owners waiting for a replacement; ``observe`` returns the recoveries completed now."""

    def __init__(self) -> None:
        self._waiting: dict[str, _Waiting] = {}

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def note(self, marked: Mapping[str, InterruptionMark],
             pods: Iterable[Mapping[str, Any]]) -> None:
        """Start the clock for the owner of every pod on a marked node (once per owner)."""
        if not marked:  # the usual cycle: no pass over every pod
            return
        for p in pods:
            node = (p.get("spec") or {}).get("nodeName")
            if not node:
                continue
            mark = marked.get(node)
            if mark is None or stays_on_drain(p) or finished(p):
                continue
            owner = controller_uid(p)
            if owner is not None and owner not in self._waiting:
                uid = (p.get("metadata") or {}).get("uid", "")
                self._waiting[owner] = _Waiting(mark.noticed_at, node, uid)

    def observe(self, pods: Iterable[Mapping[str, Any]], now: float) -> list[float]:
        """Seconds from notice to Running for each owner whose replacement now runs."""
        if not self._waiting:
            return []
        done: list[float] = []
        for p in pods:
            owner = controller_uid(p)
            w = self._waiting.get(owner) if owner else None
            if w is None:
                continue
            meta, spec = p.get("metadata") or {}, p.get("spec") or {}
            if meta.get("uid") == w.pod_uid or spec.get("nodeName") in (None, w.node):
                continue
            if meta.get("deletionTimestamp"):
                continue
            since = running_since(p)
            if since is None:
                continue
            done.append(max(0.0, since - w.noticed_at))
            del self._waiting[owner]  # type: ignore[arg-type]
        for owner in [o for o, w in self._waiting.items() if now - w.noticed_at > MAX_WAIT_S]:
            del self._waiting[owner]
        return done
