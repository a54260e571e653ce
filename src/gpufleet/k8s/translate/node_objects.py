"""Kubernetes Node objects for GPU machines, as NVIDIA's device plugin and GFD publish them.

A GPU node in a real cluster carries (names as in the NVIDIA GPU operator):

- capacity/allocatable ``nvidia.com/gpu`` (whole GPUs not in MIG mode) and, with the device
  plugin's ``mixed`` MIG strategy, ``nvidia.com/mig-<profile>`` per MIG profile;
- GPU Feature Discovery labels ``nvidia.com/gpu.product`` (the NVML product name with spaces as
  dashes, e.g. ``NVIDIA-A100-SXM4-40GB``), ``nvidia.com/gpu.count``, ``nvidia.com/gpu.memory``
  (MiB per GPU), ``nvidia.com/gpu.family``, ``nvidia.com/gpu.compute.major/minor``,
  ``nvidia.com/cuda.driver.major/minor/rev`` (the *kernel driver* version, e.g. 550.54.14) and
  ``nvidia.com/cuda.runtime.major/minor`` (the CUDA version that driver supports, e.g. 12.4),
  ``nvidia.com/mig.capable``, ``nvidia.com/mig.strategy`` and, per MIG profile,
  ``nvidia.com/mig-<profile>.count`` / ``.memory``;
- MIG manager's ``nvidia.com/mig.config`` (the mig-parted config applied, e.g. ``all-balanced``)
  and ``nvidia.com/mig.config.state``;
- the cloud's ``topology.kubernetes.io/zone`` / ``region``, ``node.kubernetes.io/instance-type``
  and Karpenter's ``karpenter.sh/capacity-type`` (``spot`` | ``on-demand``).

``gpu.product`` always resolves back to the catalog model through
:meth:`gpufleet.catalog.gpus.GpuCatalog.resolve` (the alias table holds the GFD names), so the
controller can read a node's model from its labels. Nodes are marked for KWOK with the annotation
``kwok.x-k8s.io/node: fake`` and carry no taint: example pods need no toleration.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpufleet.catalog.gpus import GpuCatalog, GpuModel, default_gpu_catalog
from gpufleet.catalog.instances import InstanceType
from gpufleet.errors import InputError
from gpufleet.k8s.translate import names
from gpufleet.provisioning.binpack import MIG_CONFIG
from gpufleet.traces.openb import OpenbNode

GPU_RESOURCE = "nvidia.com/gpu"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_ANNOTATION_VALUE = "fake"
KWOK_SELECTOR = f"{KWOK_ANNOTATION}={KWOK_ANNOTATION_VALUE}"

LABEL_PRODUCT = "nvidia.com/gpu.product"
LABEL_COUNT = "nvidia.com/gpu.count"
LABEL_MEMORY = "nvidia.com/gpu.memory"
LABEL_FAMILY = "nvidia.com/gpu.family"
LABEL_MIG_STRATEGY = "nvidia.com/mig.strategy"
LABEL_MIG_CONFIG = "nvidia.com/mig.config"
LABEL_MIG_CAPABLE = "nvidia.com/mig.capable"
DYNAMIC_MIG_CONFIG = MIG_CONFIG  # "all-enabled": what nodes launched for MIG pods boot with
LABEL_CUDA_RUNTIME_MAJOR = "nvidia.com/cuda.runtime.major"
LABEL_CUDA_RUNTIME_MINOR = "nvidia.com/cuda.runtime.minor"
LABEL_ZONE = "topology.kubernetes.io/zone"
LABEL_REGION = "topology.kubernetes.io/region"
LABEL_INSTANCE_TYPE = "node.kubernetes.io/instance-type"
LABEL_CAPACITY_TYPE = names.CAPACITY_TYPE
CAPACITY_TYPES = ("on-demand", "spot")

# The first driver release of each CUDA version (NVIDIA's CUDA toolkit release notes): GFD
# reports the driver version, and the CUDA version it supports separately.
_DRIVER_FOR_CUDA = {
    (11, 8): "520.61.05",
    (12, 0): "525.60.13",
    (12, 1): "530.30.02",
    (12, 2): "535.54.03",
    (12, 3): "545.23.06",
    (12, 4): "550.54.14",
    (12, 5): "555.42.02",
    (12, 6): "560.28.03",
    (12, 8): "570.86.10",
    (13, 0): "580.65.06",
}
# GFD's gpu.family from the compute capability (7.5 is Turing, 8.9 Ada, not Volta/Ampere).
_FAMILY = {3: "kepler", 5: "maxwell", 6: "pascal", 7: "volta", 8: "ampere", 9: "hopper"}
_FAMILY_EXACT = {"7.5": "turing", "8.9": "ada-lovelace"}
DEFAULT_POD_CAPACITY = 110
DEFAULT_EPHEMERAL_STORAGE = "200Gi"


@dataclass(frozen=True, slots=True)
class GpuNodeSpec:
    """What a Node object is built from: one machine, its GPUs and where it runs."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpu_model: str | None = None  # canonical catalog name; None = CPU-only node
    gpus: int = 0
    instance_type: str = ""
    zone: str = ""
    region: str = ""
    capacity_type: str = "on-demand"
    cuda_version: int = 12040  # CUDA_VERSION encoding, as the catalog stores it
    mig_config: str | None = None  # mig-parted config name ("all-1g.5gb", "all-balanced")
    pods: int = DEFAULT_POD_CAPACITY
    extra_labels: Mapping[str, str] = field(default_factory=dict)


