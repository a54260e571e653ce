"""The live capacity controller: pending pods → launches, idle nodes → terminations, reclaims →
drains — on the leader, after each scheduling cycle, level-triggered from the API.

One :meth:`CapacityController.reconcile` per cycle, in this order:

1. **Converge launches.** Records (``k8s.launch_records``) + the provider's instances + Nodes:
   a record without an instance is created again *with its token* (the provider hands back the
   instance if the first call got through before a crash); a record whose Node registered
   (joined on ``spec.providerID``, Ready) or whose instance is gone is deleted; an instance whose
   Node has not registered within ``registration_timeout_s`` of its launch is deleted, and so is
   an unrecorded gpufleet instance with no Node past that time (a leak). A gpufleet Node whose
   instance is gone is deleted.
2. **Interruptions.** Each ``provider.interruptions()`` event marks its Node through the one
   convention of :mod:`gpufleet.k8s.disruption.interruption` (``node_for_instance`` +
   ``mark_node``, what
   ``mark_interrupted_instance`` does, keeping whether *this* call marked it for the metric; the
   node agent writes the same mark) and is acknowledged after. Cordoning, evicting and
   terminating a marked Node is the drain's job alone
   (:class:`gpufleet.k8s.disruption.drain.Drainer`),
   which hands each drained Node back to :meth:`CapacityController.terminate` — the instance is
   deleted through the provider.
3. **Scale up.** The pods the cycle refused → :class:`gpufleet.provisioning.ScaleUpPolicy` (the
   simulator's code; spot only for pods tolerating spot, the scenario's spot strategy) minus the
   capacity still booting → each ``Launch`` node gets a record *written before* the provider is
   called.
4. **Scale down.** gpufleet-launched Nodes (``TAG_MANAGED``; never anyone else's; not cordoned
   or marked) → :class:`gpufleet.provisioning.DisruptionPolicy`, the simulator's, with the
   scenario's ``consolidation``, ``multi_node_consolidation`` and ``utilization_threshold``:
   an emptiness command (nodes empty for ``scale_down_unneeded_s``) is carried out at once —
   if the node still has no pod to evict: cordon, ``provider.delete``, delete the Node; a
   consolidation command (nodes under-used that long whose pods fit elsewhere, with at most one
   cheaper replacement)
   goes through :class:`gpufleet.k8s.disruption.consolidation.Consolidator` (steps and mark in
   :mod:`gpufleet.k8s.disruption.consolidation_mark`): proposed, re-validated after a validation
   period, the replacement launched first, then its Nodes marked and cordoned for the drain.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gpufleet.catalog.instances import InstanceType
from gpufleet.cloud.provider import (
    TAG_MANAGED,
    TAG_MIG_CONFIG,
    CapacityShortage,
    CloudProvider,
    Instance,
    InstanceState,
)
from gpufleet.config import Scenario
from gpufleet.decisions import CapacityType, Cordon, Launch, Terminate
from gpufleet.k8s.capacity import inputs as plan
from gpufleet.k8s.capacity.launch_records import LaunchRecord, LaunchRecords, new_token
from gpufleet.k8s.disruption import consolidation_mark
from gpufleet.k8s.disruption.consolidation import Consolidator
from gpufleet.k8s.disruption.drain import apply_cordon, delete_node
from gpufleet.k8s.disruption.interruption import mark_from_event, mark_node, node_for_instance
from gpufleet.k8s.translate import names
from gpufleet.k8s.translate.snapshot import Snapshot
from gpufleet.market.bidding import SpotStrategy, get_spot_strategy
from gpufleet.provisioning import DisruptionPolicy, NodeView, ScaleUpPolicy
from gpufleet.provisioning.disruption import Command
from gpufleet.provisioning.disruption.command import EMPTINESS

log = logging.getLogger(__name__)

GONE = (InstanceState.TERMINATING, InstanceState.TERMINATED)
# the ``source`` a provider's events write into the interruption mark (k8s.interruption.SOURCES)
MARK_SOURCE = {"aws": "aws-sqs", "aliyun": "aliyun", "kwok": "kwok"}
REGISTRATION_BUCKETS = (1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 900)


class CapacityMetrics:
    """``gpufleet_*`` capacity metrics, on the controller's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.launches = Counter("gpufleet_launches", "Instances launched",
                                ["capacity_type", "instance_type"], registry=r)
        self.launch_failures = Counter("gpufleet_launch_failures",
                                       "Launches the cloud refused or that were given up",
                                       ["reason"], registry=r)
        self.terminations = Counter("gpufleet_terminations", "Instances gpufleet deleted",
                                    ["reason"], registry=r)
        self.interruptions = Counter("gpufleet_interruption_notices",
                                     "Interruption notices that marked a Node", ["kind"],
                                     registry=r)
        self.registration = Histogram("gpufleet_node_registration_duration_seconds",
                                      "Launch to Node registered", buckets=REGISTRATION_BUCKETS,
                                      registry=r)
        self.in_flight = Gauge("gpufleet_launches_in_flight",
                               "Launched instances whose Node has not registered", registry=r)
        self.consolidations = Counter(
            "gpufleet_consolidations",
            "Consolidation commands by method and outcome (proposed, started, invalid, "
            "replacement-failed, abandoned)", ["method", "outcome"], registry=r)


