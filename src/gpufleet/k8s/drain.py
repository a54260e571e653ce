"""Draining interrupted Nodes: level-triggered, from the API alone.

For every Node carrying the interruption mark (:mod:`gpufleet.k8s.interruption`, written by the
node agent or by the controller's provider-event path — whichever was first), each leader cycle:

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

Nodes the capacity loop marked for **consolidation** (:mod:`gpufleet.k8s.consolidation`) are
drained the same way — cordon, evict with grace, terminate — with one difference: no deadline, a
consolidated node is handed to termination only once no pod is left on it (it is not going away
on its own; the capacity loop un-marks it if its pods cannot move).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException

from gpufleet.decisions import Preempt, Terminate
from gpufleet.k8s.consolidation import ConsolidationMark
from gpufleet.k8s.consolidation import mark_of as consolidation_mark_of
from gpufleet.k8s.interruption import InterruptionMark, mark_of

log = logging.getLogger(__name__)

# A mark without a deadline (a rebalance recommendation, a provider that did not say) still ends:
# after this long the node is handed to termination whatever still runs there.
DEFAULT_DRAIN_S = 600.0
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


@dataclass(frozen=True, slots=True)
class Cordon:
    """Set ``spec.unschedulable`` on ``node``."""

    node: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class DrainPlan:
    cordon: tuple[Cordon, ...] = ()
    evict: tuple[Preempt, ...] = ()
    terminate: tuple[Terminate, ...] = ()
    # every interrupted node's mark (consolidated ones are not interruptions): what the recovery
    # clock needs
    marked: Mapping[str, InterruptionMark] = field(default_factory=dict)


def pod_key(pod: Mapping[str, Any]) -> str:
    m = pod["metadata"]
    return f"{m.get('namespace')}/{m['name']}"


def stays_on_drain(pod: Mapping[str, Any]) -> bool:
    """DaemonSet pods (their controller ignores cordons and would recreate them at once) and
    mirror pods (the kubelet owns them) are not evicted and do not keep a node from emptying."""
    meta = pod.get("metadata") or {}
    if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
        return True
    return any(o.get("kind") == "DaemonSet" and o.get("controller")
               for o in meta.get("ownerReferences") or ())


def finished(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def drain_deadline(mark: InterruptionMark, default_drain_s: float = DEFAULT_DRAIN_S) -> float:
    return mark.deadline if mark.deadline is not None else mark.noticed_at + default_drain_s


def plan_drain(nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]],
               now: float, default_drain_s: float = DEFAULT_DRAIN_S) -> DrainPlan:
    """What to do this cycle for every marked Node (pure: objects in, decisions out)."""
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
    if not marked and not consolidated:
        return DrainPlan()
    on_node: dict[str, list[Mapping[str, Any]]] = {n: [] for n in (*marked, *consolidated)}
    for p in pods:
        where = (p.get("spec") or {}).get("nodeName")
        if where in on_node and not stays_on_drain(p) and not finished(p):
            on_node[where].append(p)
    cordon: list[Cordon] = []
    evict: list[Preempt] = []
    terminate: list[Terminate] = []

    def drain(name: str, why: str) -> bool:
        """Cordon ``name`` and evict its pods (not those already terminating); True when it is
        empty. The one sequence for an interrupted and a consolidated node alike."""
        if name not in cordoned:
            cordon.append(Cordon(name, why))
        evict.extend(Preempt(pod_key(p), why) for p in on_node[name]
                     if not (p.get("metadata") or {}).get("deletionTimestamp"))
        if not on_node[name]:
            terminate.append(Terminate(name, f"{why}: drained"))
            return True
        return False

    for name in sorted(marked):
        mark = marked[name]
        why = f"node {name} interrupted ({mark.kind.value}, noticed by {mark.source})"
        if not drain(name, why) and now >= drain_deadline(mark, default_drain_s):
            terminate.append(Terminate(name, f"{why}: deadline passed with "
                                             f"{len(on_node[name])} pod(s) left"))
    for name in sorted(consolidated):
        drain(name, f"node {name} consolidated ({consolidated[name].method})")
    return DrainPlan(tuple(cordon), tuple(evict), tuple(terminate), marked)


def apply_cordon(core: Any, c: Cordon) -> bool:
    """Cordon one Node (a merge patch: idempotent). False when the Node is gone."""
    try:
        core.patch_node(c.node, {"spec": {"unschedulable": True}}, _preload_content=False)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    log.info("cordoned %s: %s", c.node, c.reason)
    return True


def delete_node(core: Any, t: Terminate) -> bool:
    """Termination without a cloud: delete the Node object (the pod garbage collector then removes
    what was left bound to it). With a cloud, the controller hands ``Terminate`` to
    :meth:`gpufleet.k8s.capacity.CapacityController.terminate` instead, which deletes the
    instance through the provider and then the Node."""
    try:
        core.delete_node(t.node, _preload_content=False)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    log.info("deleted node %s: %s", t.node, t.reason)
    return True