def gfd_product(model: str, catalog: GpuCatalog | None = None) -> str:
    """The ``gpu.product`` GFD would publish for a catalog model (resolvable back to it)."""
    catalog = catalog or default_gpu_catalog()
    for alias, target in sorted(catalog.aliases.items()):
        if target == model and alias.startswith(("NVIDIA-", "Tesla-")):
            return alias
    return model


def mig_layout(model: GpuModel, config: str) -> dict[str, int]:
    """MIG devices per GPU for a mig-parted config name: ``all-<profile>``, ``all-balanced`` or
    ``all-enabled`` (:data:`DYNAMIC_MIG_CONFIG`).

    ``all-balanced`` is mig-parted's default mix (two of the smallest 1g slice, one 2g, one 3g).
    """
    if model.mig is None:
        raise InputError(f"GPU model {model.name} has no MIG support", field="mig_config")
    profiles = model.mig.profiles
    if config == "all-balanced":
        layout: dict[str, int] = {}
        for compute, count in ((1, 2), (2, 1), (3, 1)):
            fits = [p for p in profiles.values() if p.compute == compute]
            if fits:
                smallest = min(fits, key=lambda p: p.memory_slices)
                layout[smallest.name] = count
        return layout
    if config == DYNAMIC_MIG_CONFIG:
        # MIG mode on, instances created per pod at bind time (dynamic partitioning, what the
        # provisioner launches for MIG pods): every profile the GPU can hold is advertised at
        # its most, as a device plugin that creates instances on demand does; which slices are
        # really free is the scheduler's own accounting (the pods' MIG annotations)
        return {p.name: p.max_count for p in profiles.values()}
    prefix = "all-"
    if config.startswith(prefix) and config[len(prefix) :] in profiles:
        prof = profiles[config[len(prefix) :]]
        return {prof.name: prof.max_count}
    raise InputError(
        f"unknown MIG config {config!r} for {model.name}; expected all-balanced, "
        f"{DYNAMIC_MIG_CONFIG} or one of "
        + ", ".join(f"all-{p}" for p in profiles),
        field="mig_config",
    )


def driver_version_for_cuda(cuda_version: int) -> str:
    """The kernel driver version (``550.54.14``) a node supporting ``cuda_version`` runs: the
    first release of that CUDA version (GFD labels and DRA slices publish both)."""
    major, minor = divmod(cuda_version, 1000)
    minor //= 10
    driver = _DRIVER_FOR_CUDA.get((major, minor))
    if driver is None:
        known = [k for k in _DRIVER_FOR_CUDA if k <= (major, minor)]
        driver = _DRIVER_FOR_CUDA[max(known)] if known else "520.61.05"
    return driver


def gpu_family(compute_capability: str) -> str:
    """GFD's ``gpu.family`` for a compute capability (``8.0`` → ``ampere``)."""
    major = compute_capability.partition(".")[0]
    return _FAMILY_EXACT.get(
        compute_capability, _FAMILY.get(int(major) if major.isdigit() else -1, "unknown")
    )


def _cuda_labels(cuda_version: int) -> dict[str, str]:
    major, minor = divmod(cuda_version, 1000)
    minor //= 10
    driver = driver_version_for_cuda(cuda_version)
    d_major, d_minor, d_rev = driver.split(".")
    return {
        "nvidia.com/cuda.driver.major": d_major,
        "nvidia.com/cuda.driver.minor": d_minor,
        "nvidia.com/cuda.driver.rev": d_rev,
        LABEL_CUDA_RUNTIME_MAJOR: str(major),
        LABEL_CUDA_RUNTIME_MINOR: str(minor),
    }


