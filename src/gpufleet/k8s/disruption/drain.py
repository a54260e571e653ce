"""Draining interrupted Nodes: level-triggered, from the API alone.

For every Node carrying the interruption mark (:mod:`gpufleet.k8s.disruption.interruption`,
written by the node agent or by the controller's provider-event path — whichever was first),
each leader cycle:

1. **cordon** it (``spec.unschedulable``) unless it already is, so no scheduler — ours, which
   also honours the mark's taint, or kube-scheduler — places anything there;
2. **evict** every pod on it that is not already terminating, with the pod's own grace period
   (``Preempt`` through the Applier's Eviction path): the job gets SIGTERM, checkpoints and exits
   75, its Job's ``podFailurePolicy`` ignores the disruption and the Job controller makes a new
   pod, which placement puts on another node because this one is tainted and cordoned;
   DaemonSet and mirror pods stay (as ``kubectl drain --ignore-daemonsets`` leaves them);
3. once no such pod is left on it — or its deadline has passed, as the instance goes then
   anyway — hand it to termination with a ``Terminate`` decision.

The plan is pure and computed from the Nodes and Pods as listed, so a controller restarted in the
middle re-derives it: a cordoned node is not cordoned again, a terminating pod is not evicted
again, and an emptied node is handed over on the next cycle.

Nodes the capacity loop marked for **consolidation**
(:mod:`gpufleet.k8s.disruption.consolidation_mark`) are drained the same way — cordon, evict
with grace, terminate — with one difference: no deadline, a consolidated node is handed to
termination only once no pod is left on it (it is not going away on its own; the capacity loop
un-marks it if its pods cannot move).

The driver, :class:`Drainer`: plan (:func:`plan_drain`), apply, time recoveries.

Called once per leader cycle by the controller with the informers' objects; it keeps no state
about nodes (the plan is re-derived from the API each time), only the recovery clock's owners.
Evictions go through the controller's :class:`~gpufleet.k8s.schedule.apply.Applier` (the same
Eviction call, grace period and event as preemption); ``Terminate`` goes to ``terminate`` — the
capacity controller's applier when there is one, else deleting the Node object.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException

from gpufleet.decisions import Cause, Cordon, Preempt, Terminate
from gpufleet.k8s.disruption.consolidation_mark import ConsolidationMark
from gpufleet.k8s.disruption.consolidation_mark import mark_of as consolidation_mark_of
from gpufleet.k8s.disruption.interruption import InterruptionMark, mark_of
from gpufleet.k8s.disruption.recovery_clock import RecoveryClock
from gpufleet.k8s.schedule.apply import ApiErrors, Applier
from gpufleet.k8s.schedule.telemetry import ControllerMetrics
from gpufleet.k8s.translate.pods import finished, pod_key, stays_on_drain
from gpufleet.k8s.translate.snapshot import same_objects
from gpufleet.k8s.watch.connections import release
from gpufleet.provisioning.disruption.command import cause_of

log = logging.getLogger(__name__)

# A mark without a deadline (a rebalance recommendation, a provider that did not say) still ends:
# after this long the node is handed to termination whatever still runs there.
DEFAULT_DRAIN_S = 600.0


@dataclass(frozen=True, slots=True)
class DrainPlan:
    cordon: tuple[Cordon, ...] = ()
    evict: tuple[Preempt, ...] = ()
    terminate: tuple[Terminate, ...] = ()
    # every interrupted node's mark (consolidated ones are not interruptions): what the recovery
    # clock needs
    marked: Mapping[str, InterruptionMark] = field(default_factory=dict)


def drain_deadline(mark: InterruptionMark, default_drain_s: float = DEFAULT_DRAIN_S) -> float:
    return mark.deadline if mark.deadline is not None else mark.noticed_at + default_drain_s


@dataclass(frozen=True)
class NodeMarks:
    """The marked Nodes: interrupted ones, consolidated ones, and which of those are cordoned."""

    marked: Mapping[str, InterruptionMark] = field(default_factory=dict)
    consolidated: Mapping[str, ConsolidationMark] = field(default_factory=dict)
    cordoned: AbstractSet[str] = frozenset()


def node_marks(nodes: Iterable[Mapping[str, Any]]) -> NodeMarks:
    """Every Node's interruption or consolidation mark (an interruption wins)."""
    marked: dict[str, InterruptionMark] = {}
    consolidated: dict[str, ConsolidationMark] = {}
    cordoned: set[str] = set()
    for node in nodes:
        name = node["metadata"]["name"]
        mark = mark_of(node)
        if mark is not None:
            marked[name] = mark
        else:
            cmark = consolidation_mark_of(node)
            if cmark is None:
                continue
            consolidated[name] = cmark
        if (node.get("spec") or {}).get("unschedulable"):
            cordoned.add(name)
    return NodeMarks(marked, consolidated, frozenset(cordoned))


