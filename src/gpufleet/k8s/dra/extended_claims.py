"""Extended resources a DeviceClass maps (KEP-5004, beta in 1.36) — the claim kube-scheduler
creates for them, as data.

A pod asking ``nvidia.com/gpu: N`` unchanged, on a node without the device plugin's resource,
gets its GPUs through DRA when a DeviceClass names the resource in ``extendedResourceName`` (or
implicitly, ``deviceclass.resource.kubernetes.io/<class>``). kube-scheduler 1.36
(``pkg/scheduler/framework/plugins/dynamicresources/extendeddynamicresources.go``) then creates
one claim for the pod: ``generateName: <pod>-extended-resources-``, owned by the pod (controller),
annotated ``resource.kubernetes.io/extended-resource-claim: "true"``, one ``ExactCount`` request
per container and resource named ``container-<i>-request-<j>``; after allocating it, it records
the mapping in the pod's ``status.extendedResourceClaimStatus``. gpufleet writes the same
objects (:mod:`gpufleet.k8s.schedule.claim_writes`), so either scheduler — and the kubelet —
reads them alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpufleet.k8s.translate.quantity import count

EXTENDED_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
IMPLICIT_EXTENDED_PREFIX = "deviceclass.resource.kubernetes.io/"


@dataclass(frozen=True, slots=True)
class ExtendedRequest:
    """One container's extended-resource request a DeviceClass may map (KEP-5004), named as
    kube-scheduler names the claim request it becomes: ``container-<i>-request-<j>``, ``i`` the
    container's index in initContainers + containers, ``j`` the resource's index among the
    container's sorted request names."""

    container: str
    request: str
    resource: str
    count: int


def extended_requests(pod: Mapping[str, Any]) -> tuple[ExtendedRequest, ...]:
    """The pod's GPU-shaped extended-resource requests (``nvidia.com/gpu``,
    ``nvidia.com/mig-*``, ``deviceclass.resource.kubernetes.io/*``) per container. Init
    containers are left out: kube-scheduler folds their requests into the regular containers'
    when it can, and gpufleet does not allocate init-only devices."""
    spec = pod.get("spec") or {}
    out: list[ExtendedRequest] = []
    offset = len(spec.get("initContainers") or ())
    for i, c in enumerate(spec.get("containers") or ()):
        res = c.get("resources") or {}
        reqs = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        keys = sorted(reqs)
        for j, k in enumerate(keys):
            if k == "nvidia.com/gpu" or k.startswith(("nvidia.com/mig-",
                                                      IMPLICIT_EXTENDED_PREFIX)):
                n = count(reqs[k])
                if n > 0:
                    out.append(ExtendedRequest(str(c.get("name")), f"container-{offset + i}-"
                                               f"request-{j}", k, n))
    return tuple(out)


def extended_classes(classes: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Extended resource name → the DeviceClass that maps it (explicitly, or implicitly as
    ``deviceclass.resource.kubernetes.io/<class>``)."""
    out = {f"{IMPLICIT_EXTENDED_PREFIX}{name}": name for name in classes}
    for name, dc in classes.items():
        ext = (dc.get("spec") or {}).get("extendedResourceName")
        if ext:
            out[str(ext)] = name
    return out


def extended_claim(namespace: str, name: str, uid: str, reqs: Sequence[ExtendedRequest],
                   mapping: Mapping[str, str]) -> dict[str, Any]:
    """The claim kube-scheduler creates for a pod's mapped extended resources
    (``preFilterExtendedResources`` + ``createRequestsAndMappings`` in 1.36): generateName
    ``<pod>-extended-resources-``, owned by the pod (controller), annotated
    ``resource.kubernetes.io/extended-resource-claim: "true"``, one ExactCount request per
    container and resource."""
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {
            "generateName": f"{name}-extended-resources-",
            "namespace": namespace,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": name,
                                 "uid": uid, "controller": True}],
            "annotations": {EXTENDED_CLAIM_ANNOTATION: "true"},
        },
        "spec": {"devices": {"requests": [
            {"name": r.request, "exactly": {"deviceClassName": mapping[r.resource],
                                            "allocationMode": "ExactCount", "count": r.count}}
            for r in reqs]}},
    }


def extended_mappings(reqs: Sequence[ExtendedRequest]) -> list[dict[str, str]]:
    """``status.extendedResourceClaimStatus.requestMappings`` for the pod."""
    return [{"containerName": r.container, "resourceName": r.resource, "requestName": r.request}
            for r in reqs]
