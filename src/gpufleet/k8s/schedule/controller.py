"""The gpufleet scheduler/controller: watch, snapshot, plan, apply — on one active replica.

Threads: one informer per resource (Pods in all namespaces, Nodes), the Lease elector, and the
loop that runs a cycle whenever something changed (or every ``resync_s``) *while this replica
leads*. Every cycle starts from the informers' objects, never from memory, except for one
bridge: binds and evictions this replica just made are *assumed* (kube-scheduler's scheduler
cache does the same) until the watch shows them, so the next cycle neither places a pod twice
nor gives its GPUs to someone else in the few milliseconds before the event arrives. An
assumption expires after ``assume_ttl_s`` whatever happens, so the API stays the truth.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Mapping
from http.server import ThreadingHTTPServer
from typing import Any

import numpy as np
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpufleet.config import Scenario
from gpufleet.decisions import Bind
from gpufleet.k8s.capacity.cost import LiveFleet, LiveFleetCollector, PriceBook
from gpufleet.k8s.capacity.loop import CapacityController
from gpufleet.k8s.capacity.setup import build_capacity
from gpufleet.k8s.disruption.drain import PROVIDER_FAULTS, Drainer
from gpufleet.k8s.schedule.apply import ApiErrors, Applier, Outcome
from gpufleet.k8s.schedule.cycle import Refuse, plan_cycle
from gpufleet.k8s.schedule.telemetry import ControllerMetrics, pending_reason, serve
from gpufleet.k8s.settings import apply_levers, backfill_for, policy_for
from gpufleet.k8s.translate.pods import binding_annotations
from gpufleet.k8s.translate.snapshot import ParseCache, Snapshot, build_snapshot
from gpufleet.k8s.watch.connections import BASE_CONNECTIONS, client_with_pool
from gpufleet.k8s.watch.informer import Informer
from gpufleet.k8s.watch.leader import LeaderElector
from gpufleet.k8s.watch.ratelimit import TokenBucket

log = logging.getLogger(__name__)


def _key(obj: Mapping[str, Any]) -> str:
    m = obj["metadata"]
    return f"{m.get('namespace')}/{m['name']}"


def offered_prices(capacity: CapacityController) -> PriceBook | None:
    """The cost metrics' prices from the cloud's own offerings (its spot prices now, its
    on-demand list) — asked once at start, which is also the credential preflight: a missing or
    rejected credential is a ``CredentialsError`` here (one line, exit 2), not a warning in the
    loop. An unreachable API for the lab's cloud falls back to the catalog's prices."""
    try:
        return PriceBook(offerings=capacity.provider.offerings())
    except (*ApiErrors, *PROVIDER_FAULTS) as exc:
        log.warning("cloud %s: no offerings at start (%s); catalog prices for cost metrics",
                    capacity.provider.name, exc)
        return None


class Controller:
    def __init__(
        self,
        api: client.ApiClient,
        scenario: Scenario,
        *,
        identity: str | None = None,
        lease_namespace: str = "kube-system",
        lease_name: str = "gpufleet-scheduler",
        leader_elect: bool = True,
        lease_s: float = 15.0,
        renew_deadline_s: float = 10.0,
        retry_s: float = 2.0,
        resync_s: float = 5.0,
        assume_ttl_s: float = 30.0,
        preemption: bool = True,
        seed: int = 0,
        qps: float = 0.0,
        burst: int = 1,
        prices: PriceBook | None = None,
        capacity_namespace: str | None = None,
        workers: int = 32,
    ) -> None:
        api = client_with_pool(api, workers + BASE_CONNECTIONS)  # no handshake per call
        self.api = api
        self.core = client.CoreV1Api(api)
        self.scenario = scenario
        self.identity = identity or f"{socket.gethostname()}_{os.getpid()}"
        self.metrics = ControllerMetrics()
        self.changed = threading.Event()
        self.stop_event = threading.Event()
        self.pods = Informer("pods", self.core.list_pod_for_all_namespaces, self.changed,
                             on_relist=self._relisted)
        self.nodes = Informer("nodes", self.core.list_node, self.changed,
                              on_relist=self._relisted)
        self.elector = LeaderElector(client.CoordinationV1Api(api), lease_namespace, lease_name,
                                     self.identity, lease_s, renew_deadline_s, retry_s) \
            if leader_elect else None
        self.applier = Applier(self.core, self.metrics, instance=self.identity,
                               limiter=TokenBucket(qps, burst), workers=workers)
        # the live capacity loop, when the scenario names a cloud (k8s.capacity)
        self.capacity = build_capacity(self.core, scenario, capacity_namespace or lease_namespace,
                                       self.metrics.registry)
        if prices is None and self.capacity is not None:
            prices = offered_prices(self.capacity)
        self.fleet = LiveFleet(prices)  # cost and fleet metrics under the simulator's names
        self.metrics.registry.register(LiveFleetCollector(
            self.fleet, self.nodes.objects, self.pods.objects,
            lambda: self.is_leader and self.ready(), time.time))
        self.policy = policy_for(scenario, seed)
        self.backfill = backfill_for(scenario)
        self.rng = np.random.default_rng(seed)
        self.resync_s = resync_s
        self.assume_ttl_s = assume_ttl_s
        self.preemption = preemption
        self._cache = ParseCache()
        self._assumed: dict[str, tuple[Bind, str, float]] = {}
        self._evicting: dict[str, float] = {}
        self._threads: list[threading.Thread] = []
        self._server: ThreadingHTTPServer | None = None
        self.cycles = 0
        # one drain for every marked Node; with a cloud, a drained Node's instance is deleted
        # through the provider (capacity.terminate), else only the Node object goes
        self.drainer = Drainer(self.core, self.applier, self.metrics,
                               terminate=self.capacity.terminate if self.capacity else None,
                               on_recovery=self.fleet.add_recoveries)
        self.capacity_interval_s = 1.0
        self._capacity_at = -float("inf")

    # -- lifecycle ----------------------------------------------------------------------------
    def _relisted(self, resource: str) -> None:
        self.metrics.relists.labels(resource=resource).inc()

    @property
    def is_leader(self) -> bool:
        return self.elector is None or self.elector.is_leader

    def healthy(self) -> bool:
        return all(t.is_alive() for t in self._threads) and not self.stop_event.is_set()

    def ready(self) -> bool:
        return self.pods.synced.is_set() and self.nodes.synced.is_set()

    def serve_http(self, host: str, port: int) -> int:
        self._server = serve(self.metrics, host, port, self.healthy, self.ready)
        return self._server.server_address[1]

    def start(self) -> None:
        def spawn(name: str, target: Any, *args: Any) -> None:
            t = threading.Thread(target=target, args=args, name=name, daemon=True)
            t.start()
            self._threads.append(t)

        spawn("informer-pods", self.pods.run, self.stop_event)
        spawn("informer-nodes", self.nodes.run, self.stop_event)
        if self.elector is not None:
            spawn("leader-election", self.elector.run, self.stop_event, self._leading)
        spawn("scheduler-loop", self._loop)

    def _leading(self, leading: bool) -> None:
        self.metrics.leader.set(1 if leading else 0)
        if leading:
            self._assumed.clear()  # a new term starts from the API alone
            self._evicting.clear()
            self.changed.set()

    def stop(self, release: bool = True) -> None:
        self.stop_event.set()
        self.changed.set()
        for t in self._threads:
            t.join(timeout=5)
        self.applier.close()
        if release and self.elector is not None:
            self.elector.release()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def _loop(self) -> None:
        while not self.stop_event.is_set():
            self.changed.wait(self.resync_s)
            self.changed.clear()
            if self.stop_event.is_set():
                return
            if not (self.ready() and self.is_leader):
                continue
            self.run_cycle()

    # -- one cycle ----------------------------------------------------------------------------
    def _overlay(self, pods: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
        """The informer's pods with this replica's not-yet-observed binds and evictions."""
        if not self._assumed and not self._evicting:
            return pods
        out = []
        for p in pods:
            key = _key(p)
            got = self._assumed.get(key)
            if got is not None:
                bind, uid, t = got
                seen = (p.get("spec") or {}).get("nodeName") or p["metadata"].get("uid") != uid
                if seen or now - t > self.assume_ttl_s:
                    del self._assumed[key]
                else:
                    meta = dict(p["metadata"])
                    had = meta.get("annotations") or {}
                    meta["annotations"] = {**had, **binding_annotations(bind, had)}
                    p = {**p, "metadata": meta, "spec": {**p["spec"], "nodeName": bind.node}}
            t_ev = self._evicting.get(key)
            if t_ev is not None:
                if p["metadata"].get("deletionTimestamp") or now - t_ev > self.assume_ttl_s:
                    del self._evicting[key]
                else:
                    p = {**p, "metadata": {**p["metadata"], "deletionTimestamp": "assumed"}}
            out.append(p)
        keys = {_key(p) for p in pods}
        for gone in [k for k in self._assumed if k not in keys]:
            del self._assumed[gone]
        for gone in [k for k in self._evicting if k not in keys]:
            del self._evicting[gone]
        return out

    def run_cycle(self) -> Outcome | None:
        """Snapshot → plan → apply, once, then the capacity loop (when there is a cloud).
        Returns what was applied (None: nothing pending)."""
        t0 = time.monotonic()
        now = time.time()
        raw = self._overlay(self.pods.objects(), t0)
        for k in self.drainer.cycle(self.nodes.objects(), raw, now):  # interrupted nodes first
            self._evicting[k] = t0
        nodes = self.nodes.objects()
        snap = build_snapshot(nodes, raw, cache=self._cache)
        self.fleet.observe_state(snap.state)
        out: Outcome | None = None
        refused: list[str] = []
        if snap.pending:
            apply_levers(snap, self.scenario)
            plan = plan_cycle(snap, self.policy, self.rng, self.backfill, now, self.preemption)
            if not self.is_leader:  # lost the lease while planning: act on nothing
                return None
            by_key = {_key(p): p for p in raw}
            out = self.applier.apply(plan.decisions, by_key)
            for b in out.bound:
                self._assumed[b.job_id] = (b, by_key[b.job_id]["metadata"].get("uid", ""), t0)
            for k in out.evicted:
                self._evicting[k] = t0
            if out.conflicts or out.errors:
                self.changed.set()  # re-read and retry soon
            reasons: dict[str, int] = {}
            for r in plan.of(Refuse):
                reason = pending_reason(r.message)
                reasons[reason] = reasons.get(reason, 0) + 1
                refused.append(r.job_id)
            self.metrics.set_pending(reasons)
            self.metrics.cycle.observe(time.monotonic() - t0)
            self.cycles += 1
        else:
            self.metrics.set_pending({})
        self._capacity_cycle(snap, refused, nodes, raw, t0)
        return out

    def _capacity_cycle(self, snap: Snapshot, refused: list[str], nodes: list[dict[str, Any]],
                        pods: list[dict[str, Any]], t0: float) -> None:
        """The capacity loop after placement, at most once per ``capacity_interval_s`` (each
        run lists records and instances); an API error is logged and retried next cycle."""
        if self.capacity is None or not self.is_leader:
            return
        if t0 - self._capacity_at < self.capacity_interval_s:
            return
        self._capacity_at = t0
        try:
            self.capacity.reconcile(snap, refused, nodes, pods)
        except ApiException as exc:
            log.warning("capacity loop: API error %s %s; retrying next cycle", exc.status,
                        exc.reason)
        except PROVIDER_FAULTS as exc:
            log.warning("capacity loop: %s; retrying next cycle", exc)
