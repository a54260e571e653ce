"""A GPU node's ResourceSlices (``resource.k8s.io/v1``) as NVIDIA's DRA driver publishes them, and
back: the node's GPU inventory read from its slices.

With Dynamic Resource Allocation a node's devices are not Node labels but ResourceSlice objects
the node's DRA driver writes. NVIDIA's driver (``gpu.nvidia.com``, k8s-dra-driver-gpu) publishes
one pool per node, named after the node, and in it:

- ``gpu-<minor>`` per GPU, ``type: gpu``, with the attributes ``uuid``, ``minor``, ``index``,
  ``productName`` (the NVML name, ``NVIDIA A100-SXM4-40GB``), ``brand``, ``architecture``
  (``Ampere``), ``cudaComputeCapability``, ``driverVersion`` and ``cudaDriverVersion`` (semver
  versions), ``resource.kubernetes.io/pcieRoot`` (the standard attribute for PCIe-locality
  constraints) and capacity ``memory``;
- on a GPU in MIG mode, ``gpu-<minor>-mig-<profile>-<gi>-<start>`` per MIG device (``profile``
  with its dots dropped, as a device name must be a DNS label; ``gi`` the NVML GPU-instance
  profile id; ``start`` the first memory slice), ``type: mig``, with ``profile``, ``parentUUID``,
  the parent's ``minor``/``index`` and the GPU's common attributes, and capacity ``memory``.

Partitionable devices (KEP-4815, beta in 1.36): every GPU in MIG mode gets a shared counter set
``gpu-<minor>-counter-set`` holding its ``memory``, its ``compute-slices`` and one
``memory-slice-<i>`` counter per memory slice; each device on that GPU consumes what it occupies.
The API allows devices *or* counter sets in one slice, at most 8 counter sets per slice and 64
devices per slice when devices consume counters, so a node's pool is one or more counter slices
followed by device slices, ``pool.resourceSliceCount`` counting them all.

Two MIG modes, as on real nodes:

- a static mig-parted config (``all-balanced``, ``all-1g.5gb``): the MIG manager created the
  instances, the driver publishes exactly those (placed at valid start slices) and no whole-GPU
  device for that GPU (a GPU in MIG mode cannot be used whole);
- :data:`~gpufleet.k8s.translate.node_objects.DYNAMIC_MIG_CONFIG` (instances created at allocation,
  NVIDIA's dynamic MIG): the whole GPU *and* every MIG placement are published, all consuming the
  GPU's counters, so allocating a 3g.20gb leaves no room for the whole GPU and vice versa.

Shares: a GPU not in MIG mode is published with ``allowMultipleAllocations: true`` (consumable
capacity, KEP-5075, beta in 1.36), so a claim may take a share of it with a ``memory`` capacity
request; a claim without one consumes the whole ``memory`` and so the whole GPU. NVIDIA's driver
does not publish this yet (it shares through TimeSlicing/MPS configs on one claim); it is what
makes a fractional pod's GPU an allocation the API records.

NVLink: NVIDIA's slices carry no NVLink topology. gpufleet publishes
:data:`ATTR_NVLINK_DOMAIN` (``gpu.gpufleet.io/nvlinkDomain``, an int, the same on every GPU of one
NVLink island; absent = PCIe only) — a cluster operator sets it with a device-attribute patch or
a node-labelling job; the lab takes it from the instance catalog.

The inverse, :func:`inventory_from_slices`, gives the same :class:`GpuInventory` that
:func:`inventory_of_node_spec` projects from the label path (``nodes.node_spec``), so a node
described by slices and the same node described by GFD labels make the same FleetState row. A bad
slice (missing attribute, unknown product, a MIG profile the model does not have) is reported as
:class:`SliceProblem` data naming the slice, device and field; the devices that are fine still
count.
"""

from __future__ import annotations

