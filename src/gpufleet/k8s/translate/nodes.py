"""Node objects → FleetState rows, from what the device plugin and GPU Feature Discovery publish.

A Node arrives as the API's JSON (a dict). Its GPUs are ``allocatable`` ``nvidia.com/gpu`` (whole
GPUs) plus, on a MIG node ("mixed" strategy), the GPUs behind the ``nvidia.com/mig-*`` resources:
GFD's ``nvidia.com/gpu.count`` counts every physical GPU, so the MIG-enabled ones are the count
less the whole-GPU resource (all of them under an ``all-*`` ``nvidia.com/mig.config``). MIG GPUs
take the highest indices. The model comes from ``nvidia.com/gpu.product`` through the catalog's
aliases (``NVIDIA-A100-SXM4-40GB`` → ``A100-40GB``); an unknown product keeps its raw name, so a
pod can still ask for it by that name.

Taints become strings ``key=value:Effect`` (NoSchedule and NoExecute only; PreferNoSchedule is a
preference, not a filter) and ``spec.unschedulable`` becomes the
``node.kubernetes.io/unschedulable:NoSchedule`` taint, as kube-scheduler treats it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpufleet.catalog.gpus import GpuCatalog, default_gpu_catalog
from gpufleet.decisions import CapacityType
from gpufleet.k8s.translate import names
from gpufleet.k8s.translate.quantity import count, cpu_milli, memory_mib
from gpufleet.state import FleetState, NodeInfo

# NVIDIA's minimum Linux driver for each CUDA release (CUDA toolkit release notes, table 3):
# the newest CUDA a driver major version supports.
DRIVER_TO_CUDA: tuple[tuple[int, int], ...] = (
    (580, 13000), (575, 12090), (570, 12080), (565, 12070), (560, 12060), (555, 12050),
    (550, 12040), (545, 12030), (535, 12020), (530, 12010), (525, 12000), (520, 11080),
    (515, 11070), (510, 11060), (495, 11050), (470, 11040), (465, 11030), (460, 11020),
    (455, 11010), (450, 11000),
)
DEFAULT_CUDA = 12040  # a node without any CUDA label is taken to be current (FleetState default)


def taint_string(key: str, value: str, effect: str) -> str:
    return f"{key}={value}:{effect}" if value else f"{key}:{effect}"


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """Everything ``FleetState.add_node`` needs for one Node."""

    name: str
    gpu_model: str
    num_gpus: int
    cpu_milli: int
    memory_mib: int
    gpu_memory_mib: int
    cuda_driver: int
    mig_gpus: tuple[int, ...]
    mig_compute_slices: int
    info: NodeInfo
    mig_resources: dict[str, int] = field(default_factory=dict)
    nvlink_domains: tuple[int, ...] = ()  # per GPU (-1: PCIe only); () = unknown (labels)

    def add_to(self, state: FleetState) -> int:
        return state.add_node(
            self.name, gpu_model=self.gpu_model, num_gpus=self.num_gpus,
            cpu_milli=self.cpu_milli, memory_mib=self.memory_mib,
            gpu_memory_mib=self.gpu_memory_mib, cuda_driver=self.cuda_driver,
            mig_gpus=self.mig_gpus, info=self.info, mig_compute_slices=self.mig_compute_slices,
            nvlink_domains=self.nvlink_domains or None,
        )


def _label(labels: Mapping[str, str], keys: tuple[str, ...]) -> str | None:
    for k in keys:
        if k in labels:
            return labels[k]
    return None


def cuda_of(labels: Mapping[str, str]) -> int:
    """The newest CUDA the node's driver supports, in CUDA's encoding (12.4 → 12040)."""
    major = _label(labels, names.CUDA_RUNTIME_MAJOR)
    if major is not None and major.isdigit():
        minor = _label(labels, names.CUDA_RUNTIME_MINOR) or "0"
        return int(major) * 1000 + (int(minor) * 10 if minor.isdigit() else 0)
    driver = _label(labels, names.CUDA_DRIVER_MAJOR)
    if driver is not None and driver.isdigit():
        d = int(driver)
        if d < 100:  # some clusters label the CUDA major here; take it as that
            return d * 1000
        for min_driver, cuda in DRIVER_TO_CUDA:
            if d >= min_driver:
                return cuda
        return 10000
    return DEFAULT_CUDA


def taints_of(node: Mapping[str, Any]) -> frozenset[str]:
    spec = node.get("spec") or {}
    out = {
        taint_string(t.get("key", ""), t.get("value", "") or "", t.get("effect", ""))
        for t in spec.get("taints") or ()
        if t.get("effect") in ("NoSchedule", "NoExecute")
    }
    if spec.get("unschedulable"):
        out.add(taint_string(names.UNSCHEDULABLE_TAINT_KEY, "", "NoSchedule"))
    return frozenset(out)


def node_spec(node: Mapping[str, Any], catalog: GpuCatalog | None = None) -> NodeSpec:
    cat = catalog or default_gpu_catalog()
    meta = node.get("metadata") or {}
    labels: dict[str, str] = dict(meta.get("labels") or {})
    status = node.get("status") or {}
    alloc = status.get("allocatable") or status.get("capacity") or {}
    whole = count(alloc.get(names.GPU_RESOURCE, 0))
    mig_res = {
        k[len(names.MIG_RESOURCE_PREFIX):]: count(v)
        for k, v in alloc.items()
        if k.startswith(names.MIG_RESOURCE_PREFIX) and count(v) > 0
    }
    product = labels.get(names.GPU_PRODUCT, "")
    model = cat.resolve(product) or product if product else ""
    physical = count(labels.get(names.GPU_COUNT, 0))
    n_mig = 0
    if mig_res:
        mig_cfg = labels.get(names.MIG_CONFIG, "")
        if mig_cfg.startswith("all-") and mig_cfg != "all-disabled" and physical:
            n_mig, whole = physical, 0
        else:
            n_mig = max(physical - whole, 1)
    num_gpus = whole + n_mig
    gpu_mem = count(labels.get(names.GPU_MEMORY, 0))
    if not gpu_mem and model in cat:
        gpu_mem = cat[model].memory_mib
    compute = 7
    if n_mig and model in cat and cat[model].mig is not None:
        compute = cat[model].mig.compute_slices  # type: ignore[union-attr]
    ctype = labels.get(names.CAPACITY_TYPE, "on-demand")
    info = NodeInfo(
        name=meta.get("name", ""),
        instance_type=labels.get(names.INSTANCE_TYPE, ""),
        zone=labels.get(names.ZONE, ""),
        capacity_type=CapacityType.SPOT if ctype == "spot" else CapacityType.ON_DEMAND,
        labels=labels,
        taints=taints_of(node),
    )
    return NodeSpec(
        name=info.name, gpu_model=model if num_gpus else "", num_gpus=num_gpus,
        cpu_milli=cpu_milli(alloc.get("cpu", 0)), memory_mib=memory_mib(alloc.get("memory", 0)),
        gpu_memory_mib=gpu_mem, cuda_driver=cuda_of(labels),
        mig_gpus=tuple(range(whole, num_gpus)), mig_compute_slices=compute, info=info,
        mig_resources=mig_res,
    )
