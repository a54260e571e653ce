"""The lab's DRA inventory: NVIDIA's DeviceClasses and each KWOK GPU node's ResourceSlices.

There is no kubelet and no NVIDIA driver on a KWOK node, so the lab publishes what NVIDIA's
kubelet plugin would (:mod:`gpufleet.k8s.dra.slices`), with an owner reference to
the Node: deleting a node lets the garbage collector delete its slices, as on a real cluster.
A node labelled ``gpufleet.io/gpu-pool=shared`` is in a shared-GPU pool: the lab publishes what
gpufleet's node plugin would there instead (:func:`gpufleet.node_plugin.slices.desired_spec`, one
shareable device per GPU with ``memory`` and ``cores``), and no NVIDIA slice.
``gpufleet lab up --classic`` skips all of this (GPUs only as Node labels and extended resources).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gpufleet.catalog.gpus import default_gpu_catalog
from gpufleet.k8s.dra.shares import (
    ADMISSION_API,
    NAMESPACE_LABEL,
    POLICY_NAME,
    SHARE_CLASS,
    SHARE_MILLIS,
    fraction_policy,
    fraction_policy_binding,
    share_claim_templates,
    share_device_class,
)
from gpufleet.k8s.dra.slices import (
    device_classes,
    nvlink_domains_for,
    nvml_product_name,
    resource_slices,
)
from gpufleet.k8s.translate.node_objects import GpuNodeSpec
from gpufleet.k8s.watch.connections import release
from gpufleet.k8s.watch.informer import list_all
from gpufleet.lab.errors import LabError
from gpufleet.node_plugin import POOL_LABEL, SHARED_POOL

GROUP, VERSION = "resource.k8s.io", "v1"
# Beta in 1.36 and on by default; named so that a build or flag change that turns one off
# cannot silently drop counters or capacity from the published slices.
FEATURE_GATES = "DRAPartitionableDevices=true,DRAConsumableCapacity=true,DRAExtendedResource=true"


def check_served(api_client: Any) -> None:
    """Fail clearly unless the API server serves ResourceSlices and DeviceClasses in v1."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        listed = client.ResourceV1Api(api_client).get_api_resources()
    except ApiException as exc:
        raise LabError(
            f"the API server does not serve {GROUP}/{VERSION} ({exc.status} {exc.reason}); "
            "DRA needs Kubernetes >= 1.34"
        ) from exc
    served = {r.name for r in listed.resources or ()}
    missing = {"resourceslices", "deviceclasses", "resourceclaims"} - served
    if missing:
        raise LabError(f"the API server's {GROUP}/{VERSION} lacks {', '.join(sorted(missing))}")


def _create(custom: Any, plural: str, body: dict[str, Any]) -> None:
    from kubernetes.client.exceptions import ApiException

    try:
        release(custom.create_cluster_custom_object(GROUP, VERSION, plural, body,
                                                    _preload_content=False))
    except ApiException as exc:
        if exc.status != 409:  # already there: a restarted lab keeps its objects
            raise LabError(
                f"creating {plural[:-1]} {body['metadata']['name']}: {exc.status} {exc.reason}: "
                f"{(exc.body or '')[:300]}"
            ) from exc


def install_device_classes(api_client: Any) -> list[str]:
    from kubernetes import client

    custom = client.CustomObjectsApi(api_client)
    classes = device_classes()  # NVIDIA's; share.gpu.gpufleet.io comes with the share policy
    for dc in classes:
        _create(custom, "deviceclasses", dc)
    return [dc["metadata"]["name"] for dc in classes]


# where a DRA-only lab's gpu-fraction pods get shares: the namespace examples/ land in
SHARE_NAMESPACE = "default"


def _post(api_client: Any, path: str, body: dict[str, Any]) -> None:
    """Create ``body`` at ``path`` (raw JSON: the admission policy kinds have no client model);
    already there is fine."""
    from kubernetes.client.exceptions import ApiException

    try:
        release(api_client.call_api(path, "POST", body=body, auth_settings=["BearerToken"],
                                    _preload_content=False))
    except ApiException as exc:
        if exc.status != 409:
            raise LabError(f"creating {body['kind']} {body['metadata']['name']}: {exc.status} "
                           f"{exc.reason}: {(exc.body or '')[:300]}") from exc