def _ready(node: Mapping[str, Any]) -> bool:
    conds = (node.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def _managed(node: Mapping[str, Any]) -> bool:
    return ((node.get("metadata") or {}).get("labels") or {}).get(TAG_MANAGED) == "true"


def _marked(node: Mapping[str, Any]) -> bool:
    """Carries the interruption annotation (even one that does not parse: the drain owns it)."""
    return names.ANN_INTERRUPTION in ((node.get("metadata") or {}).get("annotations") or {})


@dataclass
class ReconcileReport:
    """What one reconcile did (tests and logs read it)."""

    launched: list[str] = field(default_factory=list)  # tokens
    resumed: list[str] = field(default_factory=list)  # records created again after a restart
    registered: list[str] = field(default_factory=list)
    timed_out: list[str] = field(default_factory=list)  # instance ids
    leaked: list[str] = field(default_factory=list)
    terminated: list[str] = field(default_factory=list)  # node names
    interrupted: list[str] = field(default_factory=list)  # node names this loop marked
    consolidating: list[str] = field(default_factory=list)  # node names marked for the drain
    abandoned: list[str] = field(default_factory=list)  # consolidations undone (uncordoned)


class CapacityController:
    def __init__(
        self,
        core: client.CoreV1Api,
        provider: CloudProvider,
        scenario: Scenario,
        types: Sequence[InstanceType],
        *,
        namespace: str,
        registry: CollectorRegistry,
        registration_timeout_s: float = 900.0,
        clock: Callable[[], float] = time.time,
        consolidation_validation_s: float = consolidation_mark.DEFAULT_VALIDATION_S,
        consolidation_drain_timeout_s: float = consolidation_mark.DEFAULT_DRAIN_TIMEOUT_S,
    ) -> None:
        self.core = core
        self.provider = provider
        self.sc = scenario
        self.types = {t.name: t for t in types}
        self.records = LaunchRecords(core, namespace)
        self.timeout_s = registration_timeout_s
        self.clock = clock
        self.metrics = CapacityMetrics(registry)
        self.scale_up = ScaleUpPolicy(scenario.pending_gpu_threshold, scenario.max_pending_wait_s)
        # consolidation (the simulator's disruption policy, applied through the drain);
        # between its looks, emptiness alone, which costs nothing to compute
        self.consolidator = Consolidator(
            core, scenario, self.metrics.consolidations,
            validation_s=consolidation_validation_s,
            drain_timeout_s=consolidation_drain_timeout_s,
            registration_timeout_s=registration_timeout_s)
        self.emptiness = DisruptionPolicy(scenario.scale_down_unneeded_s, consolidation=False)
        self.spot_strategy: SpotStrategy | None = (
            get_spot_strategy(scenario.spot_strategy) if scenario.spot else None)
        self.empty = plan.EmptySince()
        self.underused = plan.EmptySince()
        self._recorded: set[str] = set()  # launch-record tokens, as of this cycle's converge

    # -- the cycle ----------------------------------------------------------------------------
    def reconcile(self, snap: Snapshot, refused: Sequence[str], nodes: Sequence[Mapping[str, Any]],
                  pods: Sequence[Mapping[str, Any]]) -> ReconcileReport:
        out = ReconcileReport()
        now = self.clock()
        instances = self.provider.list()
        by_pid = {n.get("spec", {}).get("providerID"): n for n in nodes
                  if (n.get("spec") or {}).get("providerID")}
        booting = self._converge(instances, by_pid, now, out)
        if out.resumed or out.timed_out or out.leaked:  # converging changed the instances
            instances = self.provider.list()
        live = [i for i in instances if i.state not in GONE]
        self._interruptions(live, nodes, out)
        if self.sc.autoscaling:
            self._scale_up(snap, refused, live, booting, nodes, now, out)
        self._scale_down(snap, live, by_pid, nodes, pods, now, out)
        return out

    def _converge(self, instances: list[Instance], by_pid: Mapping[str, Mapping[str, Any]],
                  now: float, out: ReconcileReport) -> list[Instance]:
        """Step 1 (module doc); returns the instances still booting."""
        by_token = {i.client_token: i for i in instances if i.client_token}
        booting: list[Instance] = []
        recorded: set[str] = set()
        self._recorded = recorded
        for rec in self.records.list():
            recorded.add(rec.token)
            inst = by_token.get(rec.token)
            if inst is None:
                if now - rec.created_at > self.timeout_s:
                    self.records.delete(rec.token)
                    self.metrics.launch_failures.labels(reason="gave-up").inc()
                    continue
                got = self.provider.create(rec.request())  # same token: never a second one
                if isinstance(got, CapacityShortage):
                    log.info("launch %s: %s", rec.token, got.reason)
                    self.records.delete(rec.token)
                    self.metrics.launch_failures.labels(reason="capacity").inc()
                    continue
                out.resumed.append(rec.token)
                log.info("resumed launch %s: %s (%s %s %s)", rec.token, got.instance_id,
                         rec.instance_type, rec.zone, rec.capacity_type)
                inst = got
            if inst.state in GONE:
                self.records.delete(rec.token)
                continue
            node = by_pid.get(inst.provider_id)
            if node is not None and _ready(node):
                self.records.delete(rec.token)
                self.metrics.registration.observe(max(0.0, now - inst.launched_at))
                out.registered.append(inst.instance_id)
                continue
            if now - inst.launched_at > self.timeout_s:
                log.warning("instance %s: no Node registered within %.0f s; deleting",
                            inst.instance_id, self.timeout_s)
                self.provider.delete(inst.instance_id)
                self.records.delete(rec.token)
                self.metrics.terminations.labels(reason="registration-timeout").inc()
                out.timed_out.append(inst.instance_id)
                continue
            booting.append(inst)
        for inst in instances:
            if inst.client_token in recorded or inst.state in GONE:
                continue
            if inst.provider_id in by_pid:
                continue
            if now - inst.launched_at > self.timeout_s:
                log.warning("instance %s: gpufleet's, no record and no Node; deleting",
                            inst.instance_id)
                self.provider.delete(inst.instance_id)
                self.metrics.terminations.labels(reason="leak").inc()
                out.leaked.append(inst.instance_id)
            else:
                booting.append(inst)
        self.metrics.in_flight.set(len(booting))
        return booting

    def _interruptions(self, live: list[Instance], nodes: Sequence[Mapping[str, Any]],
                       out: ReconcileReport) -> None:
        """Mark the Node of each provider event (once, whoever is first), then acknowledge it:
        the mark is the record, so a crash before the acknowledgement re-delivers the event and
        marking again is a no-op. The drain acts on the mark."""
        source = MARK_SOURCE.get(self.provider.name, self.provider.name)
        for ev in self.provider.interruptions():
            name = node_for_instance(nodes, ev.instance_id)
            if name is not None and mark_node(self.core, name, mark_from_event(
                    ev, source, self.clock())):
                self.metrics.interruptions.labels(kind=str(ev.kind)).inc()
                out.interrupted.append(name)
            self.provider.acknowledge(ev)  # recorded on the Node (or the Node is gone)
        pids = {i.provider_id for i in live}
        for n in nodes:
            pid = (n.get("spec") or {}).get("providerID")
            if _managed(n) and pid and pid not in pids and not n["metadata"].get(
                    "deletionTimestamp"):
                # its instance is gone (reclaimed, or deleted outside gpufleet)
                delete_node(self.core, Terminate(n["metadata"]["name"], "instance gone"))

    def terminate(self, t: Terminate) -> None:
        """The drain's ``Terminate`` for a drained Node: delete its instance through the provider
        (only one of gpufleet's: ``list`` returns no other; deleting one already going is no
        error) and then the Node. Idempotent, so a retry after a crash is harmless. The metric's
        reason is ``consolidation`` for a Node the consolidation marked, else ``interruption``."""
        pid = None
        reason = "interruption"
        try:
            node = self.core.read_node(t.node)
            pid = node.spec.provider_id if node.spec is not None else None
            if names.ANN_CONSOLIDATION in (node.metadata.annotations or {}):
                reason = "consolidation"
        except ApiException as exc:
            if exc.status != 404:
                raise
        for inst in self.provider.list():
            if inst.state in GONE:
                continue
            if (pid and inst.provider_id == pid) or inst.instance_id == t.node:
                self.provider.delete(inst.instance_id)
                self.metrics.terminations.labels(reason=reason).inc()
                log.info("deleted instance %s of drained node %s", inst.instance_id, t.node)
        self.empty.since.pop(t.node, None)
        delete_node(self.core, t)

    def _scale_up(self, snap: Snapshot, refused: Sequence[str], live: list[Instance],
                  booting: list[Instance], nodes: Sequence[Mapping[str, Any]], now: float,
                  out: ReconcileReport) -> None:
        pending = plan.pending_pods(snap, refused, now)
        if not pending:
            return
        offerings = self.provider.offerings()
        if not self.sc.spot:
            offerings = [o for o in offerings if o.capacity_type == CapacityType.ON_DEMAND]
        wants_mig = any(p.request.mig_profile is not None for p in pending)
        offers = self._offers(offerings, live, wants_mig)
        markets_of = getattr(self.provider, "markets", None)
        if callable(markets_of):
            markets = {t: markets_of(t) for t in self.types}
        else:
            markets = plan.markets_from(offerings, self.types)
        known = set(snap.state.index)
        joined = {(n.get("spec") or {}).get("providerID") for n in nodes
                  if n["metadata"]["name"] in known}
        coming = [(i.instance_type, i.capacity_type, i.zone, bool(i.tags.get(TAG_MIG_CONFIG)))
                  for i in [*(i for i in live if i.provider_id not in joined
                              and i not in booting), *booting]]
        launches = self.scale_up.decide(pending, offers, plan.inflight(coming, self.types),
                                        markets, self.spot_strategy)
        room = self.sc.max_nodes - len(live)
        for launch in launches:
            for _ in range(launch.count):
                if room <= 0:
                    return
                if self._launch(launch, now, out) is None:
                    break
                room -= 1

    def _offers(self, offerings: Sequence[Any], live: list[Instance],
                mig: bool) -> list[Any]:
        """The policies' offers: on-demand in the zone with the fewest such nodes of the type."""
        od_nodes: dict[tuple[str, str], int] = {}
        for i in live:
            if i.capacity_type == CapacityType.ON_DEMAND:
                od_nodes[(i.instance_type, i.zone)] = od_nodes.get((i.instance_type, i.zone),
                                                                    0) + 1
        return plan.offers_from(offerings, self.types, od_nodes, mig=mig)

    def _launch(self, launch: Launch, now: float, out: ReconcileReport) -> str | None:
        """One node of ``launch``: the record written before the cloud is asked (a crash leaves
        the record, and the next converge asks again with the same token). Returns the token,
        or None when the cloud had no capacity (the record is deleted)."""
        rec = LaunchRecord(new_token(), launch.instance_type, launch.zone,
                           launch.capacity_type, now, launch.max_price, launch.mig_config)
        self.records.write(rec)
        got = self.provider.create(rec.request())
        if isinstance(got, CapacityShortage):
            log.info("launch %s %s %s: %s", launch.instance_type, launch.zone,
                     launch.capacity_type, got.reason)
            self.records.delete(rec.token)
            self.metrics.launch_failures.labels(reason="capacity").inc()
            return None
        self._recorded.add(rec.token)
        self.metrics.launches.labels(capacity_type=str(launch.capacity_type),
                                     instance_type=launch.instance_type).inc()
        out.launched.append(rec.token)
        log.info("launched %s (%s %s %s) for %s", got.instance_id, launch.instance_type,
                 launch.zone, launch.capacity_type, launch.reason)
        return rec.token

    def _scale_down(self, snap: Snapshot, live: list[Instance],
                    by_pid: Mapping[str, Mapping[str, Any]], nodes: Sequence[Mapping[str, Any]],
                    pods: Sequence[Mapping[str, Any]], now: float,
                    out: ReconcileReport) -> None:
        managed: dict[str, tuple[InstanceType, bool]] = {}
        inst_of: dict[str, Instance] = {}
        marked: dict[str, tuple[InstanceType, bool, consolidation_mark.ConsolidationMark]] = {}
        for i in live:
            node = by_pid.get(i.provider_id)
            if node is None or not _managed(node) or i.instance_type not in self.types:
                continue
            meta = node["metadata"]
            if meta.get("deletionTimestamp") or _marked(node):
                continue
            kind = (self.types[i.instance_type], i.capacity_type == CapacityType.SPOT)
            if consolidation_mark.annotated(node):
                mark = consolidation_mark.mark_of(node)
                if mark is None:  # not ours to act on, and it must not pin a cordon
                    consolidation_mark.unmark_node(self.core, meta["name"], "malformed mark")
                else:
                    marked[meta["name"]] = (*kind, mark)
                continue
            if not _ready(node) or (node.get("spec") or {}).get("unschedulable"):
                continue  # booting, or cordoned by someone else: neither room nor candidate
            managed[meta["name"]] = kind
            inst_of[meta["name"]] = i
        movable = consolidation_mark.movable_keys(pods)
        busy = {name for name in managed if plan.pods_to_evict(name, pods)}
        since = self.empty.update(managed, busy, now)
        views = plan.with_underused(plan.node_views(snap, managed, since, movable),
                                    self.underused, self.sc.utilization_threshold, now)
        out.abandoned += self.consolidator.watch_marked(snap, marked, views, pods, movable, now)
        if self.consolidator.proposal is not None:  # one at a time, as Karpenter's orchestrator
            out.consolidating += self.consolidator.carry_out(views, live, by_pid,
                                                             self._recorded, now)
            return
        cmd = self._decide(views, live, now)
        if cmd is None:
            return
        if cmd.method != EMPTINESS:
            self.consolidator.propose(cmd, now, self.sc.max_nodes - len(live),
                                      lambda launch: self._launch(launch, now, out))
            return
        # emptiness: every Terminate is only-if-empty (consolidation, which moves pods, went
        # to the consolidator above), so there is nothing to evict: cordon, then delete
        for d in cmd.decisions:
            if not isinstance(d, Terminate) or d.node not in inst_of:
                continue
            if d.only_if_empty and plan.pods_to_evict(d.node, pods):
                continue
            apply_cordon(self.core, Cordon(d.node, d.reason))
            self.provider.delete(inst_of[d.node].instance_id)
            delete_node(self.core, d)
            self.empty.since.pop(d.node, None)
            self.metrics.terminations.labels(reason=d.reason or "disruption").inc()
            out.terminated.append(d.node)
            log.info("terminated %s (%s)", d.node, d.reason)

    def _decide(self, views: list[NodeView], live: list[Instance],
                now: float) -> Command | None:
        """Emptiness every cycle; the whole policy when the consolidator's look is due (the
        offers, for a multi-node replacement, only then and only below ``max_nodes``)."""
        if not self.consolidator.look_due(views, now):
            return self.emptiness.decide(views, now)
        offers: list[Any] = []
        if self.sc.multi_node_consolidation and len(live) < self.sc.max_nodes:
            on_demand = [o for o in self.provider.offerings()
                         if o.capacity_type == CapacityType.ON_DEMAND]
            offers = self._offers(on_demand, live, any(v.shape.mig for v in views))
        return self.consolidator.decide(views, now, offers)
