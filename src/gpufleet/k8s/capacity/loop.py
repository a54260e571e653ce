"""The live capacity controller: pending pods → launches, idle nodes → terminations, reclaims →
drains — on the leader, after each scheduling cycle, level-triggered from the API.

One :meth:`CapacityController.reconcile` per cycle, in this order, each step its own module:

1. **Converge launches** (:mod:`.provisioner`): launch records, the provider's instances and the
   Nodes brought to agreement; launches that never registered and leaked instances terminated.
2. **Interruptions** (here): each ``provider.interruptions()`` event marks its Node through the
   one convention of :mod:`gpufleet.k8s.disruption.interruption` (the node agent writes the same
   mark) and is acknowledged after; cordoning, evicting and terminating a marked Node is the
   drain's job (:class:`gpufleet.k8s.disruption.drain.Drainer`), which hands each drained Node
   back to :meth:`CapacityController.terminate`. A gpufleet Node whose instance is gone is
   deleted.
3. **Scale up** (:mod:`.scale_up`), when the scenario autoscales; with ``headroom`` the
   buffer's shortfall joins the pending pods as placeholders (``control.headroom``: its
   arrivals are the pods this loop sees for the first time).
4. **Scale down** (:mod:`.scale_down`): emptiness and consolidation, down to the buffer; with
   ``spot_swap``, when neither acts, the on-demand → spot swap (``control.spot_swap``), judged
   on scale-up's plan for the node's pods and carried out by the consolidator.

Every termination — emptiness, a drained Node, a launch that never registered, a leak, a Node
whose instance is gone — goes through one path, :class:`.termination.Terminator`.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kubernetes import client
from prometheus_client import CollectorRegistry

from gpufleet.catalog.instances import InstanceType
from gpufleet.cloud.provider import CloudProvider, Instance, InterruptionKind
from gpufleet.config import Scenario
from gpufleet.control.headroom import free_gpus, spare_gpus
from gpufleet.control.policies import headroom
from gpufleet.control.teams import Gate
from gpufleet.decisions import Launch, Terminate
from gpufleet.k8s.capacity import inputs
from gpufleet.k8s.capacity.launch_records import LaunchRecords
from gpufleet.k8s.capacity.metrics import CapacityMetrics, ReconcileReport
from gpufleet.k8s.capacity.provisioner import Provisioner
from gpufleet.k8s.capacity.scale_down import ScaleDown, managed
from gpufleet.k8s.capacity.scale_up import ScaleUp
from gpufleet.k8s.capacity.termination import GONE, Terminator
from gpufleet.k8s.disruption import consolidation_mark
from gpufleet.k8s.disruption.consolidation import Consolidator
from gpufleet.k8s.disruption.interruption import mark_from_event, mark_node, node_for_instance
from gpufleet.k8s.settings import LiveDelays
from gpufleet.k8s.translate import names
from gpufleet.k8s.translate.nodes import taint_string
from gpufleet.k8s.translate.snapshot import Snapshot

log = logging.getLogger(__name__)

# the ``source`` a provider's events write into the interruption mark (k8s.interruption.SOURCES)
MARK_SOURCE = {"aws": "aws-sqs", "aliyun": "aliyun", "kwok": "kwok"}


# a cordoned Node's free GPUs are no room for an arrival (``k8s.translate.nodes.taints_of``)
CORDONED = (taint_string(names.UNSCHEDULABLE_TAINT_KEY, "", "NoSchedule"),)


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
        self.clock = clock
        self.metrics = CapacityMetrics(registry)
        self.consolidator = Consolidator(
            core, scenario, self.metrics.consolidations,
            validation_s=consolidation_validation_s,
            drain_timeout_s=consolidation_drain_timeout_s,
            registration_timeout_s=registration_timeout_s)
        self.terminator = Terminator(core, provider, self.metrics, self._forget)
        self.provisioner = Provisioner(LaunchRecords(core, namespace), provider, self.metrics,
                                       self.terminator, registration_timeout_s)
        self.scale_up = ScaleUp(provider, scenario, self.types)
        # each pod's price of delay; the scheduler shares it and refreshes its queues
        self.delays = LiveDelays.of(scenario)
        self.headroom = headroom(scenario)  # spare GPUs for arrivals (None: not kept)
        self._seen: set[str] = set()  # pods already counted as arrivals
        self.scale_down = ScaleDown(core, provider, scenario, self.types, self.consolidator,
                                    self.terminator, self.delays)

    @property
    def records(self) -> LaunchRecords:
        return self.provisioner.records

    def _forget(self, node: str) -> None:
        self.scale_down.forget(node)

    # -- the cycle ----------------------------------------------------------------------------
    def reconcile(self, snap: Snapshot, refused: Sequence[str], nodes: Sequence[Mapping[str, Any]],
                  pods: Sequence[Mapping[str, Any]],
                  gates: Mapping[str, Gate] | None = None,
                  caps: Mapping[str, int] | None = None) -> ReconcileReport:
        """One pass; ``gates``: the refused jobs' team gates (None without team queues);
        ``caps``: the largest node each job may use (right-sized nodes)."""
        out = ReconcileReport()
        now = self.clock()
        instances = self.provider.list()
        by_pid = {n.get("spec", {}).get("providerID"): n for n in nodes
                  if (n.get("spec") or {}).get("providerID")}
        booting = self.provisioner.converge(instances, by_pid, now, out)
        if out.resumed or out.timed_out or out.leaked:  # converging changed the instances
            instances = self.provider.list()
        live = [i for i in instances if i.state not in GONE]
        self._interruptions(live, nodes, out)

        def launch(want: Launch) -> str | None:
            return self.provisioner.launch(want, now, out)

        room = self._room(snap, now)
        read: dict[bool, Any] = {}  # the provider's offers and markets, once per cycle
        held = self.sc.autoscaling and self.scale_up.run(
            snap, refused, live, booting, nodes, now, launch, gates, caps, room)
        # pods the node cap holds back: the buffer's idle nodes may go (``launches_under_cap``)
        self.scale_down.run(snap, live, by_pid, pods, now, self.provisioner.recorded, launch,
                            out, math.inf if room is None or held else spare_gpus(*room),
                            lambda running: self.scale_up.swap_plan(running, live, now, read))
        return out

    def _room(self, snap: Snapshot, now: float) -> tuple[int, float] | None:
        """(headroom buffer, wholly free GPUs) where the scenario keeps headroom
        (``control.headroom``), after counting the pods first seen this cycle as arrivals."""
        hr = self.headroom
        if hr is None:
            return None
        new, self._seen = inputs.arrivals(snap, self._seen)
        for at, gpus in new:
            if at > now - hr.cfg.window_s:
                hr.arrived(at, gpus)
        return hr.buffer(now), float(free_gpus(snap.state, CORDONED))

    def _interruptions(self, live: list[Instance], nodes: Sequence[Mapping[str, Any]],
                       out: ReconcileReport) -> None:
        """Mark the Node of each provider event (once, whoever is first), then acknowledge it:
        the mark is the record, so a crash before the acknowledgement re-delivers the event and
        marking again is a no-op. The drain acts on the mark."""
        source = MARK_SOURCE.get(self.provider.name, self.provider.name)
        for ev in self.provider.interruptions():
            if ev.kind == InterruptionKind.SPOT_INTERRUPTION:
                self.scale_up.reclaim_notice(ev.instance_id)
            name = node_for_instance(nodes, ev.instance_id)
            if name is not None and mark_node(self.core, name, mark_from_event(
                    ev, source, self.clock())):
                self.metrics.interruptions.labels(kind=str(ev.kind)).inc()
                out.interrupted.append(name)
            self.provider.acknowledge(ev)  # recorded on the Node (or the Node is gone)
        pids = {i.provider_id for i in live}
        for n in nodes:
            pid = (n.get("spec") or {}).get("providerID")
            if managed(n) and pid and pid not in pids and not n["metadata"].get(
                    "deletionTimestamp"):
                # its instance is gone (reclaimed, or deleted outside gpufleet)
                self.terminator.terminate("instance gone", node=n["metadata"]["name"])

    def terminate(self, t: Terminate) -> None:
        """The drain's ``Terminate`` for a drained Node (:meth:`Terminator.terminate_drained`)."""
        self.terminator.terminate_drained(t)
