"""Objects the live tests make and look for on the real API server: a GPU pod for gpufleet, and
"is it gone" (a 404 on read)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kubernetes.client.exceptions import ApiException


def gpu_pod(name: str, gpus: int, node_selector: Mapping[str, str]) -> dict:
    """A pause pod for the ``gpufleet`` scheduler asking ``gpus`` whole GPUs (1 CPU, 1 GiB), on
    the nodes ``node_selector`` picks; no grace period, so deleting it is immediate."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"schedulerName": "gpufleet", "terminationGracePeriodSeconds": 0,
                     "nodeSelector": dict(node_selector),
                     "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                     "resources": {"limits": {"cpu": "1", "memory": "1Gi",
                                                              "nvidia.com/gpu": str(gpus)}}}]}}


def absent(read: Callable[[], Any]) -> bool:
    """Whether ``read()`` (e.g. ``lambda: core.read_node(name)``) finds nothing: a 404. Another
    API error is "not known yet" (False), so a poll through ``wait_for`` asks again."""
    try:
        read()
    except ApiException as exc:
        return exc.status == 404
    return False