import re
import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from gpufleet.catalog.gpus import GpuCatalog, GpuModel, MigProfile, default_gpu_catalog
from gpufleet.catalog.instances import InstanceCatalog, default_instance_catalog
from gpufleet.k8s.translate import names
from gpufleet.k8s.translate.node_objects import (
    DYNAMIC_MIG_CONFIG,
    GpuNodeSpec,
    driver_version_for_cuda,
    gfd_product,
    gpu_family,
    mig_layout,
)
from gpufleet.k8s.translate.nodes import NodeSpec
from gpufleet.k8s.translate.quantity import memory_mib

API_VERSION = "resource.k8s.io/v1"
DRIVER = "gpu.nvidia.com"
# gpufleet's node plugin (``gpufleet node-plugin``), the driver of shared-GPU pools: one shareable
# device per GPU with NVIDIA's attribute names, so its GPUs read as NVIDIA's do
GPUFLEET_DRIVER = "gpu.gpufleet.io"
GPU_DRIVERS = (DRIVER, GPUFLEET_DRIVER)
ATTR_NVLINK_DOMAIN = "gpu.gpufleet.io/nvlinkDomain"
ATTR_PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
GPU_CLASS = "gpu.nvidia.com"
MIG_CLASS = "mig.nvidia.com"
MAX_COUNTER_SETS_PER_SLICE = 8  # ResourceSliceSpec.sharedCounters
MAX_COUNTER_DEVICES_PER_SLICE = 64  # devices per slice when any consumes counters
_UUID_NS = uuid.uuid5(uuid.NAMESPACE_DNS, "gpufleet.io")  # fixed: the same UUIDs every run

# NVML GPU-instance profile ids (``nvidia-smi mig -lgip``) by (compute slices, memory slices):
# the same on A100/H100/H200; A30's 4-slice profiles use the 7-slice GPUs' ids for the shape.
_GI_PROFILE_ID = {(1, 1): 19, (1, 2): 15, (2, 2): 14, (3, 4): 9, (4, 4): 5, (7, 8): 0}
_ARCHITECTURE = {"ada-lovelace": "Ada Lovelace"}


def nvml_product_name(model: str, catalog: GpuCatalog | None = None) -> str:
    """The NVML product name (``NVIDIA A100-SXM4-40GB``): GFD's label with the vendor's dash a
    space again. Spaces back to dashes resolve through the catalog's GFD aliases."""
    gfd = gfd_product(model, catalog)
    for vendor in ("NVIDIA-", "Tesla-"):
        if gfd.startswith(vendor):
            return vendor[:-1] + " " + gfd[len(vendor):]
    return gfd


def mig_device_name(minor: int, profile: MigProfile, start: int) -> str:
    gi = _GI_PROFILE_ID.get((profile.compute, profile.memory_slices), profile.memory_slices)
    return f"gpu-{minor}-mig-{re.sub('[^a-z0-9]', '', profile.name.lower())}-{gi}-{start}"


def counter_set_name(minor: int) -> str:
    return f"gpu-{minor}-counter-set"


def _mib(mib: int) -> str:
    """A MiB amount in the API server's canonical binary form (40960 MiB → ``40Gi``), so what
    is published reads back unchanged."""
    for suffix, unit in (("Ti", 1 << 20), ("Gi", 1 << 10)):
        if mib % unit == 0 and mib:
            return f"{mib // unit}{suffix}"
    return f"{mib}Mi"


def _fake_uuid(prefix: str, *parts: object) -> str:
    return f"{prefix}-{uuid.uuid5(_UUID_NS, '/'.join(map(str, parts)))}"


def _version(cuda_or_cc: str) -> str:
    """``8.0`` / ``12.4`` → semver ``8.0.0`` (DRA version attributes are semver 2.0)."""
    parts = [*cuda_or_cc.split("."), "0", "0"][:3]
    return ".".join(str(int(p)) for p in parts)


