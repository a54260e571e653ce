"""Pods whose placement write failed wait before it is tried again (kube-scheduler's pod backoff
queue: ``podInitialBackoffSeconds`` 1, ``podMaxBackoffSeconds`` 10).

A bind, claim or refusal write that the API server answers with an error (a 500, a connection
cut, a 429 the client did not wait out) wakes the driver's loop to re-read the world. Without a
wait, the next cycle plans the same pod and sends the same write within milliseconds: the lab
measured some 270 bind attempts a second for 34 pods while every bind got a 500 — a storm
against a server that is already failing. So each pod whose write failed sits out its backoff:
:data:`INITIAL_S` after its first failure, doubling with each failure in a row up to
:data:`MAX_S`; a write that succeeds, or the pod's deletion, forgets it. A 409 is
not a failure here: it says the world changed, and the re-read is the remedy.

Example: a pod's bind fails at 100 (held until 101), again at 101 (until 103), at 103 (until
107), at 107 (until 115), at 115 (until 125: the 10 s cap); bound at 125, a failure at 200 holds
it until 201 again.
"""

from __future__ import annotations

import threading
from collections.abc import Container
from dataclasses import dataclass, field

INITIAL_S = 1.0
MAX_S = 10.0


@dataclass(slots=True)
class WriteBackoff:
    """Per pod: (failures in a row, held until). Safe to share between a driver's loop and
    the threads that write its binds."""

    pods: dict[str, tuple[int, float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def failed(self, key: str, now: float) -> float:
        """Record a failed write of ``key``'s placement at ``now``; returns until when it waits."""
        with self._lock:
            n = self.pods.get(key, (0, 0.0))[0] + 1
            until = now + min(MAX_S, INITIAL_S * 2.0 ** (n - 1))
            self.pods[key] = (n, until)
            return until

    def succeeded(self, key: str) -> None:
        with self._lock:
            self.pods.pop(key, None)

    def held(self, now: float) -> frozenset[str]:
        """The pods still waiting at ``now``."""
        with self._lock:
            return frozenset(k for k, (_, until) in self.pods.items() if until > now)

    def next_due(self, now: float) -> float | None:
        """When the next held pod may be tried again (None: none held)."""
        with self._lock:
            due = [until for _, until in self.pods.values() if until > now]
        return min(due) if due else None

    def keep(self, pods: Container[str]) -> None:
        """Forget the pods not among ``pods`` (those that still exist: a pod whose bind is in
        flight is not pending, yet its run of failures goes on); a pass over the pods held,
        not over ``pods``."""
        with self._lock:
            for k in [k for k in self.pods if k not in pods]:
                del self.pods[k]
