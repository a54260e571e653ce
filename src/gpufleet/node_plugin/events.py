"""Kubernetes Events on the plugin's Node: one per health transition of one of its GPUs.

``GpuUnhealthy`` (Warning) when a device becomes unhealthy or changes cause, ``GpuHealthy``
(Normal) when it is healthy again; involvedObject the Node, in the ``default`` namespace where
``kubectl describe node`` finds a cluster-scoped object's events. Best effort: the slice's taint
and the metric say the same, so an Event that cannot be written is logged and dropped.
"""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime
from typing import Any

from gpufleet.node_plugin.health import TAINT_KEY, DeviceHealth

log = logging.getLogger(__name__)

COMPONENT = "gpufleet-node-plugin"
UNHEALTHY, HEALTHY = "GpuUnhealthy", "GpuHealthy"


def body(node: str, node_uid: str | None, new: DeviceHealth) -> dict[str, Any]:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if new.healthy:
        reason, kind = HEALTHY, "Normal"
        message = f"{new.device} ({new.uuid}) is healthy again; taint {TAINT_KEY} removed"
    else:
        reason, kind = UNHEALTHY, "Warning"
        message = (f"{new.device} ({new.uuid}) is unhealthy: {new.reason}; tainted "
                   f"{TAINT_KEY}={new.reason}:{new.effect}")
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{node}.{uuid.uuid4().hex[:16]}", "namespace": "default"},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid},
        "reason": reason, "message": message, "type": kind, "count": 1,
        "firstTimestamp": now, "lastTimestamp": now,
        "source": {"component": COMPONENT, "host": node},
        "reportingComponent": COMPONENT, "reportingInstance": node,
    }


def post(api_client: Any, node: str, new: DeviceHealth) -> None:
    import urllib3
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core = client.CoreV1Api(api_client)
    try:
        node_uid = core.read_node(node).metadata.uid
        core.create_namespaced_event("default", body(node, node_uid, new))
    except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
        log.warning("event for node %s (%s %s): %s", node, new.device, new.reason or "healthy",
                    exc)
