"""This replica's own claim writes, held over the claims informer until it shows them.

The same window as for binds (:mod:`gpufleet.k8s.translate.assume`): a claim's ``status.allocation``
is in the API when ``resourceclaims/status`` returns, but reaches the informer with its watch event.
A cycle in between would see the claim unallocated — its devices free for the next pod, and the pod
(already bound, or pinned) without its GPUs. kube-scheduler keeps the written claim in its claim
assume cache (``AssumeClaimAfterAPICall``) until the informer catches up; this does the same: the
written object stands in for the informer's copy while the informer's ``resourceVersion`` is older
(resourceVersions of one object are compared as integers, as kube's assume cache does), and goes
when the informer has it (or a newer one), when the claim is gone or replaced (another UID), or
``ttl_s`` after the write.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from gpufleet.k8s.dra.claims import claim_key


def _rv(obj: dict[str, Any]) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


def _uid(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


@dataclass(slots=True)
class _Held:
    claim: dict[str, Any]
    deadline: float


class ClaimAssume:
    def __init__(self, ttl_s: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self.clock = clock
        self._held: dict[str, _Held] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)

    def assume(self, claim: dict[str, Any]) -> None:
        """``claim`` is the API's answer to a write of ours."""
        with self._lock:
            self._held[claim_key(claim)] = _Held(claim, self.clock() + self.ttl_s)

    def clear(self) -> None:
        with self._lock:
            self._held.clear()

    def overlay(self, claims: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        """The informer's claims with every newer write of ours in place of its copy."""
        now = self.clock()
        out: list[dict[str, Any]] = []
        with self._lock:
            seen: set[str] = set()
            for c in claims:
                key = claim_key(c)
                seen.add(key)
                h = self._held.get(key)
                if h is not None:
                    if _uid(c) != _uid(h.claim) or _rv(c) >= _rv(h.claim) or now > h.deadline:
                        del self._held[key]
                    else:
                        c = h.claim
                out.append(c)
            for key in [k for k, h in self._held.items() if k not in seen]:
                if now > self._held[key].deadline:
                    del self._held[key]
                else:  # created by us (an extended-resource claim) and not listed yet
                    out.append(self._held[key].claim)
        return out
