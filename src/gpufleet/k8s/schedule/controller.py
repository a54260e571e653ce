"""The gpufleet scheduler/controller: watch, snapshot, plan, apply — on one active replica.

Threads: one informer per resource (Pods in all namespaces, Nodes, for team queues GpuQueues
and Namespaces: ``k8s.queues``, and where the API serves ``resource.k8s.io/v1`` ResourceSlices,
DeviceClasses and ResourceClaims), the Lease elector, and the
loop that runs a cycle whenever something changed (or every ``resync_s``) *while this replica
leads*. Every cycle starts from the informers' objects, never from memory, except for one
bridge: binds and evictions this replica just made are *assumed*
(:class:`~gpufleet.k8s.translate.assume.AssumeCache`, after kube-scheduler's scheduler cache)
until the watch shows them, so the next cycle neither places a pod twice nor gives its GPUs to
someone else before the event arrives. A failed or 409'd bind is forgotten at once, and an
accepted one that the informer never confirms expires ``assume_ttl_s`` later, so the API stays
the truth. The pods a cycle refused for want of room are not planned again until a snapshot
shows capacity freed (:mod:`~gpufleet.k8s.schedule.blocked`), so a cycle with a long queue of
such pods costs what changed.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from functools import partial
from http.server import ThreadingHTTPServer
from typing import Any

import numpy as np
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpufleet.catalog.gpus import default_gpu_catalog
from gpufleet.config import Scenario
from gpufleet.control.admission import SPOT_TAINT
from gpufleet.control.cycle import CyclePlan
from gpufleet.control.gang_room import GangRoomBook, gpu_hour_usd
from gpufleet.control.nominations import Nominations
from gpufleet.control.policies import backfill_pass, gang_room_settings, placement_policy
from gpufleet.control.teams import Gate
from gpufleet.control.write_backoff import WriteBackoff
from gpufleet.decisions import Bind, CapacityType, Refuse
from gpufleet.k8s.capacity.cost import LiveFleet, LiveFleetCollector, PriceBook
from gpufleet.k8s.capacity.inputs import node_caps
from gpufleet.k8s.capacity.loop import CapacityController
from gpufleet.k8s.capacity.setup import build_capacity, capacity_types
from gpufleet.k8s.disruption.consolidation_mark import movable_keys
from gpufleet.k8s.disruption.drain import PROVIDER_FAULTS, Drainer
from gpufleet.k8s.dra.claim_assume import ClaimAssume
from gpufleet.k8s.dra.claim_view import DeviceCache, DraWorld, general_binds
from gpufleet.k8s.queues.metrics import QueueCollector
from gpufleet.k8s.queues.tracker import LiveQuota, QueueTracker
from gpufleet.k8s.schedule.apply import ApiErrors, Applier, Outcome
from gpufleet.k8s.schedule.blocked import BlockedPods, room_of
from gpufleet.k8s.schedule.claim_writes import ClaimWriter
from gpufleet.k8s.schedule.cycle import VictimMemo, gang_room_input, launch_gates, plan_cycle
from gpufleet.k8s.schedule.telemetry import ControllerMetrics, pending_reason, serve
from gpufleet.k8s.settings import LiveDelays, apply_levers
from gpufleet.k8s.translate.assume import AssumeCache
from gpufleet.k8s.translate.pod_index import PENDING
from gpufleet.k8s.translate.snapshot import ParseCache, Snapshot, build_snapshot
from gpufleet.k8s.watch.connections import BASE_CONNECTIONS, client_with_pool
from gpufleet.k8s.watch.informer import Informer
from gpufleet.k8s.watch.leader import LeaderElector
from gpufleet.k8s.watch.ratelimit import TokenBucket
from gpufleet.provisioning import NodeShape, Offer
from gpufleet.state import ResourceRequest

log = logging.getLogger(__name__)


def _uid(obj: Mapping[str, Any] | None) -> str:
    return str((obj or {}).get("metadata", {}).get("uid") or "")


def serves_dra(resource: Any) -> bool:
    """Whether the API server serves ``resource.k8s.io/v1`` slices, classes and claims (1.34+;
    older clusters keep the node-label path alone) and lets this controller read them."""
    try:
        listed = resource.get_api_resources()
    except (*ApiErrors,) as exc:
        log.info("resource.k8s.io/v1 not served (%s): DRA off", exc)
        return False
    served = {r.name for r in listed.resources or ()}
    if not {"resourceslices", "deviceclasses", "resourceclaims"} <= served:
        return False
    try:  # an older chart's RBAC: run without DRA rather than never become ready
        resource.list_device_class(limit=1, _preload_content=False)
    except ApiException as exc:
        if exc.status != 403:
            raise
        log.warning("resource.k8s.io/v1 served but not readable (403): DRA off; the chart's "
                    "RBAC grants it")
        return False
    return True


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


def _quotas(queues: LiveQuota) -> object:
    """The team queues' nominal quotas, for the room a cycle sees (``k8s.schedule.blocked``)."""
    q = queues.input
    return None if q is None else sorted(q.book.teams.items(), key=lambda kv: kv[0])


