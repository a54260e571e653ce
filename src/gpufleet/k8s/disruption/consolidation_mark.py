"""Live consolidation: the simulator's disruption commands, applied through the one drain.

The commands are :class:`gpufleet.provisioning.DisruptionPolicy`'s (single-node and multi-node
consolidation, the simulator's code); this module is how the live driver carries one out,
Karpenter's way — decide, wait, re-validate, replace first, then drain:

1. **Propose.** A consolidation command found by the capacity loop is held in memory (a
   :class:`Proposal`) with, when it has a replacement ``Launch``, the token of the launch record
   written for it (the scale-up path: record first, then the cloud, so a retry is idempotent).
2. **Re-validate.** Not before ``validation_s`` has passed and the replacement's Node is Ready,
   :meth:`Command.validate` runs against the snapshot of *that* cycle: a pod bound to a candidate
   since, a candidate gone, room filled — the proposal is dropped (a replacement already up is
   an ordinary empty node then, which emptiness removes). A replacement that failed or did not
   register in time drops it too.
3. **Mark.** Each candidate gets the annotation ``gpufleet.io/consolidation`` (JSON: method,
   started_at) and ``spec.unschedulable`` in one merge patch: the commitment, kept in the API.
4. **Drain.** From here on the drain (:mod:`gpufleet.k8s.disruption.drain`) owns the Node exactly
as it owns
   an interrupted one: evict every pod through the Eviction API with its own grace period (a
   PodDisruptionBudget's 429 is "not now", retried next cycle) and, once no pod is left, hand it
   to :meth:`gpufleet.k8s.capacity.loop.CapacityController.terminate`, which deletes the instance
   through the provider, then the Node (``gpufleet_terminations{reason="consolidation"}``).
   Unlike an interruption there is no deadline: a consolidated Node is only deleted empty.
5. **Abandon.** Each cycle the capacity loop looks at every marked Node still holding pods that
   are not terminating (an eviction a budget refused, a restart before the drain ran): if those
   pods no longer fit elsewhere (:meth:`Command.validate` again), or the Node has been marked
   longer than ``drain_timeout_s``, the mark and the cordon are removed in one patch.

Everything after the proposal lives on the Node, so a restarted controller converges from the
API alone: a marked Node with no pods left is terminated, one with movable pods is drained, one
whose pods cannot move is uncordoned. A proposal lost in a restart only costs its replacement,
an empty node emptiness deletes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from kubernetes.client.exceptions import ApiException

from gpufleet.decisions import Preempt
from gpufleet.k8s.translate import names
from gpufleet.k8s.translate.node_marks import epoch_seconds, json_object, read_mark
from gpufleet.k8s.watch.connections import release
from gpufleet.provisioning.disruption import Command, DisruptionSnapshot, NodeView

log = logging.getLogger(__name__)

DEFAULT_VALIDATION_S = 15.0  # Karpenter's consolidation validation period
DEFAULT_DRAIN_TIMEOUT_S = 600.0
DO_NOT_DISRUPT = names.DO_NOT_DISRUPT  # a pod that must not be moved (Karpenter's)


@dataclass(frozen=True, slots=True)
class ConsolidationMark:
    """What the annotation says: which method chose the Node, and when it was marked."""

    method: str
    started_at: float

    def to_json(self) -> str:
        return json.dumps({"method": self.method, "started_at": self.started_at},
                          separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> ConsolidationMark:
        """Parse the annotation; ValueError naming the field when it is not what we write."""
        doc = json_object(text, names.ANN_CONSOLIDATION)
        method, started = doc.get("method"), doc.get("started_at")
        if not isinstance(method, str) or not method:
            raise ValueError(f"{names.ANN_CONSOLIDATION}: field 'method' must be a non-empty "
                             f"string, got {method!r}")
        if not epoch_seconds(started):
            raise ValueError(f"{names.ANN_CONSOLIDATION}: field 'started_at' must be epoch "
                             f"seconds, got {started!r}")
        return cls(method, float(started))


def mark_of(node: Mapping[str, Any]) -> ConsolidationMark | None:
    """The Node's consolidation mark, or None. One that does not parse was not written by
    gpufleet: it is not acted on (logged once per node and value) — the capacity loop removes it
    with the cordon, so a hand-edited annotation cannot keep a Node cordoned forever."""
    return read_mark(node, names.ANN_CONSOLIDATION, ConsolidationMark.from_json,
                     "not consolidating it on that")


def annotated(node: Mapping[str, Any]) -> bool:
    """Carries the annotation, parsable or not."""
    return names.ANN_CONSOLIDATION in ((node.get("metadata") or {}).get("annotations") or {})


def movable(pod: Mapping[str, Any]) -> bool:
    """Whether consolidation may move the pod: a controller (Job, ReplicaSet, …; not a DaemonSet)
    recreates it after the eviction, it is not a gang member (moving one would break the gang)
    and it does not carry ``karpenter.sh/do-not-disrupt: "true"``. A bare pod would simply be
    lost, so it pins its node, as in Karpenter."""
    meta = pod.get("metadata") or {}
    if (meta.get("annotations") or {}).get(DO_NOT_DISRUPT) == "true":
        return False
    labels = meta.get("labels") or {}
    if any(labels.get(k) for k in names.POD_GROUP_LABELS):
        return False
    return any(o.get("controller") and o.get("kind") != "DaemonSet"
               for o in meta.get("ownerReferences") or ())


def movable_keys(pods: Iterable[Mapping[str, Any]]) -> set[str]:
    """``namespace/name`` of every pod :func:`movable` allows to move."""
    out = set()
    for p in pods:
        meta = p.get("metadata") or {}
        if meta.get("name") and movable(p):
            out.add(f"{meta.get('namespace', 'default')}/{meta['name']}")
    return out


@dataclass(frozen=True, slots=True)
class Proposal:
    """A command waiting for its re-validation (in memory: a restart re-decides)."""

    command: Command
    decided_at: float
    replacement: str | None = None  # launch-record token of the command's replacement node


def revalidate(proposal: Proposal, views: list[NodeView], now: float) -> list[str]:
    """Why ``proposal`` must not be carried out on the nodes as they are now; [] = go.

    A replacement is a real node among ``views`` by now (the proposal waits for it), so the
    command is checked without its hypothetical new node: the pods must fit the room that is
    really there — the replacement's included, minus whatever was bound to it meanwhile."""
    cmd = proposal.command
    if proposal.replacement is not None:
        cmd = replace(cmd, replacement=None)
    return cmd.validate(DisruptionSnapshot(views, now))