def plan_drain(nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]],
               now: float, default_drain_s: float = DEFAULT_DRAIN_S,
               assumed_on: Mapping[str, str] | None = None,
               evicting: AbstractSet[str] = frozenset(),
               marks: NodeMarks | None = None) -> DrainPlan:
    """What to do this cycle for every marked Node (pure: objects in, decisions out).

    ``assumed_on`` (pod key → node) and ``evicting`` are the controller's own binds and
    evictions the pods do not show yet: an assumed pod counts on its node (the node is not
    empty), an assumed eviction is not made again. ``marks``: ``node_marks(nodes)``, when the
    caller has it already."""
    assumed_on = assumed_on or {}
    marks = marks if marks is not None else node_marks(nodes)
    marked, consolidated, cordoned = marks.marked, marks.consolidated, marks.cordoned
    if not marked and not consolidated:
        return DrainPlan()
    on_node: dict[str, list[Mapping[str, Any]]] = {n: [] for n in (*marked, *consolidated)}
    for p in pods:
        where = (p.get("spec") or {}).get("nodeName") or assumed_on.get(pod_key(p))
        if where in on_node and not stays_on_drain(p) and not finished(p):
            on_node[where].append(p)
    cordon: list[Cordon] = []
    evict: list[Preempt] = []
    terminate: list[Terminate] = []

    def drain(name: str, why: str, cause: Cause) -> bool:
        """Cordon ``name`` and evict its pods (not those already terminating); True when it is
        empty. The one sequence for an interrupted and a consolidated node alike."""
        if name not in cordoned:
            cordon.append(Cordon(name, why))
        evict.extend(Preempt(pod_key(p), why, cause) for p in on_node[name]
                     if not (p.get("metadata") or {}).get("deletionTimestamp")
                     and pod_key(p) not in evicting)
        if not on_node[name]:
            terminate.append(Terminate(name, f"{why}: drained"))
            return True
        return False

    for name in sorted(marked):
        mark = marked[name]
        why = f"node {name} interrupted ({mark.kind.value}, noticed by {mark.source})"
        if not drain(name, why, Cause.INTERRUPTION) and now >= drain_deadline(
                mark, default_drain_s):
            terminate.append(Terminate(name, f"{why}: deadline passed with "
                                             f"{len(on_node[name])} pod(s) left"))
    for name in sorted(consolidated):
        drain(name, f"node {name} consolidated ({consolidated[name].method})",
              cause_of(consolidated[name].method))
    return DrainPlan(tuple(cordon), tuple(evict), tuple(terminate), marked)


def apply_cordon(core: Any, c: Cordon) -> bool:
    """Cordon one Node (a merge patch: idempotent). False when the Node is gone."""
    try:
        release(core.patch_node(c.node, {"spec": {"unschedulable": True}},
                                _preload_content=False))
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    log.info("cordoned %s: %s", c.node, c.reason)
    return True


def delete_node(core: Any, t: Terminate) -> bool:
    """Termination without a cloud: delete the Node object (the pod garbage collector then removes
    what was left bound to it). With a cloud, the controller hands ``Terminate`` to
    :meth:`gpufleet.k8s.capacity.loop.CapacityController.terminate` instead, which deletes the
    instance through the provider and then the Node."""
    try:
        release(core.delete_node(t.node, _preload_content=False))
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    log.info("deleted node %s: %s", t.node, t.reason)
    return True


# what a provider raises for an infrastructure fault (cloud.aws.AwsApiError and
# cloud.aliyun.AliyunError are RuntimeErrors; urllib3/socket faults are OSErrors): logged, and the
# marked Node — still marked — is terminated again on a later cycle
PROVIDER_FAULTS = (RuntimeError, OSError)


class Drainer:
    def __init__(self, core: Any, applier: Applier, metrics: ControllerMetrics, *,
                 default_drain_s: float = DEFAULT_DRAIN_S,
                 terminate: Callable[[Terminate], Any] | None = None,
                 on_recovery: Callable[[list[float]], Any] | None = None) -> None:
        self.core = core
        self.applier = applier
        self.metrics = metrics
        self.default_drain_s = default_drain_s
        self.terminate = terminate or (lambda t: delete_node(core, t))
        self.on_recovery = on_recovery
        self.clock = RecoveryClock()
        self._seen: list[Mapping[str, Any]] = []  # the Node objects self._marks was read from
        self._marks = NodeMarks()

    def cycle(self, nodes: Sequence[Mapping[str, Any]], pods: Collection[Mapping[str, Any]],
              now: float, assumed_on: Mapping[str, str] | None = None,
              evicting: AbstractSet[str] = frozenset()) -> list[str]:
        """One pass over the marked Nodes; returns the keys of the pods evicted now
        (``assumed_on``/``evicting``: see :func:`plan_drain`)."""
        if not same_objects(nodes, self._seen):
            # the marks change only with a Node's object: read again after a Node event
            self._seen, self._marks = list(nodes), node_marks(nodes)
        plan = plan_drain(nodes, pods, now, self.default_drain_s, assumed_on, evicting,
                          self._marks)
        self.clock.note(plan.marked, pods)
        recovered = self.clock.observe(pods, now)
        for seconds in recovered:
            self.metrics.recovery.observe(seconds)
        if recovered and self.on_recovery is not None:
            self.on_recovery(recovered)
        for c in plan.cordon:
            try:
                apply_cordon(self.core, c)
            except ApiErrors as exc:  # the next cycle tries again
                log.warning("cordon %s: %s", c.node, exc)
        evicted: list[str] = []
        if plan.evict:
            by_key = {pod_key(p): p for p in pods}
            evicted = self.applier.apply(list(plan.evict), by_key).evicted
        for t in plan.terminate:
            try:
                self.terminate(t)
            except (*ApiErrors, *PROVIDER_FAULTS) as exc:
                log.warning("terminate %s: %s", t.node, exc)
                continue
            if t.node in plan.marked:  # an interrupted node (a consolidated one is not)
                self.metrics.drained.inc()
        return evicted