def node_object(spec: GpuNodeSpec, catalog: GpuCatalog | None = None,
                device_plugin: bool = True) -> dict[str, Any]:
    """The Node (as a plain dict, ready for the API) a KWOK-managed lab node is created with.
    ``device_plugin=False``: a node whose GPUs NVIDIA's DRA driver publishes instead — no
    ``nvidia.com/gpu`` or ``nvidia.com/mig-*`` capacity (GPU Feature Discovery's labels stay)."""
    catalog = catalog or default_gpu_catalog()
    if spec.capacity_type not in CAPACITY_TYPES:
        raise InputError(
            f"capacity type must be one of {', '.join(CAPACITY_TYPES)}, got {spec.capacity_type!r}",
            field="capacity_type",
        )
    labels: dict[str, str] = {
        "kubernetes.io/hostname": spec.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        # the deprecated twins a kubelet's node also has: without them the controller-manager's
        # node lifecycle controller adds them, one more write per node at start-up
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        "type": "kwok",
        LABEL_CAPACITY_TYPE: spec.capacity_type,
    }
    if spec.instance_type:
        labels[LABEL_INSTANCE_TYPE] = spec.instance_type
    if spec.zone:
        labels[LABEL_ZONE] = spec.zone
    if spec.region:
        labels[LABEL_REGION] = spec.region
    capacity: dict[str, str] = {
        "cpu": f"{spec.cpu_milli}m" if spec.cpu_milli % 1000 else str(spec.cpu_milli // 1000),
        "memory": f"{spec.memory_mib}Mi",
        "pods": str(spec.pods),
        "ephemeral-storage": DEFAULT_EPHEMERAL_STORAGE,
    }
    if spec.gpu_model is not None and spec.gpus > 0:
        model = catalog[spec.gpu_model]
        major, _, minor = model.compute_capability.partition(".")
        labels |= {
            "nvidia.com/gpu.present": "true",
            LABEL_PRODUCT: gfd_product(model.name, catalog),
            LABEL_COUNT: str(spec.gpus),
            LABEL_MEMORY: str(model.memory_mib),
            LABEL_FAMILY: gpu_family(model.compute_capability),
            "nvidia.com/gpu.compute.major": major,
            "nvidia.com/gpu.compute.minor": minor or "0",
            LABEL_MIG_CAPABLE: "true" if model.mig is not None else "false",
        }
        if spec.instance_type:
            labels["nvidia.com/gpu.machine"] = spec.instance_type
        labels |= _cuda_labels(spec.cuda_version)
        if spec.mig_config and spec.mig_config != "all-disabled":
            layout = mig_layout(model, spec.mig_config)
            # Mixed strategy: GPUs in MIG mode are exposed only as their MIG devices.
            capacity[GPU_RESOURCE] = "0"
            assert model.mig is not None
            for prof_name, per_gpu in layout.items():
                prof = model.mig.profiles[prof_name]
                capacity[prof.resource_name] = str(per_gpu * spec.gpus)
                labels[f"nvidia.com/mig-{prof_name}.count"] = str(per_gpu * spec.gpus)
                labels[f"nvidia.com/mig-{prof_name}.memory"] = str(
                    model.memory_mib * prof.memory_slices // model.mig.memory_slices
                )
            labels[LABEL_MIG_STRATEGY] = "mixed"
            labels[LABEL_MIG_CONFIG] = spec.mig_config
            labels["nvidia.com/mig.config.state"] = "success"
        else:
            capacity[GPU_RESOURCE] = str(spec.gpus)
            labels[LABEL_MIG_STRATEGY] = "mixed" if model.mig is not None else "none"
            if model.mig is not None:
                labels[LABEL_MIG_CONFIG] = "all-disabled"
    labels |= dict(spec.extra_labels)
    if not device_plugin:
        capacity = {k: v for k, v in capacity.items() if not k.startswith("nvidia.com/")}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": spec.name,
            "labels": labels,
            "annotations": {
                KWOK_ANNOTATION: KWOK_ANNOTATION_VALUE,
                "node.alpha.kubernetes.io/ttl": "0",
            },
        },
        "spec": {"providerID": f"kwok://{spec.name}"},
        "status": {"capacity": dict(capacity), "allocatable": dict(capacity)},
    }


def spec_from_instance(
    instance: InstanceType,
    name: str,
    *,
    zone: str | None = None,
    capacity_type: str = "on-demand",
    mig_config: str | None = None,
) -> GpuNodeSpec:
    """A node of a catalog instance type (``gpufleet.catalog.instances``)."""
    zone = zone or instance.zones[0]
    # AWS zones append a letter to the region ("us-east-1a"); Aliyun a dash and a letter.
    region = zone[:-1] if zone[-2:-1].isdigit() else zone.rsplit("-", 1)[0]
    return GpuNodeSpec(
        name=name,
        cpu_milli=instance.cpu_milli,
        memory_mib=instance.memory_mib,
        gpu_model=instance.gpu_model,
        gpus=instance.gpus,
        instance_type=instance.name,
        zone=zone,
        region=region,
        capacity_type=capacity_type,
        cuda_version=instance.cuda_driver,
        mig_config=mig_config,
    )


def spec_from_openb(node: OpenbNode, *, zone: str = "openb-a") -> GpuNodeSpec:
    """A node from a row of the openb node list (``sn,cpu_milli,memory_mib,gpu,model``)."""
    itype = f"openb-{node.num_gpu}x{node.model}" if node.model else "openb-cpu"
    return GpuNodeSpec(
        name=node.name,
        cpu_milli=node.cpu_milli,
        memory_mib=node.memory_mib,
        gpu_model=node.model,
        gpus=node.num_gpu,
        instance_type=itype,
        zone=zone,
        region="openb",
    )
