"""Scale-down (step 4 of the capacity loop): gpufleet-launched Nodes (``TAG_MANAGED``; never
anyone else's; not cordoned or marked) → :class:`gpufleet.provisioning.DisruptionPolicy`, the
simulator's, built by ``control.policies`` with the scenario's ``consolidation``,
``multi_node_consolidation`` and ``utilization_threshold``; the empty and underused clocks are
``control.node_clocks``'.

Emptiness alone runs every cycle (it costs nothing); the whole policy when the consolidation
look is due (``control.scan.ConsolidationLook``, via the consolidator). An emptiness command is
carried out at once — if the node still has no pod to evict — through the one termination
path (cordon, instance, Node). A consolidation command goes through
:class:`gpufleet.k8s.disruption.consolidation.Consolidator` (steps and mark in
:mod:`gpufleet.k8s.disruption.consolidation_mark`): proposed, re-validated after a validation
period, the replacement launched first, then its Nodes marked and cordoned for the drain, which
hands each emptied Node back to the termination path.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpufleet.catalog.instances import InstanceType
from gpufleet.cloud.provider import TAG_MANAGED, CloudProvider, Instance
from gpufleet.config import Scenario
from gpufleet.control.limits import launch_room
from gpufleet.control.node_clocks import SinceClock
from gpufleet.control.policies import disruption_policy, spot_swap_settings
from gpufleet.control.spot_swap import (
    SwapLook,
    SwapSettings,
    first_swap,
    judge_swap,
    swap_look,
    swap_order,
)
from gpufleet.decisions import CapacityType, Decision, Launch, Terminate
from gpufleet.k8s.capacity import inputs
from gpufleet.k8s.capacity.metrics import ReconcileReport
from gpufleet.k8s.capacity.provisioner import ready
from gpufleet.k8s.capacity.termination import Terminator
from gpufleet.k8s.disruption import consolidation_mark
from gpufleet.k8s.disruption.consolidation import Consolidator
from gpufleet.k8s.settings import LiveDelays
from gpufleet.k8s.translate import names
from gpufleet.k8s.translate.pods import parse_time
from gpufleet.k8s.translate.snapshot import Snapshot
from gpufleet.provisioning import NodeShape, NodeView, PendingPod
from gpufleet.provisioning.disruption import Command
from gpufleet.provisioning.disruption.command import EMPTINESS, SPOT_SWAP

log = logging.getLogger(__name__)

# pods → scale-up's launch for them and its price per hour (``ScaleUp.swap_plan``)
SwapPlan = Callable[[list[PendingPod]], tuple[list[Launch], float]]


def managed(node: Mapping[str, Any]) -> bool:
    return ((node.get("metadata") or {}).get("labels") or {}).get(TAG_MANAGED) == "true"


def interruption_marked(node: Mapping[str, Any]) -> bool:
    """Carries the interruption annotation (even one that does not parse: the drain owns it)."""
    return names.ANN_INTERRUPTION in ((node.get("metadata") or {}).get("annotations") or {})


class ScaleDown:
    def __init__(self, core: Any, provider: CloudProvider, scenario: Scenario,
                 types: Mapping[str, InstanceType], consolidator: Consolidator,
                 terminator: Terminator, delays: LiveDelays | None = None) -> None:
        self.core = core
        # each pod's price of delay: latency-sensitive pods stay put, the swap's move is priced
        # with the pods' value of time (control.value_of_time)
        self.delays = delays if delays is not None else LiveDelays.of(scenario)
        self.provider = provider
        self.sc = scenario
        self.types = types
        self.consolidator = consolidator
        self.terminator = terminator
        self.emptiness = disruption_policy(scenario, consolidation=False)
        self.swap = spot_swap_settings(scenario)  # the on-demand → spot swap (None: off)
        self.empty = SinceClock()
        self.underused = SinceClock()

    def forget(self, node: str) -> None:
        """A Node goes: its clocks must not carry over to a new Node of the same name."""
        self.empty.forget(node)
        self.underused.forget(node)

    def run(self, snap: Snapshot, live: list[Instance], by_pid: Mapping[str, Mapping[str, Any]],
            pods: Sequence[Mapping[str, Any]], now: float, recorded: set[str],
            launch: Callable[[Launch], str | None], out: ReconcileReport,
            spare_gpus: float = math.inf, swap_plan: SwapPlan | None = None) -> None:
        """``spare_gpus``: the GPUs disruption may take away (``control.headroom``);
        ``swap_plan``: scale-up's launch and its price for running pods (the swap's judge)."""
        cands: dict[str, tuple[InstanceType, bool]] = {}
        inst_of: dict[str, Instance] = {}
        marked: dict[str, tuple[InstanceType, bool, consolidation_mark.ConsolidationMark]] = {}
        for i in live:
            node = by_pid.get(i.provider_id)
            if node is None or not managed(node) or i.instance_type not in self.types:
                continue
            meta = node["metadata"]
            if meta.get("deletionTimestamp") or interruption_marked(node):
                continue
            kind = (self.types[i.instance_type], i.capacity_type == CapacityType.SPOT)
            if consolidation_mark.annotated(node):
                mark = consolidation_mark.mark_of(node)
                if mark is None:  # not ours to act on, and it must not pin a cordon
                    consolidation_mark.unmark_node(self.core, meta["name"], "malformed mark")
                else:
                    marked[meta["name"]] = (*kind, mark)
                continue
            if not ready(node) or (node.get("spec") or {}).get("unschedulable"):
                continue  # booting, or cordoned by someone else: neither room nor candidate
            cands[meta["name"]] = kind
            inst_of[meta["name"]] = i
        movable = self.delays.movable(consolidation_mark.movable_keys(pods), snap.pods)
        views = inputs.node_views(snap, cands, pods, self.empty, self.underused,
                                  self.sc.utilization_threshold, now, movable)
        out.abandoned += self.consolidator.watch_marked(snap, marked, views, pods, movable, now)
        if self.consolidator.proposal is not None:  # one at a time, as Karpenter's orchestrator
            out.consolidating += self.consolidator.carry_out(views, live, by_pid, recorded, now)
            return
        cmd = self._decide(views, live, now, spare_gpus)
        if self.swap is not None and swap_plan is not None \
                and swap_look(cmd is not None, len(live), self.sc.max_nodes) is SwapLook.LOOK:
            cmd = self._swap(snap, views, cands, by_pid, now, self.swap, swap_plan)
        if cmd is None:
            return
        if cmd.method != EMPTINESS:
            self.consolidator.propose(cmd, now, launch_room(len(live), self.sc.max_nodes), launch)
            return
        # emptiness: every Terminate is only-if-empty (consolidation, which moves pods, went
        # to the consolidator above), so there is nothing to evict
        for d in cmd.decisions:
            if not isinstance(d, Terminate) or d.node not in inst_of:
                continue
            if d.only_if_empty and inputs.pods_to_evict(d.node, pods):
                continue
            self.terminator.terminate(d.reason or "disruption", node=d.node,
                                      instances=[inst_of[d.node]], cordon=True)
            out.terminated.append(d.node)

    def _swap(self, snap: Snapshot, views: list[NodeView],
              cands: Mapping[str, tuple[InstanceType, bool]],
              by_pid: Mapping[str, Mapping[str, Any]], now: float, cfg: SwapSettings,
              swap_plan: SwapPlan) -> Command | None:
        """At most one on-demand node's work moved to spot (``control.spot_swap``, the
        simulator's rule): candidates ordered by the rule, each judged on scale-up's plan for
        its pods. The command goes through the consolidator like a consolidation: the spot
        node launched first, the swap re-validated once it is Ready, then the drain. The
        consolidator carries one replacement, so a plan of more than one node is no swap."""
        od = {v.name: v for v in views if not v.spot and v.pods and v.name in cands}
        if not od:
            return None
        created = {n["metadata"]["name"]: parse_time(n["metadata"].get("creationTimestamp"))
                   for n in by_pid.values() if n["metadata"]["name"] in od}
        order = swap_order([(name, created[name], v.usd_per_hour) for name, v in od.items()
                            if name in created], now, cfg)

        def movable(name: str) -> bool:
            return all(p.movable and p.spot_ok for p in od[name].pods)

        def judge(name: str) -> list[Decision] | None:
            v = od[name]
            infos = [snap.pods[p.job_id] for p in v.pods if p.job_id in snap.pods]
            if len(infos) != len(v.pods):
                return None  # a pod the snapshot cannot read: not judged
            node = inputs.swap_node(v, infos, cands[name][0], now, self.sc.provisioning_delay_s,
                                    self.delays.of_pod)
            return judge_swap(
                node, lambda: swap_plan(inputs.running_pods(infos, now, self.sc.checkpointing,
                                                            self.delays.of_pod)),
                cfg, max_nodes=1)

        got = first_swap(order, movable, judge, cfg)
        if got is None:
            return None
        (node,) = [d.node for d in got if isinstance(d, Terminate)]
        (new,) = [d for d in got if isinstance(d, Launch)]
        shape = NodeShape.of(self.types[new.instance_type], new.mig_config is not None)
        return Command(SPOT_SWAP, (node,), tuple(got), shape)

    def _decide(self, views: list[NodeView], live: list[Instance],
                now: float, spare_gpus: float) -> Command | None:
        """Emptiness every cycle; the whole policy when the consolidation look is due (the
        offers, for a multi-node replacement, only then and only below ``max_nodes``)."""
        if not self.consolidator.look_due(views, now):
            return self.emptiness.decide(views, now, spare_gpus=spare_gpus)
        offers: list[Any] = []
        if self.sc.multi_node_consolidation and launch_room(len(live), self.sc.max_nodes) > 0:
            on_demand = [o for o in self.provider.offerings()
                         if o.capacity_type == CapacityType.ON_DEMAND]
            offers = inputs.live_offers(on_demand, live, self.types,
                                        any(v.shape.mig for v in views))
        return self.consolidator.decide(views, now, offers, spare_gpus)
