"""Marking a Node as interrupted: the one write both interruption sources make.

Two parties learn that an instance is going away: the node agent (``gpufleet agent``, from the
metadata service on the node) and the controller (from the provider's event queue, e.g. AWS SQS).
Either may be first, both may see the same reclaim. So the mark is written once, by whoever is
first, and the drain (:mod:`gpufleet.k8s.disruption.drain`) acts on the mark, not on the notice —
one drain per node however many sources spoke:

* annotation ``gpufleet.io/interruption``: JSON ``{"kind", "deadline", "noticed_at", "source"}``
  (``kind`` an :class:`~gpufleet.cloud.provider.InterruptionKind` value, times in epoch seconds);
* taint ``gpufleet.io/interrupted:NoSchedule`` so no scheduler places new work there.

The write is one merge patch carrying the Node's ``resourceVersion``: if anyone changed the Node
since we read it (another source marking it, the kubelet updating labels) the API answers 409 and
we re-read; an annotation already present means someone else marked it — done, not an error.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException

from gpufleet.checkpoint.notices import Notice
from gpufleet.cloud.provider import Interruption, InterruptionKind
from gpufleet.k8s.translate import names
from gpufleet.k8s.translate.node_marks import epoch_seconds, json_object, read_mark
from gpufleet.k8s.watch.connections import release

log = logging.getLogger(__name__)

SOURCES = ("agent", "aws-sqs", "aliyun", "kwok")
MAX_MARK_TRIES = 5  # 409s in a row before giving up for this round (a busy Node, not a bug)


@dataclass(frozen=True, slots=True)
class InterruptionMark:
    """What the annotation says: which kind of loss, when the instance goes, who noticed when."""

    kind: InterruptionKind
    deadline: float | None  # epoch seconds the instance goes; None if the provider did not say
    noticed_at: float  # epoch seconds the first source learned of it
    source: str

    def to_json(self) -> str:
        return json.dumps({"kind": self.kind.value, "deadline": self.deadline,
                           "noticed_at": self.noticed_at, "source": self.source},
                          separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> InterruptionMark:
        """Parse the annotation; ValueError naming the field when it is not what we write."""
        doc = json_object(text, names.ANN_INTERRUPTION)
        try:
            kind = InterruptionKind(doc.get("kind", ""))
        except ValueError:
            valid = ", ".join(k.value for k in InterruptionKind)
            raise ValueError(f"{names.ANN_INTERRUPTION}: field 'kind' {doc.get('kind')!r}; "
                             f"expected one of {valid}") from None
        noticed = doc.get("noticed_at")
        if not epoch_seconds(noticed):
            raise ValueError(f"{names.ANN_INTERRUPTION}: field 'noticed_at' must be epoch "
                             f"seconds, got {noticed!r}")
        deadline = doc.get("deadline")
        if deadline is not None and not epoch_seconds(deadline):
            raise ValueError(f"{names.ANN_INTERRUPTION}: field 'deadline' must be epoch seconds "
                             f"or null, got {deadline!r}")
        return cls(kind, None if deadline is None else float(deadline), float(noticed),
                   str(doc.get("source", "")))


def kind_of_notice(notice: Notice) -> InterruptionKind:
    """A metadata-service notice in the provider contract's vocabulary."""
    return InterruptionKind.REBALANCE if notice.kind == "rebalance" else (
        InterruptionKind.SPOT_INTERRUPTION)


def mark_from_notice(notice: Notice, now: float | None = None) -> InterruptionMark:
    return InterruptionMark(kind_of_notice(notice), notice.deadline,
                            time.time() if now is None else now, "agent")


def mark_of(node: Mapping[str, Any]) -> InterruptionMark | None:
    """The Node's mark, or None. An annotation that does not parse was not written by any source
    of the convention: it is not acted on (deleting a node on garbage would cost more than it
    could save) and is logged once per node and value."""
    return read_mark(node, names.ANN_INTERRUPTION, InterruptionMark.from_json,
                     "not draining it on that")