def still_movable(node: NodeView, left: set[str], mark: ConsolidationMark,
                  others: list[NodeView], now: float) -> list[str]:
    """For a marked Node whose pods ``left`` have not been evicted yet: why they can no longer
    move (the command re-built for what is left, validated as when it was chosen); [] = go on.
    Pods already terminating are the drain's and not counted: their replacements are pending,
    so the room they will take is still free in ``others``."""
    rest = replace(node, pods=tuple(p for p in node.pods if p.job_id in left))
    cmd = Command(mark.method, (node.name,),
                  tuple(Preempt(p.job_id, "consolidation") for p in rest.pods))
    return cmd.validate(DisruptionSnapshot([rest, *others], now))


def mark_node(core: Any, node: str, mark: ConsolidationMark) -> bool:
    """Annotate and cordon ``node`` in one merge patch (idempotent). False: the Node is gone."""
    body = {"metadata": {"annotations": {names.ANN_CONSOLIDATION: mark.to_json()}},
            "spec": {"unschedulable": True}}
    if not _patch_node(core, node, body):
        return False
    log.info("node %s marked for %s", node, mark.method)
    return True


def unmark_node(core: Any, node: str, why: str) -> bool:
    """Remove the mark and the cordon in one merge patch (idempotent). False: the Node is gone."""
    body = {"metadata": {"annotations": {names.ANN_CONSOLIDATION: None}},
            "spec": {"unschedulable": False}}
    if not _patch_node(core, node, body):
        return False
    log.info("node %s: consolidation abandoned (%s); uncordoned", node, why)
    return True


def _patch_node(core: Any, node: str, body: dict) -> bool:
    """One merge patch of ``node``; False when the Node is gone (404), other errors raise."""
    try:
        release(core.patch_node(node, body, _preload_content=False))
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True