def place_static_mig(model: GpuModel, layout: Mapping[str, int]) -> list[tuple[MigProfile, int]]:
    """Start slices for one GPU's MIG instances under a static config (largest first, a small
    backtracking search: ``all-balanced`` on an A100 needs the 3g.20gb at slice 4, not 0)."""
    assert model.mig is not None
    wanted = sorted(
        (model.mig.profiles[name] for name, n in layout.items() for _ in range(n)),
        key=lambda p: (-p.memory_slices, -p.compute, p.name),
    )

    def search(i: int, used: int, compute: int) -> list[tuple[MigProfile, int]] | None:
        if i == len(wanted):
            return []
        prof = wanted[i]
        if compute + prof.compute > model.mig.compute_slices:  # type: ignore[union-attr]
            return None
        for start in prof.starts:
            mask = prof.slice_mask(start)
            if used & mask:
                continue
            rest = search(i + 1, used | mask, compute + prof.compute)
            if rest is not None:
                return [(prof, start), *rest]
        return None

    placed = search(0, 0, 0)
    if placed is None:
        raise ValueError(f"MIG layout {dict(layout)} does not fit one {model.name}")
    return placed


def nvlink_domains_for(spec: GpuNodeSpec, instances: InstanceCatalog | None = None) -> list[int]:
    """Per GPU its NVLink island id (-1 = PCIe only), from the node's catalog instance type."""
    instances = instances or default_instance_catalog()
    if spec.instance_type and spec.instance_type in instances.types:
        doms = instances[spec.instance_type].nvlink_domain_of()
        if len(doms) == spec.gpus:
            return doms
    return [-1] * spec.gpus


def _counters(model: GpuModel, prof: MigProfile | None, start: int = 0) -> dict[str, Any]:
    """What a device consumes from its GPU's counter set (``prof`` None: the whole GPU)."""
    assert model.mig is not None
    if prof is None:
        mem, compute, slices = model.memory_mib, model.mig.compute_slices, range(
            model.mig.memory_slices
        )
    else:
        mem = model.memory_mib * prof.memory_slices // model.mig.memory_slices
        compute, slices = prof.compute, range(start, start + prof.memory_slices)
    out = {"memory": {"value": _mib(mem)}, "compute-slices": {"value": str(compute)}}
    out |= {f"memory-slice-{i}": {"value": "1"} for i in slices}
    return out


