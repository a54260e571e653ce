"""The consolidation's driver: when to look, the one proposal held, re-validation, marks.

The steps and the mark are :mod:`gpufleet.k8s.disruption.consolidation_mark`'s (pure parts and the
two Node patches); this class keeps the little memory they need between the capacity loop's cycles —
the proposal waiting for its validation period and replacement, and the consolidation look's
clock — and reports what it marked or un-marked. The capacity controller owns it and hands it
the cycle's views, launches and offers (:mod:`gpufleet.k8s.capacity.loop`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from prometheus_client import Counter

from gpufleet.catalog.instances import InstanceType
from gpufleet.cloud.provider import Instance
from gpufleet.config import Scenario
from gpufleet.control.policies import disruption_policy
from gpufleet.control.scan import ConsolidationLook
from gpufleet.decisions import Launch
from gpufleet.k8s.capacity import inputs as plan
from gpufleet.k8s.disruption import consolidation_mark
from gpufleet.k8s.disruption.consolidation_mark import ConsolidationMark, Proposal
from gpufleet.k8s.translate.pods import finished, stays_on_drain
from gpufleet.k8s.translate.snapshot import Snapshot
from gpufleet.provisioning import NodeView, Offer
from gpufleet.provisioning.disruption import Command

log = logging.getLogger(__name__)

# a marked Node: (its instance type, spot, its mark)
Marked = Mapping[str, tuple[InstanceType, bool, ConsolidationMark]]


class Consolidator:
    def __init__(self, core: Any, scenario: Scenario, outcomes: Counter, *,
                 validation_s: float, drain_timeout_s: float,
                 registration_timeout_s: float) -> None:
        self.core = core
        self.sc = scenario
        self.outcomes = outcomes  # gpufleet_consolidations{method, outcome}
        self.validation_s = validation_s
        self.drain_timeout_s = drain_timeout_s
        self.registration_timeout_s = registration_timeout_s
        # the simulator's policy with the scenario's switches (control.policies builds both)
        self.policy = disruption_policy(scenario)
        self.proposal: Proposal | None = None
        self.look = ConsolidationLook(scenario.consolidation_recheck_s)  # the simulator's rule
        self._placed: dict[str, str] = {}  # pod key -> node, on the views of the last cycle

    def look_due(self, views: Sequence[NodeView], now: float) -> bool:
        """Whether to compute consolidation now: ``control.scan.ConsolidationLook``'s rule —
        some node under-used for ``scale_down_unneeded_s``, a pod gone from a node or more nodes
        due since the last look, and that look ``consolidation_recheck_s`` ago. A pod that was
        on one of ``views`` last cycle and is not there now (finished, evicted, moved) is the
        simulator's ``pod_moved``. Computing counts as the look."""
        placed = {p.job_id: v.name for v in views for p in v.pods}
        if any(placed.get(k) != node for k, node in self._placed.items()):
            self.look.pod_moved()
        self._placed = placed
        if not self.sc.consolidation:
            return False
        unneeded = self.sc.scale_down_unneeded_s
        due = sum(1 for v in views if v.underused_since is not None
                  and now - v.underused_since >= unneeded)
        return self.look.due(now, due)

    def decide(self, views: Sequence[NodeView], now: float,
               offers: Sequence[Offer], spare_gpus: float = math.inf) -> Command | None:
        return self.policy.decide(views, now, offers, spare_gpus)

    def propose(self, cmd: Command, now: float, room: int,
                launch: Callable[[Launch], str | None]) -> None:
        """Hold ``cmd`` for re-validation; its replacement, if any, is launched now through
        ``launch`` (the launch-record path) when ``room`` (below ``max_nodes``) allows, so it
        boots while the command waits."""
        token = None
        repl = next((d for d in cmd.decisions if isinstance(d, Launch)), None)
        if repl is not None:
            if room <= 0:
                log.info("%s of %s: no room under max_nodes for its replacement", cmd.method,
                         ", ".join(cmd.candidates))
                return
            token = launch(repl)
            if token is None:
                self.outcomes.labels(method=cmd.method, outcome="replacement-failed").inc()
                return
        self.proposal = Proposal(cmd, now, token)
        self.outcomes.labels(method=cmd.method, outcome="proposed").inc()
        log.info("%s proposed: %s%s", cmd.method, ", ".join(cmd.candidates),
                 f" (replacement {token})" if token else "")

    def carry_out(self, views: Sequence[NodeView], live: Sequence[Instance],
                  by_pid: Mapping[str, Mapping[str, Any]], recorded: set[str],
                  now: float) -> list[str]:
        """The held proposal: wait for its replacement's Node and the validation period, then
        re-validate on this cycle's nodes and mark the candidates for the drain (or drop it).
        ``recorded``: the launch records' tokens. Returns the Nodes marked."""
        p = self.proposal
        assert p is not None
        method = p.command.method
        if p.replacement is not None:
            inst = next((i for i in live if i.client_token == p.replacement), None)
            node = by_pid.get(inst.provider_id) if inst is not None else None
            joined = node is not None and node["metadata"]["name"] in {v.name for v in views}
            if not joined:
                lost = inst is None and p.replacement not in recorded
                if lost or now - p.decided_at > self.registration_timeout_s:
                    self.proposal = None
                    self.outcomes.labels(method=method, outcome="replacement-failed").inc()
                    log.info("%s of %s dropped: the replacement %s", method,
                             ", ".join(p.command.candidates),
                             "is gone" if lost else "did not register in time")
                return []
        if now - p.decided_at < self.validation_s:
            return []
        self.proposal = None
        reasons = consolidation_mark.revalidate(p, list(views), now)
        if reasons:
            self.outcomes.labels(method=method, outcome="invalid").inc()
            log.info("%s of %s dropped: %s", method, ", ".join(p.command.candidates),
                     "; ".join(reasons))
            return []
        mark = ConsolidationMark(method, now)
        marked = [name for name in p.command.candidates
                  if consolidation_mark.mark_node(self.core, name, mark)]
        self.outcomes.labels(method=method, outcome="started").inc()
        return marked

    def watch_marked(self, snap: Snapshot, marked: Marked, views: Sequence[NodeView],
                     pods: Sequence[Mapping[str, Any]], movable: set[str],
                     now: float) -> list[str]:
        """Un-mark (and uncordon) a Node being consolidated whose pods can no longer move, or
        that still holds pods ``drain_timeout_s`` after it was marked; a marked Node with no pod
        left is the drain's to terminate. Returns the Nodes un-marked."""
        out = []
        for name, (it, spot, mark) in sorted(marked.items()):
            left = {f"{ns}/{pod}" for ns, pod in plan.pods_to_evict(name, pods)}
            holding = left or any((p.get("spec") or {}).get("nodeName") == name
                                  and not finished(p) and not stays_on_drain(p) for p in pods)
            why = ""
            if holding and now - mark.started_at > self.drain_timeout_s:
                why = f"pods still there after {self.drain_timeout_s:.0f} s"
            elif left:
                own = plan.views_without_clocks(snap, {name: (it, spot)}, movable)
                if own:  # (not in the snapshot: the time bound above still applies)
                    why = "; ".join(consolidation_mark.still_movable(own[0], left, mark,
                                                                list(views), now))
            if why and consolidation_mark.unmark_node(self.core, name, why):
                self.outcomes.labels(method=mark.method, outcome="abandoned").inc()
                out.append(name)
        return out
