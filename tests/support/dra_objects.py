"""DRA objects the live tests make and read on the real API server: a test's namespace and
nodes (:class:`Space`), ResourceClaims, pods that use them, and their allocation results."""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client
from live_wait import wait_for

G, V = "resource.k8s.io", "v1"
ZONE = "topology.kubernetes.io/zone"


class Space:
    def __init__(self, lab: Any) -> None:
        self.lab = lab
        self.name = lab.namespace("dra")
        self.nodes: list[str] = []
        self.custom = client.CustomObjectsApi(lab.api)

    def add(self, instance_type: str, count: int = 1, mig_config: str | None = None,
            gpu_pool: str | None = None) -> list[str]:
        got = self.lab.add_instance_nodes(instance_type, count, zone=self.name,
                                          mig_config=mig_config, prefix=self.name,
                                          gpu_pool=gpu_pool)
        self.nodes += got
        return got

    def claim(self, name: str, cls: str = "gpu.nvidia.com", count: int = 1,
              cel: str | None = None, memory: str | None = None) -> None:
        self.custom.create_namespaced_custom_object(
            G, V, self.name, "resourceclaims", claim_body(name, cls, count, cel, memory))

    def read_claim(self, name: str) -> dict[str, Any]:
        return dict(self.custom.get_namespaced_custom_object(G, V, self.name, "resourceclaims",
                                                              name))

    def pod(self, name: str, claim: str | None = None, template: str | None = None,
            ann: dict[str, str] | None = None, scheduler: str = "gpufleet",
            limits: dict[str, str] | None = None, priority_class: str | None = None) -> None:
        ref: dict[str, str] = {"name": "gpu"}
        if claim:
            ref["resourceClaimName"] = claim
        if template:
            ref["resourceClaimTemplateName"] = template
        container: dict[str, Any] = {
            "name": "main", "image": "registry.k8s.io/pause:3.10",
            "resources": {"limits": {"cpu": "1", "memory": "1Gi", **(limits or {})}}}
        spec: dict[str, Any] = {
            "schedulerName": scheduler, "terminationGracePeriodSeconds": 0,
            "nodeSelector": {ZONE: self.name}, "containers": [container]}
        if claim or template:
            container["resources"]["claims"] = [{"name": "gpu"}]
            spec["resourceClaims"] = [ref]
        if priority_class:
            spec["priorityClassName"] = priority_class
        self.lab.core.create_namespaced_pod(self.name, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": ann or {}}, "spec": spec})

    def without_device_plugin(self, node: str) -> None:
        """Drop ``nvidia.com/gpu`` from the Node's status: a node whose GPUs are DRA devices
        only (no device plugin), where a mapped extended resource needs a claim."""
        from kubernetes.client.exceptions import ApiException

        def dropped() -> bool:
            status = self.lab.core.read_node(node).status
            fields = [f for f in ("capacity", "allocatable")
                      if "nvidia.com/gpu" in (getattr(status, f) or {})]
            if not fields:
                return True
            # again while it is there: KWOK's first status write can land after the patch
            patch = [{"op": "remove", "path": f"/status/{f}/nvidia.com~1gpu"} for f in fields]
            try:
                self.lab.core.api_client.call_api(
                    f"/api/v1/nodes/{node}/status", "PATCH", body=patch,
                    header_params={"Content-Type": "application/json-patch+json"},
                    auth_settings=["BearerToken"], _preload_content=False)
            except ApiException as exc:
                if exc.status not in (409, 422):  # a field gone in between: look again
                    raise
            return False

        wait_for("the node without the device plugin's resource", dropped)

    def read_pod(self, name: str) -> dict[str, Any]:
        return dict(json.loads(self.lab.core.read_namespaced_pod(
            name, self.name, _preload_content=False).data))

    def bound(self, name: str) -> dict[str, Any] | None:
        p = self.read_pod(name)
        return p if p["spec"].get("nodeName") else None

    def scheduled_message(self, name: str) -> str | None:
        for c in self.read_pod(name)["status"].get("conditions") or ():
            if c["type"] == "PodScheduled" and c["status"] == "False":
                return str(c.get("message"))
        return None

    def slices(self, node: str) -> list[dict[str, Any]]:
        return list(self.custom.list_cluster_custom_object(
            G, V, "resourceslices", field_selector=f"spec.nodeName={node}")["items"])

    def device(self, node: str, name: str) -> dict[str, Any]:
        return next(d for s in self.slices(node) for d in s["spec"].get("devices") or ()
                    if d["name"] == name)


def claim_body(name: str, cls: str, count: int, cel: str | None, memory: str | None
               ) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": cls, "count": count}
    if cel:
        exactly["selectors"] = [{"cel": {"expression": cel}}]
    if memory:
        exactly["capacity"] = {"requests": {"memory": memory}}
    return {"apiVersion": f"{G}/{V}", "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}


def results(claim: dict[str, Any]) -> list[dict[str, Any]]:
    return list(claim["status"]["allocation"]["devices"]["results"])


def allocated(space: Space, name: str) -> dict[str, Any] | None:
    c = space.read_claim(name)
    return c if (c.get("status") or {}).get("allocation") else None