def _taint_present(taints: list[Mapping[str, Any]]) -> bool:
    return any(t.get("key") == names.INTERRUPTED_TAINT_KEY
               and t.get("effect") == names.INTERRUPTED_TAINT_EFFECT for t in taints)


def marking_patch(node: Mapping[str, Any], mark: InterruptionMark) -> dict[str, Any]:
    """The merge patch that marks ``node`` as read: annotation, taint appended to the taints it
    has (a merge patch replaces the whole list, so the guard on resourceVersion is what keeps a
    concurrent taint from being lost), and that resourceVersion."""
    meta = node.get("metadata") or {}
    taints = list((node.get("spec") or {}).get("taints") or [])
    if not _taint_present(taints):
        taints.append({"key": names.INTERRUPTED_TAINT_KEY, "value": mark.source,
                       "effect": names.INTERRUPTED_TAINT_EFFECT})
    return {"metadata": {"annotations": {names.ANN_INTERRUPTION: mark.to_json()},
                         "resourceVersion": meta.get("resourceVersion")},
            "spec": {"taints": taints}}


def mark_node(core: Any, node_name: str, mark: InterruptionMark) -> bool:
    """Mark ``node_name`` unless it is marked already. True: this call marked it; False: someone
    else had (annotation present, or they won the race) or the Node is gone. API faults other
    than 404/409 propagate: the caller retries (the agent does, the controller's next cycle)."""
    for _ in range(MAX_MARK_TRIES):
        try:
            node = read_node(core, node_name)
        except ApiException as exc:
            if exc.status == 404:
                log.info("node %s is gone: nothing to mark", node_name)
                return False
            raise
        if mark_of(node) is not None:
            return False
        try:
            release(core.patch_node(node_name, marking_patch(node, mark),
                                    _preload_content=False))
        except ApiException as exc:
            if exc.status == 409:  # changed since we read it: re-read; marked → someone else did
                continue
            if exc.status == 404:
                return False
            raise
        log.info("node %s marked interrupted (%s, deadline %s, by %s)", node_name,
                 mark.kind.value, mark.deadline, mark.source)
        return True
    log.warning("node %s: %d conflicts in a row while marking; will retry", node_name,
                MAX_MARK_TRIES)
    raise ApiException(status=409, reason="Conflict")


def read_node(core: Any, node_name: str) -> dict[str, Any]:
    """The Node as the API serves it (camelCase JSON, like the informers' objects)."""
    resp = core.read_node(node_name, _preload_content=False)
    return json.loads(resp.data)


def node_for_instance(nodes: Iterable[Mapping[str, Any]], instance_id: str) -> str | None:
    """The Node whose ``spec.providerID`` names ``instance_id`` (the formats of
    :mod:`gpufleet.cloud.provider`: ``aws:///<zone>/<id>``, ``alicloud://<region>.<id>``,
    ``kwok://<name>``); None if no Node has joined for it (or it is gone already)."""
    for node in nodes:
        pid = (node.get("spec") or {}).get("providerID") or ""
        if pid.endswith((f"/{instance_id}", f".{instance_id}")):
            return node["metadata"]["name"]
    return None


def mark_from_event(event: Interruption, source: str, now: float | None = None
                    ) -> InterruptionMark:
    """The mark for a provider event (the controller's path: AWS SQS, Aliyun, kwok)."""
    return InterruptionMark(event.kind, event.deadline, time.time() if now is None else now,
                            source)


def mark_interrupted_instance(core: Any, nodes: Iterable[Mapping[str, Any]],
                              event: Interruption, source: str) -> str | None:
    """The controller's side of the convention: mark the Node of ``event``'s instance (once,
    whoever was first). Returns the Node's name, or None when no Node runs that instance — either
    way the event is recorded and the caller may acknowledge it; an API fault propagates, so the
    event is not acknowledged and comes back."""
    name = node_for_instance(nodes, event.instance_id)
    if name is not None:
        mark_node(core, name, mark_from_event(event, source))
    return name
