"""The minimum drain of an interrupted Node, for the capacity controller's reclaim path.

The issue-12 convention (shared with the node agent and the SQS reader, so every source dedupes
to one drain per node): whoever learns of an interruption first marks the Node with the
annotation ``gpufleet.io/interruption`` (JSON ``kind``, ``deadline``, ``noticed_at``, ``source``)
and the taint ``gpufleet.io/interrupted:NoSchedule`` — only if the annotation is not there yet,
with a patch guarded by resourceVersion (a 409 or an existing annotation: someone else did).
Then, level-triggered, every non-terminal pod bound to a marked Node is evicted (the Eviction API,
so PodDisruptionBudgets are honoured); a Job's controller recreates its pod and the scheduler
places it on other or new capacity. The agent/drain helper owns the full drain controller; this
module is the part the capacity loop needs until the two are reconciled.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)

ANN_INTERRUPTION = "gpufleet.io/interruption"
TAINT_INTERRUPTED = "gpufleet.io/interrupted"


def interruption_annotation(kind: str, deadline: float | None, noticed_at: float,
                            source: str) -> str:
    return json.dumps({"kind": kind, "deadline": deadline, "noticed_at": noticed_at,
                       "source": source}, sort_keys=True)


def mark_interrupted(core: client.CoreV1Api, node: str, kind: str, deadline: float | None,
                     noticed_at: float, source: str) -> bool:
    """Mark ``node`` (module doc); True when this call marked it, False when someone had."""
    try:
        obj = core.read_node(node)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    if ANN_INTERRUPTION in (obj.metadata.annotations or {}):
        return False
    taints = [{"key": t.key, "value": t.value, "effect": t.effect}
              for t in (obj.spec.taints or []) if t.key != TAINT_INTERRUPTED]
    taints.append({"key": TAINT_INTERRUPTED, "value": "true", "effect": "NoSchedule"})
    patch = {
        "metadata": {"resourceVersion": obj.metadata.resource_version,
                     "annotations": {ANN_INTERRUPTION: interruption_annotation(
                         kind, deadline, noticed_at, source)}},
        "spec": {"taints": taints},
    }
    try:
        core.patch_node(node, patch)
    except ApiException as exc:
        if exc.status in (404, 409):
            return False
        raise
    return True


def is_marked(node: Mapping[str, Any]) -> bool:
    return ANN_INTERRUPTION in ((node.get("metadata") or {}).get("annotations") or {})


def pods_to_evict(node: str, pods: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(namespace, name) of the pods on ``node`` that still run there (DaemonSet pods stay:
    they go with the node)."""
    out = []
    for p in pods:
        meta = p.get("metadata") or {}
        if (p.get("spec") or {}).get("nodeName") != node or meta.get("deletionTimestamp"):
            continue
        if (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        if any(o.get("kind") == "DaemonSet" for o in meta.get("ownerReferences") or ()):
            continue
        out.append((meta.get("namespace", "default"), meta["name"]))
    return out


def evict(core: client.CoreV1Api, namespace: str, name: str) -> bool:
    """Ask the Eviction API to evict one pod; False if a budget refused (retried next cycle)."""
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace))
    try:
        core.create_namespaced_pod_eviction(name, namespace, body)
    except ApiException as exc:
        if exc.status == 404:
            return True
        if exc.status == 429:
            return False
        raise
    return True
