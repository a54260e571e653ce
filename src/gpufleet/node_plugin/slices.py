"""The node's ResourceSlice (resource.k8s.io/v1): one multi-allocatable device per GPU.

Each device is ``gpu-<index>`` with ``allowMultipleAllocations: true`` and two consumable
capacities a claim asks shares of (``DeviceRequest.capacity.requests``):

- ``memory``: the framebuffer; a request from 1Gi up in 1Mi steps, 1Mi being the unit of the MPS
  memory limit the share gets; a claim that asks for none takes all of it;
- ``cores``: percent of the GPU's SMs (MPS active thread percentage), 1 to 100 in steps of 1; a
  claim that asks for none takes 100, so a share must ask for both to leave room for another.

Attributes are those NVIDIA's DRA driver (``gpu.nvidia.com``) publishes, so gpufleet's
allocator reads either driver's devices the same way (:mod:`gpufleet.k8s.dra.slices`):
``type`` (``gpu``), ``productName`` (the NVML name), ``uuid``, ``index``, ``minor``,
``cudaDriverVersion`` and ``driverVersion`` (semver), and where known ``cudaComputeCapability``
(semver) and ``nvlinkDomain`` (int, the same on GPUs of one NVLink island).

An unhealthy GPU's device carries a taint (``devices[].taints``, :mod:`.health`), so the
scheduler allocates it to no claim that does not tolerate it.

Publishing is level-triggered: :func:`publish` makes the slice what the inventory says, creating
it or replacing a different one (with the pool's generation one higher), and does nothing when
it already is. The slice is owned by the Node, so deleting the node deletes it.
"""

from __future__ import annotations

from typing import Any

from gpufleet.node_plugin import DRIVER
from gpufleet.node_plugin.inventory import Gpu, semver

Taints = dict[str, list[dict[str, str]]]  # device name → its taints

GROUP, VERSION, PLURAL = "resource.k8s.io", "v1", "resourceslices"
CORES = 100  # percent
MEMORY_MIN = "1Gi"


def slice_name(node: str) -> str:
    return f"{node}-{DRIVER}"


def attributes(gpu: Gpu) -> dict[str, dict[str, Any]]:
    attrs: dict[str, dict[str, Any]] = {
        "type": {"string": "gpu"},
        "productName": {"string": gpu.product},
        "uuid": {"string": gpu.uuid},
        "index": {"int": gpu.index},
        "minor": {"int": gpu.minor},
        "cudaDriverVersion": {"version": semver(gpu.cuda_driver_version)},
        "driverVersion": {"version": semver(gpu.driver_version)},
    }
    if gpu.cuda_compute_capability is not None:
        attrs["cudaComputeCapability"] = {"version": semver(gpu.cuda_compute_capability)}
    if gpu.nvlink_domain is not None:
        attrs["nvlinkDomain"] = {"int": gpu.nvlink_domain}
    return attrs


def device(gpu: Gpu, taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    memory = f"{gpu.published_memory_mib}Mi"  # the nominal size (Gpu.published_memory_mib)
    out: dict[str, Any] = {
        "name": gpu.device_name,
        "allowMultipleAllocations": True,
        "attributes": attributes(gpu),
        "capacity": {
            "memory": {"value": memory, "requestPolicy": {
                "default": memory, "validRange": {"min": MEMORY_MIN, "step": "1Mi"}}},
            "cores": {"value": str(CORES), "requestPolicy": {
                "default": str(CORES),
                "validRange": {"min": "1", "max": str(CORES), "step": "1"}}},
        },
    }
    if taints:
        out["taints"] = [dict(t) for t in taints]
    return out


def desired_spec(node: str, gpus: list[Gpu], generation: int = 1,
                 taints: Taints | None = None) -> dict[str, Any]:
    return {
        "driver": DRIVER,
        "nodeName": node,
        "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
        "devices": [device(g, (taints or {}).get(g.device_name)) for g in gpus],
    }


def _canonical(devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The devices with every capacity quantity parsed: the API server writes a quantity back in
    its canonical form ("81920Mi" comes back as "80Gi"), so text alone would always differ."""
    from kubernetes.utils.quantity import parse_quantity

    def q(v: Any) -> Any:
        return parse_quantity(v) if isinstance(v, str | int | float) else v

    out = []
    for d in devices:
        caps = {}
        for name, cap in (d.get("capacity") or {}).items():
            policy = dict(cap.get("requestPolicy") or {})
            if "default" in policy:
                policy["default"] = q(policy["default"])
            if "validValues" in policy:
                policy["validValues"] = [q(v) for v in policy["validValues"]]
            if "validRange" in policy:
                policy["validRange"] = {k: q(v) for k, v in policy["validRange"].items()}
            caps[name] = {**cap, "value": q(cap.get("value")), "requestPolicy": policy}
        # a taint's timeAdded is when its cause was seen, written back as the API formats it:
        # the taint is the same while its key, value and effect are
        taints = sorted((t.get("key"), t.get("value"), t.get("effect"))
                        for t in d.get("taints") or ())
        out.append({**d, "capacity": caps, "taints": taints})
    return out


def _same(live: dict[str, Any], want: dict[str, Any]) -> bool:
    """Whether the live spec publishes what ``want`` does (the generation aside)."""
    return (live.get("driver") == want["driver"] and live.get("nodeName") == want["nodeName"]
            and _canonical(live.get("devices") or []) == _canonical(want["devices"])
            and live.get("pool", {}).get("name") == want["pool"]["name"]
            and live.get("pool", {}).get("resourceSliceCount") == 1)


def publish(api_client: Any, node: str, gpus: list[Gpu], taints: Taints | None = None) -> str:
    """Make the node's slice what ``gpus`` and their ``taints`` say; "created", "updated" or
    "unchanged"."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    custom = client.CustomObjectsApi(api_client)
    name = slice_name(node)
    try:
        live = custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, name)
    except ApiException as exc:
        if exc.status != 404:
            raise
        node_uid = client.CoreV1Api(api_client).read_node(node).metadata.uid
        body = {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceSlice",
            "metadata": {"name": name, "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}]},
            "spec": desired_spec(node, gpus, taints=taints),
        }
        custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
        return "created"
    want = desired_spec(node, gpus, taints=taints)
    if _same(live["spec"], want):
        return "unchanged"
    generation = int(live["spec"].get("pool", {}).get("generation", 0)) + 1
    live["spec"] = desired_spec(node, gpus, generation, taints)
    custom.replace_cluster_custom_object(GROUP, VERSION, PLURAL, name, live)
    return "updated"