def resource_slices(
    spec: GpuNodeSpec,
    *,
    node_uid: str | None = None,
    nvlink_domains: Sequence[int] | None = None,
    catalog: GpuCatalog | None = None,
) -> list[dict[str, Any]]:
    """The ResourceSlices (plain dicts, ready for the API) NVIDIA's driver would publish for
    ``spec``'s node; ``[]`` for a CPU-only node. ``node_uid`` adds the owner reference to the
    Node (as the kubelet plugin's slices have), so the garbage collector deletes them with it."""
    catalog = catalog or default_gpu_catalog()
    if spec.gpu_model is None or spec.gpus <= 0:
        return []
    model = catalog[spec.gpu_model]
    doms = list(nvlink_domains) if nvlink_domains is not None else [-1] * spec.gpus
    if len(doms) != spec.gpus:
        raise ValueError(f"{spec.name}: {len(doms)} NVLink domain ids for {spec.gpus} GPUs")
    mig_cfg = spec.mig_config if spec.mig_config not in (None, "", "all-disabled") else None
    layout = mig_layout(model, mig_cfg) if mig_cfg else {}
    dynamic = mig_cfg == DYNAMIC_MIG_CONFIG
    cuda_major, cuda_minor = divmod(spec.cuda_version, 1000)
    common = {
        "productName": {"string": nvml_product_name(model.name, catalog)},
        "brand": {"string": "Nvidia"},
        "architecture": {
            "string": _ARCHITECTURE.get(
                gpu_family(model.compute_capability),
                gpu_family(model.compute_capability).capitalize(),
            )
        },
        "cudaComputeCapability": {"version": _version(model.compute_capability)},
        "driverVersion": {"version": _version(driver_version_for_cuda(spec.cuda_version))},
        "cudaDriverVersion": {"version": f"{cuda_major}.{cuda_minor // 10}.0"},
    }
    devices: list[dict[str, Any]] = []
    counter_sets: list[dict[str, Any]] = []
    for minor in range(spec.gpus):
        gpu_uuid = _fake_uuid("GPU", spec.name, minor)
        attrs = {
            "type": {"string": "gpu"},
            "uuid": {"string": gpu_uuid},
            "minor": {"int": minor},
            "index": {"int": minor},
            **common,
            # two GPUs per PCIe switch, as on the 8-GPU boards
            ATTR_PCIE_ROOT: {"string": f"pci0000:{minor // 2:02x}"},
        }
        if doms[minor] >= 0:
            attrs[ATTR_NVLINK_DOMAIN] = {"int": doms[minor]}
        whole: dict[str, Any] = {
            "name": f"gpu-{minor}",
            "attributes": attrs,
            "capacity": {"memory": {"value": _mib(model.memory_mib)}},
        }
        if not layout:
            # shares (consumable capacity): every allocation consumes some of ``memory``; one
            # without a capacity request consumes all of it, so a whole GPU stays exclusive
            whole["allowMultipleAllocations"] = True
            devices.append(whole)
            continue
        assert model.mig is not None
        cset = counter_set_name(minor)
        counter_sets.append({"name": cset, "counters": _counters(model, None)})
        if dynamic:
            whole["consumesCounters"] = [{"counterSet": cset, "counters": _counters(model, None)}]
            devices.append(whole)
            placements = [
                (model.mig.profiles[name], start)
                for name in layout
                for start in model.mig.profiles[name].starts
            ]
        else:
            placements = place_static_mig(model, layout)
        for prof, start in placements:
            mem = model.memory_mib * prof.memory_slices // model.mig.memory_slices
            name = mig_device_name(minor, prof, start)
            mig_attrs = {
                **attrs,
                "type": {"string": "mig"},
                "uuid": {"string": _fake_uuid("MIG", spec.name, name)},
                "parentUUID": {"string": gpu_uuid},
                "profile": {"string": prof.name},
            }
            devices.append({
                "name": name,
                "attributes": mig_attrs,
                "capacity": {"memory": {"value": _mib(mem)}},
                "consumesCounters": [
                    {"counterSet": cset, "counters": _counters(model, prof, start)}
                ],
            })
    per_slice = MAX_COUNTER_DEVICES_PER_SLICE if counter_sets else 128
    chunks: list[dict[str, Any]] = [
        {"sharedCounters": counter_sets[i : i + MAX_COUNTER_SETS_PER_SLICE]}
        for i in range(0, len(counter_sets), MAX_COUNTER_SETS_PER_SLICE)
    ] + [{"devices": devices[i : i + per_slice]} for i in range(0, len(devices), per_slice)]
    meta_base: dict[str, Any] = {}
    if node_uid:
        meta_base["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Node", "name": spec.name, "uid": node_uid,
             "controller": True}
        ]
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "ResourceSlice",
            "metadata": {"name": f"{spec.name}-{DRIVER}-{i}", **meta_base},
            "spec": {
                "driver": DRIVER,
                "nodeName": spec.name,
                "pool": {"name": spec.name, "generation": 1, "resourceSliceCount": len(chunks)},
                **chunk,
            },
        }
        for i, chunk in enumerate(chunks)
    ]


EXTENDED_GPU = names.GPU_RESOURCE


def mig_class_name(profile: str) -> str:
    return f"mig-{profile}.{DRIVER}"