def _merged(changes: set[str] | None, more: Iterable[str]) -> set[str] | None:
    """Keys changed over two spans (None: any may have)."""
    return None if changes is None else changes.union(more)


def _usd(x: float | None) -> str:
    return "-" if x is None else f"${x:.2f}"


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
        queue_spend_interval_s: float = 10.0,
        dra: bool | None = None,
        async_binds: bool = True,
    ) -> None:
        # no TLS handshake per call: a pooled connection for every thread that writes — the
        # applier's ``workers`` and, with ``async_binds``, as many binding threads (a py-spy
        # profile of the 3,000-pod bench found 20 % of the process in handshakes without them)
        api = client_with_pool(api, (2 if async_binds else 1) * workers + BASE_CONNECTIONS)
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
        # DRA (resource.k8s.io/v1): slices, classes and claims, where the API serves them
        self.resource = client.ResourceV1Api(api)
        self.dra = serves_dra(self.resource) if dra is None else dra
        self.dra_informers: list[Informer] = []
        if self.dra:
            self.slices = Informer("resourceslices", self.resource.list_resource_slice,
                                   self.changed, on_relist=self._relisted)
            self.classes = Informer("deviceclasses", self.resource.list_device_class,
                                    self.changed, on_relist=self._relisted)
            self.claims = Informer("resourceclaims",
                                   self.resource.list_resource_claim_for_all_namespaces,
                                   self.changed, on_relist=self._relisted)
            self.dra_informers = [self.slices, self.classes, self.claims]
        self.claims_assumed = ClaimAssume(assume_ttl_s)
        self._cycle_dra: Snapshot | None = None
        self._unaccounted_seen: set[str] = set()  # logged once while they last
        self.elector = LeaderElector(client.CoordinationV1Api(api), lease_namespace, lease_name,
                                     self.identity, lease_s, renew_deadline_s, retry_s) \
            if leader_elect else None
        self.applier = Applier(self.core, self.metrics, instance=self.identity,
                               limiter=TokenBucket(qps, burst), workers=workers)
        self.claim_writer = ClaimWriter(self.resource, self.core, self.claims_assumed,
                                        self.applier.limiter)
        self.applier.prebind = self._prebind
        self.applier.in_claims = self._in_claims
        self.applier.leading = lambda: self.is_leader  # asked before every write
        # binds run in their own threads while the next cycle plans (kube-scheduler's binding
        # cycle): the assume cache holds each until its write is answered
        self.async_binds = async_binds
        self._binding = ThreadPoolExecutor(workers, thread_name_prefix="gpufleet-bind") \
            if async_binds else None
        # the live capacity loop, when the scenario names a cloud (k8s.capacity)
        self.capacity = build_capacity(self.core, scenario, capacity_namespace or lease_namespace,
                                       self.metrics.registry)
        if prices is None and self.capacity is not None:
            prices = offered_prices(self.capacity)
        # each pod's price of delay, shared with the capacity loop (control.value_of_time)
        self.delays = self.capacity.delays if self.capacity is not None \
            else LiveDelays.of(scenario)
        self.fleet = LiveFleet(prices)  # cost and fleet metrics under the simulator's names
        self.metrics.registry.register(LiveFleetCollector(
            self.fleet, self.nodes.objects, self.pods.objects,
            lambda: self.is_leader and self.ready(), time.time))
        self.policy = placement_policy(scenario, tie_seed=seed)
        # team queues: GpuQueue objects + namespace labels → the cycle's quotas, status, metrics
        self.queues = QueueTracker(api, self.changed, scenario, self.policy.catalog,
                                   self.applier.event, on_relist=self._relisted,
                                   spend_interval_s=queue_spend_interval_s)
        self.metrics.registry.register(QueueCollector(
            self.queues.snapshot_views, lambda: self.is_leader and self.ready()))
        self.applier.queue_of = self.queues.queue_of  # the disruption metrics' queue label
        self.backfill = backfill_pass(scenario)
        # pods refused for want of room, not planned again until capacity is freed
        # (k8s.schedule.blocked); not with a starvation limit (a skipped starving head would
        # not stop the backfill behind it)
        self.blocked = BlockedPods() if self.backfill.starvation_s is None else None
        self._carry_reset = threading.Event()  # a relist or a new term: plan everything
        self.rng = np.random.default_rng(seed)
        self.resync_s = resync_s
        self.assume_ttl_s = assume_ttl_s
        self.preemption = preemption
        self._cache = ParseCache()
        self._objects: dict[str, dict[str, Any]] = {}  # the pods, as the informer has them
        self._pod_changes: set[str] | None = None  # pods changed since the last snapshot
        self._carry_changes: set[str] | None = None  # ... since the carry was last split
        self._victim_memo: VictimMemo = {}  # victims_of's, across cycles
        self._catalog = default_gpu_catalog()
        self._devices = DeviceCache()
        self.assumed = AssumeCache(assume_ttl_s)
        self._threads: list[threading.Thread] = []
        self._server: ThreadingHTTPServer | None = None
        self.cycles = 0  # cycles that planned pending work
        self.passes = 0  # every pass, capacity included: what a test waits on to see time pass
        # one drain for every marked Node; with a cloud, a drained Node's instance is deleted
        # through the provider (capacity.terminate), else only the Node object goes
        self.drainer = Drainer(self.core, self.applier, self.metrics,
                               terminate=self.capacity.terminate if self.capacity else None,
                               on_recovery=self.fleet.add_recoveries)
        self.capacity_interval_s = 1.0
        self._capacity_at = -float("inf")
        # gang room (control.gang_room): each pending pod group's priced choice, in memory (a
        # restart prices them again), valued at the scenario's types' on-demand list prices;
        # scale-up is possible only where a cloud is configured
        settings = gang_room_settings(scenario)
        if settings is not None:
            settings = replace(settings, launch=settings.launch and self.capacity is not None)
        self.gang_settings = settings
        self.gang_book = GangRoomBook() if settings is not None else None
        # reclaim's claimants, first in the queue until they start (control.nominations), in
        # memory: a restarted controller judges their claims afresh
        self.nominations = Nominations()
        # pods whose bind, claim or refusal write failed sit out a backoff before the next
        # try (control.write_backoff), so an erroring API server is not sent a storm of retries
        self.write_backoff = WriteBackoff()
        types = self.capacity.types.values() if self.capacity is not None \
            else capacity_types(scenario)  # what scale-up may launch, or would
        self._gang_offers = [Offer(it.name, CapacityType.ON_DEMAND, NodeShape.of(it),
                                   float(it.usd_per_hour))
                             for it in types if it.gpus > 0] \
            if settings is not None else []
        self._gang_rates: dict[ResourceRequest, float | None] = {}

    # -- lifecycle ----------------------------------------------------------------------------
    def _relisted(self, resource: str) -> None:
        self.metrics.relists.labels(resource=resource).inc()
        self._carry_reset.set()

    @property
    def is_leader(self) -> bool:
        return self.elector is None or self.elector.is_leader

    def healthy(self) -> bool:
        return all(t.is_alive() for t in self._threads) and not self.stop_event.is_set()

    def ready(self) -> bool:
        return all(i.synced.is_set() for i in (self.pods, self.nodes, *self.dra_informers)) \
            and self.queues.ready()

    def serve_http(self, host: str, port: int) -> int:
        self._server = serve(self.metrics.registry, host, port, self.healthy, self.ready)
        return self._server.server_address[1]

    def start(self) -> None:
        def spawn(name: str, target: Any, *args: Any) -> None:
            t = threading.Thread(target=target, args=args, name=name, daemon=True)
            t.start()
            self._threads.append(t)

        spawn("informer-pods", self.pods.run, self.stop_event)
        spawn("informer-nodes", self.nodes.run, self.stop_event)
        for inf in [*self.queues.informers(), *self.dra_informers]:
            spawn(f"informer-{inf.name}", inf.run, self.stop_event)
        if self.elector is not None:
            spawn("leader-election", self.elector.run, self.stop_event, self._leading)
        spawn("scheduler-loop", self._loop)

    def _leading(self, leading: bool) -> None:
        self.metrics.leader.set(1 if leading else 0)
        if leading:
            self.assumed.clear()  # a new term starts from the API alone
            self.claims_assumed.clear()
            self._carry_reset.set()
            self.changed.set()

    def stop(self, release: bool = True) -> None:
        self.stop_event.set()
        self.changed.set()
        # one 5 s bound for all threads together: an informer of a quiet resource sits in its
        # watch until the next event, and daemon threads die with the process anyway
        deadline = time.monotonic() + 5
        for t in self._threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        if self._binding is not None:
            self._binding.shutdown(wait=True)  # binds in flight are answered first
        self.applier.close()
        if release and self.elector is not None:
            self.elector.release()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def _loop(self) -> None:
        while not self.stop_event.is_set():
            wait = self.resync_s
            due = self.write_backoff.next_due(time.monotonic())
            if due is not None:  # a held pod's backoff ends before the resync: wake for it
                wait = min(wait, due - time.monotonic() + 0.01)
            self.changed.wait(max(0.0, wait))
            self.changed.clear()
            if self.stop_event.is_set():
                return
            if not (self.ready() and self.is_leader):
                continue
            self.run_cycle()

    # -- one cycle ----------------------------------------------------------------------------
    def run_cycle(self) -> Outcome | None:
        """Snapshot → plan → apply, once, then the capacity loop (when there is a cloud).
        Returns what was applied (None: nothing pending)."""
        t0 = time.monotonic()
        now = time.time()
        # the loop's own copy of the pods by the informer's keys, brought up to date by what
        # changed since the last cycle; only those pods are parsed and sorted again
        # (k8s.translate.pod_index) and looked at again by the carry, so a cycle with
        # thousands of pods waiting costs what changed. The changes are kept until a snapshot
        # (and a split) took them: a cycle that failed before then loses none
        by_key = self._take_pods()
        pods = by_key.values()
        nodes = self.nodes.objects()
        # interrupted nodes first; the drain counts held binds on their node and does not evict
        # a pod again whose eviction is held
        for k in self.drainer.cycle(nodes, pods, now, assumed_on=self.assumed.bound_nodes(),
                                    evicting=self.assumed.evicting()):
            self.assumed.evicted(k, _uid(by_key.get(k)))
        dra = None
        if self.dra:
            dra = DraWorld.of(self.slices.objects(),
                              self.claims_assumed.overlay(self.claims.objects()),
                              self.classes.objects(), self._catalog, self._devices)
        snap = build_snapshot(nodes, by_key, catalog=self._catalog, cache=self._cache,
                              assumed=self.assumed, dra=dra, changed=self._pod_changes)
        self._pod_changes = set()
        self._cycle_dra = snap
        self._observe_assumed(snap)
        self._observe_unaccounted(snap)
        self.fleet.observe_state(snap.state)
        queues = self.queues.observe(snap, nodes, self.fleet.prices.price, now)
        self.delays.observe(self.scenario, queues.teams, queues.settings)
        out: Outcome | None = None
        refused: list[str] = []
        binds: list[Bind] = []
        caps: dict[str, int] = {}
        self.write_backoff.keep(by_key)
        held = self.write_backoff.held(time.monotonic())
        if held:  # their last write failed: not planned (nor refused) until their backoff ends
            snap.pending_by_key = {k: p for k, p in snap.pending_by_key.items() if k not in held}
            snap.pending = list(snap.pending_by_key.values())
        if snap.pending_by_key or queues.draining:
            nominated = self.nominations.current(now)
            carried = self._carried(snap, queues, by_key, nominated, now)
            carried_messages = self.blocked.messages.copy() if self.blocked is not None \
                else Counter[str]()
            # scale-up counts the carried pods refused (a list of them only where it runs)
            carried_ids = list(carried) if self.capacity is not None else []
            apply_levers(snap, self.scenario, delays=self.delays)
            # which pods may move: read by right-sizing (with a cloud) and by the gang room's
            # eviction plans (a pod group pending), an O(pods) walk skipped otherwise
            wanted = (self.capacity is not None and self.scenario.autoscaling) or any(
                p.group is not None for p in snap.pending)
            movable = self.delays.movable(movable_keys(pods), snap.pods) if wanted else set()
            gang_room = None
            if self.gang_settings is not None and self.gang_book is not None:
                gang_room = gang_room_input(
                    snap, self.gang_settings, self.gang_book, self._gpu_rate, now,
                    movable if self.preemption else frozenset(), self._victim_memo,
                    lambda p: self.delays.of_pod(p).usd_per_gpu_hour)
            caps = self._caps(snap, movable, now)
            out_of_room: dict[str, Refuse] = {}
            plan = plan_cycle(snap, self.policy, self.rng, self.backfill, now, self.preemption,
                              quota=queues, gang_room=gang_room, caps=caps,
                              victim_memo=self._victim_memo, nominated=nominated,
                              blocked_out=out_of_room)
            # the capacity loop and the queues' status see every pending pod (a pass over
            # them all: only where one of them runs)
            if carried and (self.capacity is not None or queues.settings or queues.parsed):
                planned = {p.key: p for p in snap.pending}
                snap.pending = [planned.get(k, p) for k, p in snap.pending_by_key.items()]
                if self.capacity is not None:  # scale-up reads every pod's levers
                    apply_levers(snap, self.scenario, delays=self.delays)
            if self.blocked is not None:
                self.blocked.record(out_of_room, by_key, room_of(snap, _quotas(queues)), now)
            if not self.is_leader:  # lost the lease while planning: act on nothing
                return None
            spot = {n.name for n in snap.state.nodes if SPOT_TAINT in n.taints}
            pinned = [Bind(job_id=k, node=c.pinned) for k, c in snap.claims.items()
                      if c.pinned is not None and c.pinned in snap.state.index
                      and k not in held]
            for k, c in snap.claims.items():  # allocated on a node that is gone: release
                if c.pinned is not None and c.pinned not in snap.state.index and k in by_key:
                    self.claim_writer.release(by_key[k], c)
            decisions = self._general_claims(snap, plan.decisions)
            binds = [*pinned, *(d for d in decisions if isinstance(d, Bind))]
            self._gang_room_chosen(plan, snap, now)
            self.nominations.apply(plan.started, plan.nominated, now)
            out = self._apply([*pinned, *decisions], binds, by_key, spot)
            self._backoff(out)
            if out.conflicts or out.errors:
                self.changed.set()  # re-read and retry soon
            by_message = carried_messages  # a carried pod is still refused (a copy)
            for r in plan.of(Refuse):
                by_message[r.message] += 1
                refused.append(r.job_id)
            refused += carried_ids
            reasons: dict[str, int] = {}
            for msg, n in by_message.items():
                reason = pending_reason(msg)
                reasons[reason] = reasons.get(reason, 0) + n
            self.metrics.set_pending(reasons)
            self.metrics.cycle.observe(time.monotonic() - t0)
            self.cycles += 1
        else:
            self.metrics.set_pending({})
        self.queues.sync(queues, snap, now, leader=self.is_leader)
        self._capacity_cycle(snap, refused, nodes, pods, t0, queues, binds, caps)
        self.passes += 1
        return out

    def _take_pods(self) -> dict[str, dict[str, Any]]:
        got, everything = self.pods.take()
        if everything:
            self._objects = {k: o for k, o in got.items() if o is not None}
            self._pod_changes = self._carry_changes = None
            return self._objects
        for k, o in got.items():
            if o is None:
                self._objects.pop(k, None)
            else:
                self._objects[k] = o
        self._pod_changes = _merged(self._pod_changes, got.keys())
        self._carry_changes = _merged(self._carry_changes, got.keys())
        return self._objects

    def _general_claims(self, snap: Snapshot, decisions: list[Any]) -> list[Any]:
        """The plan's decisions with the general pods' claims allocated on their binds' nodes
        (``dra.claim_view.general_binds``); a bind whose claims no longer fit there beside the
        cycle's other binds is left out (planned again next cycle)."""
        if snap.dra is None or not any(c.general for c in snap.claims.values()):
            return decisions
        binds = [d for d in decisions if isinstance(d, Bind)]
        # GPUs that pods without claims hold or are given (the device plugin's, on a node that
        # also publishes slices): the general allocator must not give their devices out
        held = {(b.node, g) for b in [*(a.bind for a in snap.allocations.values()),
                                      *(b for b in binds if b.job_id not in snap.claims)]
                for g in (*b.gpus, *(s.gpu for s in b.mig))}
        got, failed = general_binds(snap.dra, binds, snap.claims, held)
        snap.claims.update(got)
        if not failed:
            return decisions
        log.info("claims of %s: taken by this cycle's other binds; planned again",
                 ", ".join(failed))
        self.changed.set()
        drop = set(failed)
        return [d for d in decisions if not (isinstance(d, Bind) and d.job_id in drop)]

    def _carried(self, snap: Snapshot, queues: LiveQuota, by_key: Mapping[str, Any],
                 nominated: Sequence[str], now: float) -> Collection[str]:
        """Leave the pods carried as out of room (``k8s.schedule.blocked``) out of
        ``snap.pending`` for the plan, unless capacity was freed since the last cycle (every
        pending pod stays in ``snap.pending_by_key``); returns the carried pods' keys (a view,
        read before the carry's next record). Only the pods changed since the last split, and
        those it did not carry, are looked at again."""
        if self.blocked is None:
            return ()
        if self._carry_reset.is_set():
            self._carry_reset.clear()
            self.blocked.clear()
        self.blocked.observe(room_of(snap, _quotas(queues)), now)
        snap.pending, carried = self.blocked.split(
            snap.pending_by_key, by_key, nominated, self._carry_changes,
            listed=self._cache.index[PENDING].keys())
        self._carry_changes = set()
        return carried

    def _caps(self, snap: Snapshot, movable: set[str], now: float) -> dict[str, int]:
        """Right-sized nodes (``control.right_size``) where the fleet can launch a node of the
        pod's size: autoscaling with a cloud; {} otherwise (a fixed fleet places as before)."""
        if self.capacity is None or not self.scenario.autoscaling:
            return {}
        sc = self.scenario
        return node_caps(snap, self.capacity.types.values(), sc.scale_down_unneeded_s,
                         sc.checkpointing, movable, self.capacity.scale_up.guards, now)

    def _gpu_rate(self, req: ResourceRequest) -> float | None:
        """$/GPU-h of ``req``'s GPUs: the cheapest fitting on-demand list price."""
        if req not in self._gang_rates:
            self._gang_rates[req] = gpu_hour_usd(req, self._gang_offers)
        return self._gang_rates[req]

    def _gang_room_chosen(self, plan: CyclePlan, snap: Snapshot, now: float) -> None:
        """Book the cycle's gang-room choices (and count them); forget the groups that started
        or are no longer pending."""
        book = self.gang_book
        if book is None:
            return
        pending = {p.group for p in snap.pending if p.group is not None}
        gone = [g for g in book.decided if g not in pending]  # started, or deleted
        for gid, costs, room in book.apply([*plan.started, *gone], plan.gang_room, now):
            self.metrics.gang_room.labels(choice=room.value).inc()
            log.info("gang room: %s %s (wait $%.2f, scale up %s, preempt %s)", gid, room.value,
                     costs.wait_usd, _usd(costs.scale_up_usd), _usd(costs.preempt_usd))

    def _observe_unaccounted(self, snap: Snapshot) -> None:
        """Objects someone bound or allocated past what the node has: each is logged once
        while it lasts (the snapshot still books what is left of its GPUs), and counted."""
        claims = sum(1 for k in snap.unaccounted if k.startswith("claim "))
        self.metrics.unaccounted.labels(kind="claim").set(claims)
        self.metrics.unaccounted.labels(kind="pod").set(len(snap.unaccounted) - claims)
        for key in snap.unaccounted.keys() - self._unaccounted_seen:
            log.warning("snapshot: %s not booked as written: %s", key, snap.unaccounted[key])
        self._unaccounted_seen = set(snap.unaccounted)

    def _apply(self, decisions: list, binds: list[Bind],
               by_key: Mapping[str, Mapping[str, Any]], spot_nodes: set[str]) -> Outcome:
        """Apply the plan with its binds assumed while they are written (kube-scheduler's
        AssumePod → bind → FinishBinding, or ForgetPod when the bind failed or 409'd).

        With ``async_binds`` a pod's bind (unless its devices come from ResourceClaims: their
        writes read this cycle's DRA view) is handed to the binding threads and this returns
        without waiting; the next cycle sees it through the assume cache, and a bind that
        fails is forgotten and wakes the loop. Evictions and refusals are written here."""
        for b in binds:
            self.assumed.assume(b, _uid(by_key.get(b.job_id)))
        pool = self._binding
        if pool is not None:
            later = {b.job_id for b in binds if not self._uses_claims(b)}
            for b in binds:
                if b.job_id in later:  # its own pod's object: the loop's copy moves on
                    obj = by_key.get(b.job_id)
                    fut = pool.submit(self.applier.apply, [b],
                                      {b.job_id: obj} if obj is not None else {}, spot_nodes)
                    fut.add_done_callback(partial(self._bind_done, b))
            decisions = [d for d in decisions
                         if not (isinstance(d, Bind) and d.job_id in later)]
            binds = [b for b in binds if b.job_id not in later]
        accepted: set[str] = set()
        try:
            out = self.applier.apply(decisions, by_key, spot_nodes)
            accepted = {b.job_id for b in out.bound}
        finally:
            for b in binds:
                if b.job_id in accepted:
                    self.assumed.finish(b.job_id)
                else:
                    self.assumed.forget(b.job_id)
        for k in out.evicted:
            self.assumed.evicted(k, _uid(by_key.get(k)))
        return out

    def _uses_claims(self, b: Bind) -> bool:
        snap = self._cycle_dra
        return snap is not None and snap.claims.get(b.job_id) is not None

    def _backoff(self, out: Outcome) -> None:
        """Pods whose write failed start (or lengthen) their backoff; bound ones end it."""
        now = time.monotonic()
        for k in out.failed:
            self.write_backoff.failed(k, now)
        for b in out.bound:
            self.write_backoff.succeeded(b.job_id)

    def _bind_done(self, b: Bind, fut: Future[Outcome]) -> None:
        """A binding thread's answer: keep the assumption until the informer shows the pod
        (accepted), or drop it and wake the loop to re-read (409, error, pod gone); a failed
        write backs the pod off first."""
        try:
            out = fut.result()
        except Exception:  # a bug in a bind thread must not hold its GPUs
            log.exception("bind %s → %s", b.job_id, b.node)
            out = Outcome(failed=[b.job_id])
        self._backoff(out)
        if any(x.job_id == b.job_id for x in out.bound):
            self.assumed.finish(b.job_id)
        else:
            self.assumed.forget(b.job_id)
            self.changed.set()

    def _prebind(self, d: Bind, pod: Mapping[str, Any]) -> str | Mapping[str, Any] | None:
        """The pod's claims written before its Binding (``claim_writes``); pods without
        claims pass."""
        snap = self._cycle_dra
        if snap is None or snap.dra is None:
            return None
        claims = snap.claims.get(d.job_id)
        if claims is None:
            return None
        return self.claim_writer.prebind(d, pod, claims, snap.dra, snap.device_only_nodes)

    def _in_claims(self, d: Bind) -> bool:
        snap = self._cycle_dra
        claims = snap.claims.get(d.job_id) if snap is not None else None
        return claims is not None and snap is not None and claims.through_claims(
            d.node, snap.device_only_nodes)

    def _observe_assumed(self, snap: Snapshot) -> None:
        got = snap.assumed
        if got is None:
            return
        self.metrics.assumed.labels(kind="bind").set(len(got.binds))
        self.metrics.assumed.labels(kind="eviction").set(len(got.evictions))
        self.metrics.assumed_expired.inc(got.expired)
        if got.binds:
            self.metrics.assumed_cycles.inc()

    def _capacity_cycle(self, snap: Snapshot, refused: list[str], nodes: list[dict[str, Any]],
                        pods: Collection[dict[str, Any]], t0: float,
                        queues: LiveQuota | None = None,
                        binds: Sequence[Bind] = (), caps: Mapping[str, int] | None = None
                        ) -> None:
        """The capacity loop after placement, at most once per ``capacity_interval_s`` (each
        run lists records and instances); an API error is logged and retried next cycle."""
        if self.capacity is None or not self.is_leader:
            return
        if t0 - self._capacity_at < self.capacity_interval_s:
            return
        self._capacity_at = t0
        try:
            gates = launch_gates(snap, queues, binds, refused, self.policy.catalog)
            book = self.gang_book  # no launch for a gang that waits, or waits for its victims
            held = [g for g in book.decided if book.holds_scale_up(g, time.time())] \
                if book is not None else []
            if held:
                gates = {**(gates or {}), **dict.fromkeys(held, Gate.SKIP)}
            self.capacity.reconcile(snap, refused, nodes, list(pods), gates, caps)
        except ApiException as exc:
            log.warning("capacity loop: API error %s %s; retrying next cycle", exc.status,
                        exc.reason)
        except PROVIDER_FAULTS as exc:
            log.warning("capacity loop: %s; retrying next cycle", exc)