def install_share_policy(api_client: Any, namespace: str = SHARE_NAMESPACE) -> str:
    """What the chart's ``shares`` values install (:mod:`gpufleet.k8s.dra.shares`): the node
    plugin's DeviceClass, the gpu-fraction MutatingAdmissionPolicy and its binding, and the
    share claim templates in ``namespace``, labelled for the binding — so a ``gpu-fraction``
    pod there gets its share as a claim."""
    from kubernetes import client

    custom = client.CustomObjectsApi(api_client)
    _create(custom, "deviceclasses", share_device_class())
    group, version = ADMISSION_API.split("/")
    for body, plural in ((fraction_policy(), "mutatingadmissionpolicies"),
                         (fraction_policy_binding(), "mutatingadmissionpolicybindings")):
        _post(api_client, f"/apis/{group}/{version}/{plural}", body)
    for t in share_claim_templates():
        _post(api_client, f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/"
              "resourceclaimtemplates", t)
    key, value = NAMESPACE_LABEL
    client.CoreV1Api(api_client).patch_namespace(
        namespace, {"metadata": {"labels": {key: value}}})
    return (f"{SHARE_CLASS}, policy {POLICY_NAME}, {len(SHARE_MILLIS)} claim templates in "
            f"namespace {namespace}")


def _node_uids(api_client: Any, page: int = 500) -> dict[str, str]:
    from kubernetes import client

    nodes, _ = list_all(client.CoreV1Api(api_client).list_node, page)
    return {n["metadata"]["name"]: n["metadata"]["uid"] for n in nodes}


def shared_pool_slices(spec: GpuNodeSpec, node_uid: str) -> list[dict[str, Any]]:
    """The slice gpufleet's node plugin would publish for ``spec``'s node, its GPUs as a device
    file would list them (fake UUIDs, the catalog's memory and NVML product name, the instance's
    NVLink islands); ``[]`` for a CPU-only node."""
    from gpufleet.node_plugin.inventory import Gpu
    from gpufleet.node_plugin.slices import desired_spec, slice_name

    if spec.gpu_model is None or spec.gpus <= 0:
        return []
    catalog = default_gpu_catalog()
    model = catalog[spec.gpu_model]
    doms = nvlink_domains_for(spec)
    major, minor = divmod(spec.cuda_version, 1000)
    gpus = [Gpu.model_validate({
        "uuid": f"GPU-{uuid.uuid5(uuid.NAMESPACE_URL, f'{spec.name}/{i}')}", "index": i,
        "minor": i, "product": nvml_product_name(model.name, catalog),
        "memoryMiB": model.memory_mib, "cudaDriverVersion": f"{major}.{minor // 10}",
        **({"nvlinkDomain": doms[i]} if doms[i] >= 0 else {}),
    }) for i in range(spec.gpus)]
    return [{
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceSlice",
        "metadata": {"name": slice_name(spec.name), "ownerReferences": [
            {"apiVersion": "v1", "kind": "Node", "name": spec.name, "uid": node_uid}]},
        "spec": desired_spec(spec.name, gpus),
    }]


def publish_slices(api_client: Any, specs: Iterable[GpuNodeSpec], workers: int = 8) -> int:
    """Create every GPU node's ResourceSlices, owned by its Node; returns how many."""
    from kubernetes import client

    custom = client.CustomObjectsApi(api_client)
    uids = _node_uids(api_client)
    bodies: list[dict[str, Any]] = []
    for spec in specs:
        if spec.name not in uids:
            raise LabError(f"node {spec.name} does not exist; create it before its slices")
        if spec.extra_labels.get(POOL_LABEL) == SHARED_POOL:
            bodies += shared_pool_slices(spec, uids[spec.name])
            continue
        bodies += resource_slices(
            spec, node_uid=uids[spec.name], nvlink_domains=nvlink_domains_for(spec)
        )
    if workers <= 1 or len(bodies) <= 1:
        for b in bodies:
            _create(custom, "resourceslices", b)
    else:
        with ThreadPoolExecutor(workers, thread_name_prefix="lab-create-slice") as pool:
            list(pool.map(lambda b: _create(custom, "resourceslices", b), bodies))
    return len(bodies)
