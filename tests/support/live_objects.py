"""Objects the live tests make and look for on the real API server: a GPU pod for gpufleet,
"is it gone" (a 404 on read), and a test's namespace cleaned away."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from live_wait import wait_for


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


def clean_space(api: Any, ns: str, nodes: Iterable[str] = ()) -> None:
    """Remove what a live test made in its namespace ``ns`` — its Jobs (their pods with them),
    every pod, waiting until they are gone — then the ``nodes`` it added and the namespace."""
    core = client.CoreV1Api(api)
    batch = client.BatchV1Api(api)
    for job in batch.list_namespaced_job(ns).items:
        batch.delete_namespaced_job(job.metadata.name, ns, propagation_policy="Background")
    core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
    wait_for("the test's pods to go", lambda: not core.list_namespaced_pod(ns).items, 60)
    for n in nodes:
        core.delete_node(n)
    core.delete_namespace(ns)


def create_once_admitted(create: Callable[[], Any], what: str, timeout_s: float = 30.0) -> Any:
    """``create()`` (a pod naming a PriorityClass just made), repeated while the API server's
    Priority admission has not seen that class yet: it reads classes through an informer, so
    right after ``create_priority_class`` a pod can be refused 403 "no PriorityClass with name
    … was found" for a moment (longer on a loaded machine). Any other error is raised."""
    def attempt() -> Any:
        try:
            return create() or True
        except ApiException as exc:
            if exc.status == 403 and "no PriorityClass" in (exc.body or ""):
                return None
            raise
    return wait_for(what, attempt, timeout_s)