def device_classes(catalog: GpuCatalog | None = None) -> list[dict[str, Any]]:
    """The DeviceClasses NVIDIA's chart installs for GPUs (``gpu.nvidia.com`` whole GPUs,
    ``mig.nvidia.com`` MIG devices: CEL on the driver and the ``type`` attribute), plus the
    extended-resource mapping (KEP-5004, beta in 1.36) that lets unchanged pods asking
    ``nvidia.com/gpu`` or ``nvidia.com/mig-<profile>`` get their devices through DRA on nodes
    without a device plugin: ``extendedResourceName`` on ``gpu.nvidia.com``, and one class per
    MIG profile of the catalog's GPUs (``mig-<profile>.gpu.nvidia.com``, selecting the
    profile). The chart's ComputeDomain and VFIO classes are left out: nothing here publishes
    those devices."""
    catalog = catalog or default_gpu_catalog()

    def cls(name: str, terms: list[str], extended: str | None) -> dict[str, Any]:
        spec: dict[str, Any] = {"selectors": [{"cel": {"expression": " && ".join(
            [f"device.driver == '{DRIVER}'", *terms])}}]}
        if extended:
            spec["extendedResourceName"] = extended
        return {"apiVersion": API_VERSION, "kind": "DeviceClass", "metadata": {"name": name},
                "spec": spec}

    def attr(name: str, value: str) -> str:
        return f"device.attributes['{DRIVER}'].{name} == '{value}'"

    out = [cls(GPU_CLASS, [attr("type", "gpu")], EXTENDED_GPU),
           cls(MIG_CLASS, [attr("type", "mig")], None)]
    profiles = sorted({p for m in catalog.models.values() if m.mig is not None
                       for p in m.mig.profiles})
    out += [cls(mig_class_name(p), [attr("type", "mig"), attr("profile", p)],
                f"nvidia.com/mig-{p}") for p in profiles]
    return out


# --- the inverse: slices → inventory --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GpuInventory:
    """A node's GPUs as a FleetState row needs them (the GPU fields of ``nodes.NodeSpec``)."""

    gpu_model: str
    num_gpus: int
    gpu_memory_mib: int
    cuda_driver: int
    mig_gpus: tuple[int, ...]
    mig_compute_slices: int
    mig_resources: dict[str, int] = field(default_factory=dict)
    nvlink_domains: tuple[int, ...] = ()  # per GPU, -1 = PCIe only; () = not published

    def apply_to(self, spec: NodeSpec) -> NodeSpec:
        """``spec`` (from the Node object) with its GPU fields taken from this inventory."""
        return replace(
            spec, gpu_model=self.gpu_model, num_gpus=self.num_gpus,
            gpu_memory_mib=self.gpu_memory_mib, cuda_driver=self.cuda_driver,
            mig_gpus=self.mig_gpus, mig_compute_slices=self.mig_compute_slices,
            mig_resources=dict(self.mig_resources), nvlink_domains=self.nvlink_domains,
        )


@dataclass(frozen=True, slots=True)
class SliceProblem:
    """One thing wrong in a published slice: where, and what."""

    slice: str
    device: str
    field: str
    message: str

    def __str__(self) -> str:
        where = f"ResourceSlice {self.slice}" + (f" device {self.device}" if self.device else "")
        return f"{where}: {self.field}: {self.message}"


@dataclass(frozen=True, slots=True)
class SliceInventory:
    inventory: GpuInventory | None  # None: no usable GPU device on the node
    problems: tuple[SliceProblem, ...]
    driver: str = DRIVER  # the GPU driver whose devices these are


def inventory_of_node_spec(spec: NodeSpec) -> GpuInventory:
    """The label path's inventory (``nodes.node_spec``), for comparing with the slices'."""
    return GpuInventory(
        gpu_model=spec.gpu_model, num_gpus=spec.num_gpus, gpu_memory_mib=spec.gpu_memory_mib,
        cuda_driver=spec.cuda_driver, mig_gpus=spec.mig_gpus,
        mig_compute_slices=spec.mig_compute_slices, mig_resources=dict(spec.mig_resources),
    )


def device_attribute(device: Mapping[str, Any], name: str, driver: str = DRIVER) -> Any:
    """An attribute's value whether published bare (``productName``) or qualified with the
    driver's domain (``gpu.nvidia.com/productName``, the same attribute to the API); a
    qualified ``name`` in the driver's own domain also finds it bare. Also read by
    :mod:`.claim_devices`."""
    attrs = device.get("attributes")
    domain, sep, ident = name.rpartition("/")
    if sep:
        raw = _get(attrs, name) or (_get(attrs, ident) if domain == driver else None)
    else:
        raw = _get(attrs, name) or _get(attrs, f"{driver}/{name}")
    if not isinstance(raw, Mapping):
        return None
    for kind in ("string", "int", "bool", "version"):
        if kind in raw:
            return raw[kind]
    return None


