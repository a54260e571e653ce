"""Leader election on a ``coordination.k8s.io/v1`` Lease, client-go's algorithm.

Every replica runs an elector; one holds the Lease and acts, the others keep their caches warm.

* **Acquire**: a replica takes the Lease when nobody holds it, or when the record it *observed*
  has not changed for ``lease_s`` — measured on its own monotonic clock from the moment it saw
  the record change, never by comparing another machine's timestamps (clock skew cannot hand
  the lease over early). Writes carry the Lease's ``resourceVersion``: two replicas racing for
  an expired lease get one success and one 409.
* **Renew** every ``retry_s``; a renewal that fails is retried, and when no renewal has
  succeeded for ``renew_deadline_s`` (< ``lease_s``) the replica stops acting *before* anyone
  else may take over — so two replicas never act at once, even across a network partition.
* **Kill -9** of the leader: its record stops changing and another replica takes it after
  ``lease_s`` (plus at most one ``retry_s``).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException

from gpufleet.k8s.watch.connections import release

log = logging.getLogger(__name__)


def _now_micro() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        coordination: Any,
        namespace: str,
        name: str,
        identity: str,
        lease_s: float = 15.0,
        renew_deadline_s: float = 10.0,
        retry_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not retry_s < renew_deadline_s < lease_s:
            raise ValueError("need retry_s < renew_deadline_s < lease_s")
        self.api = coordination
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_s = lease_s
        self.renew_deadline_s = renew_deadline_s
        self.retry_s = retry_s
        self.clock = clock
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._renewed_at: float | None = None  # last successful acquire/renew (monotonic)
        self.transitions = 0

    @property
    def is_leader(self) -> bool:
        """True only while the last successful renewal is younger than the renew deadline."""
        r = self._renewed_at
        return r is not None and self.clock() - r < self.renew_deadline_s

    def _read(self) -> dict[str, Any] | None:
        try:
            resp = self.api.read_namespaced_lease(self.name, self.namespace,
                                                  _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return json.loads(resp.data)

    def _spec(self, old: dict[str, Any] | None) -> dict[str, Any]:
        now = _now_micro()
        prev = (old or {}).get("spec") or {}
        mine = prev.get("holderIdentity") == self.identity
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.lease_s),
            "acquireTime": prev.get("acquireTime") if mine else now,
            "renewTime": now,
            "leaseTransitions": int(prev.get("leaseTransitions") or 0) + (0 if mine else 1),
        }

    def try_acquire_or_renew(self) -> bool:
        """One attempt; True when this replica holds the lease afterwards."""
        now = self.clock()
        lease = self._read()
        if lease is None:
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": self._spec(None)}
            release(self.api.create_namespaced_lease(self.namespace, body,
                                                     _preload_content=False))
            self._renewed_at = now
            self.transitions += 1
            return True
        spec = lease.get("spec") or {}
        record = (spec.get("holderIdentity"), spec.get("renewTime"),
                  spec.get("leaseDurationSeconds"))
        if record != self._observed:
            self._observed, self._observed_at = record, now
        holder = spec.get("holderIdentity")
        duration = float(spec.get("leaseDurationSeconds") or self.lease_s)
        if holder and holder != self.identity and now - self._observed_at < duration:
            self._renewed_at = None
            return False
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace,
                             "resourceVersion": lease["metadata"]["resourceVersion"]},
                "spec": self._spec(lease)}
        release(self.api.replace_namespaced_lease(self.name, self.namespace, body,
                                                  _preload_content=False))
        if holder != self.identity:
            self.transitions += 1
            log.info("%s: acquired lease %s/%s from %r", self.identity, self.namespace,
                     self.name, holder)
        self._renewed_at = now
        return True

    def run(self, stop: threading.Event, on_change: Callable[[bool], None] | None = None) -> None:
        """Acquire/renew every ``retry_s`` until ``stop``; report leadership changes."""
        was = False
        while not stop.is_set():
            try:
                self.try_acquire_or_renew()
            except ApiException as exc:
                if exc.status != 409:  # 409: lost a race for the lease, which is fine
                    log.warning("%s: lease update failed: %s", self.identity, exc.reason)
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                log.warning("%s: lease update failed: %s", self.identity, exc)
            now = self.is_leader
            if now != was:
                was = now
                log.info("%s: %s", self.identity, "leading" if now else "not leading")
                if on_change is not None:
                    on_change(now)
            stop.wait(self.retry_s)

    def release(self) -> None:
        """On a clean shutdown, hand the lease back at once (empty holder) if we hold it."""
        if self._renewed_at is None:
            return
        try:
            lease = self._read()
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            lease["spec"]["holderIdentity"] = ""
            lease["spec"]["leaseDurationSeconds"] = 1
            release(self.api.replace_namespaced_lease(self.name, self.namespace, lease,
                                                      _preload_content=False))
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            log.warning("%s: could not release lease: %s", self.identity, exc)
        self._renewed_at = None