_attr = device_attribute


def _get(obj: Any, key: str) -> Any:
    """``obj[key]`` when ``obj`` is an object, else None (slices come from outside)."""
    return obj.get(key) if isinstance(obj, Mapping) else None


def _items(obj: Any) -> list[Any]:
    return list(obj) if isinstance(obj, list | tuple) else []


def _generation(pool: Any) -> int:
    try:
        return int((pool or {}).get("generation") or 0)
    except (TypeError, ValueError, AttributeError):
        return 0


def _cuda_of(version: Any) -> int | None:
    m = re.fullmatch(r"(\d+)\.(\d+)(?:\.\d+)?", str(version or ""))
    return int(m.group(1)) * 1000 + int(m.group(2)) * 10 if m else None


def inventory_from_slices(
    slices: Iterable[Mapping[str, Any]], catalog: GpuCatalog | None = None
) -> SliceInventory:
    """One node's GPU inventory from its GPU driver's slices (other drivers' are ignored):
    NVIDIA's ``gpu.nvidia.com``, or gpufleet's node plugin ``gpu.gpufleet.io`` on a shared-GPU
    node. A node's GPUs are one driver's: where both publish, NVIDIA's count and the other
    driver's slices are reported as a problem (two drivers must not run on the same GPUs).

    GPUs are the distinct ``minor`` numbers of ``type: gpu`` devices and of MIG devices'
    parents; a GPU with MIG devices is a MIG GPU; ``mig_resources`` counts MIG devices per
    profile (as the device plugin's ``nvidia.com/mig-<profile>`` resources count them). A slice
    of an older pool generation than the newest seen is skipped, as the scheduler does."""
    catalog = catalog or default_gpu_catalog()
    problems: list[SliceProblem] = []
    gpu_slices = [
        s for s in slices
        if isinstance(s, Mapping) and isinstance(s.get("spec"), Mapping)
        and s["spec"].get("driver") in GPU_DRIVERS
    ]
    drivers = {str(s["spec"]["driver"]) for s in gpu_slices}
    driver = DRIVER if DRIVER in drivers or not drivers else GPUFLEET_DRIVER
    mine = [s for s in gpu_slices if s["spec"]["driver"] == driver]
    for s in gpu_slices:
        if s["spec"]["driver"] != driver:
            problems.append(SliceProblem(
                str(_get(s.get("metadata"), "name") or "?"), "", "spec.driver",
                f"{s['spec']['driver']} publishes GPUs on a node whose GPUs {driver} publishes "
                "(run one GPU driver per node); its devices are not counted"))
    _attr = partial(device_attribute, driver=driver)
    newest: dict[str, int] = {}
    for s in mine:
        pool = _get(s["spec"], "pool")
        newest[str(_get(pool, "name"))] = max(newest.get(str(_get(pool, "name")), 0),
                                           _generation(pool))
    models: dict[str, tuple[str, str]] = {}  # canonical model -> (slice, device) first seen
    minors: set[int] = set()
    mig_minors: set[int] = set()
    mig_counts: dict[str, int] = defaultdict(int)
    memory = 0
    counter_memory = 0
    counter_compute = 0
    cudas: list[int] = []
    nvlink: dict[int, int] = {}
    for s in mine:
        sname = str(_get(s.get("metadata"), "name") or "?")
        spec = s["spec"]
        pool = _get(spec, "pool")
        if _generation(pool) < newest.get(str(_get(pool, "name")), 0):
            continue
        for cs in _items(spec.get("sharedCounters")):
            if not isinstance(cs, Mapping) or not isinstance(cs.get("counters"), Mapping):
                problems.append(SliceProblem(sname, "", "sharedCounters", "not a counter set"))
                continue
            counters = cs["counters"]
            if "memory" in counters and not counter_memory:
                counter_memory = memory_mib(_get(counters["memory"], "value"))
            if "compute-slices" in counters and not counter_compute:
                try:
                    counter_compute = int(_get(counters["compute-slices"], "value"))
                except (TypeError, ValueError):
                    problems.append(SliceProblem(sname, "", f"sharedCounters[{cs.get('name')}]"
                                                 ".compute-slices", "not an integer"))
        for i, dev in enumerate(_items(spec.get("devices"))):
            if not isinstance(dev, Mapping):
                problems.append(SliceProblem(sname, f"#{i}", "devices", "not an object"))
                continue
            dname = str(dev.get("name", f"#{i}"))
            kind = _attr(dev, "type")
            if kind not in ("gpu", "mig"):
                problems.append(SliceProblem(sname, dname, "attributes.type",
                                             f"expected 'gpu' or 'mig', got {kind!r}"))
                continue
            missing = [a for a in ("productName", "minor", "uuid", "cudaDriverVersion")
                       if _attr(dev, a) is None]
            if kind == "mig":
                missing += [a for a in ("profile", "parentUUID") if _attr(dev, a) is None]
            if missing:
                for a in missing:
                    problems.append(SliceProblem(sname, dname, f"attributes.{a}", "missing"))
                continue
            product = str(_attr(dev, "productName"))
            model = catalog.resolve(product.replace(" ", "-")) or catalog.resolve(product)
            if model is None:
                problems.append(SliceProblem(sname, dname, "attributes.productName",
                                             f"unknown GPU product {product!r}"))
                continue
            if not isinstance(_attr(dev, "minor"), int) or _attr(dev, "minor") < 0:
                problems.append(SliceProblem(sname, dname, "attributes.minor",
                                             f"expected an int >= 0, got {_attr(dev, 'minor')!r}"))
                continue
            cuda = _cuda_of(_attr(dev, "cudaDriverVersion"))
            if cuda is None:
                problems.append(SliceProblem(
                    sname, dname, "attributes.cudaDriverVersion",
                    f"expected a version like 12.4.0, got {_attr(dev, 'cudaDriverVersion')!r}"))
                continue
            if models and model not in models:
                first = next(iter(models))
                problems.append(SliceProblem(
                    sname, dname, "attributes.productName",
                    f"{model} on a node whose GPUs are {first} (device {models[first][1]})"))
                continue
            if kind == "mig":
                prof = str(_attr(dev, "profile"))
                if catalog.mig_profile(model, prof) is None:
                    problems.append(SliceProblem(sname, dname, "attributes.profile",
                                                 f"{model} has no MIG profile {prof!r}"))
                    continue
            models.setdefault(model, (sname, dname))
            minor = int(_attr(dev, "minor"))
            minors.add(minor)
            cudas.append(cuda)
            dom = _attr(dev, ATTR_NVLINK_DOMAIN)
            if isinstance(dom, int):
                nvlink[minor] = dom
            if kind == "mig":
                mig_minors.add(minor)
                mig_counts[str(_attr(dev, "profile"))] += 1
            elif not memory:
                memory = memory_mib(_get(_get(dev.get("capacity"), "memory"), "value"))
    if not minors:
        return SliceInventory(None, tuple(problems), driver)
    model = next(iter(models))
    gm = catalog[model]
    # Minors are the driver's numbering; the FleetState row indexes GPUs 0..n-1 in minor order.
    order = {m: i for i, m in enumerate(sorted(minors))}
    compute = 7
    if mig_minors:
        compute = counter_compute or (gm.mig.compute_slices if gm.mig is not None else 7)
    inv = GpuInventory(
        gpu_model=model,
        num_gpus=len(minors),
        gpu_memory_mib=memory or counter_memory or gm.memory_mib,
        cuda_driver=min(cudas),
        mig_gpus=tuple(sorted(order[m] for m in mig_minors)),
        mig_compute_slices=compute,
        mig_resources=dict(mig_counts),
        nvlink_domains=tuple(nvlink.get(m, -1) for m in sorted(minors)) if nvlink else (),
    )
    return SliceInventory(inv, tuple(problems), driver)
