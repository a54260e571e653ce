"""Each node's GPU devices, named, against the FleetState row's GPU indices.

A node's GPUs are published by NVIDIA's DRA driver (``gpu.nvidia.com``) or, on a shared-GPU
node, by gpufleet's node plugin (``gpu.gpufleet.io``); each :class:`Device` keeps its driver,
and a device with a NoSchedule or NoExecute taint (:func:`blocking_taint`) is marked so that
placement books it as taken.

The row of a node with slices is built from :func:`~.slices.inventory_from_slices`
(GPUs indexed 0..n-1 in ``minor`` order); placement answers in those indices (``Bind.gpus``, a
``MigSlot``'s GPU and start slice). Writing a claim's allocation needs the way back — index →
``gpu-<minor>`` in pool ``<node>`` — and reading another scheduler's allocation needs the way
there (device name → index, MIG profile and start). :class:`NodeDevices` holds both for one node.

Each device keeps its slice entry as published, the input of the claims' CEL selectors
(:mod:`gpufleet.k8s.dra.cel`; converted once per device, :meth:`NodeDevices.cel_input`).

A MIG device's start slice is the last part of its name (``gpu-0-mig-3g20gb-9-4`` → 4), as
NVIDIA's driver names them; its GPU is its ``minor`` attribute (the parent's).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from gpufleet.catalog.gpus import GpuCatalog, default_gpu_catalog
from gpufleet.k8s.dra.cel import DeviceInput
from gpufleet.k8s.dra.slices import (
    DRIVER,
    GPU_DRIVERS,
    GpuInventory,
    SliceProblem,
    device_attribute,
    inventory_from_slices,
)
from gpufleet.k8s.translate.quantity import memory_mib

_START = re.compile(r"-(\d+)$")


@dataclass(frozen=True, slots=True)
class Device:
    """One published device: where it is (pool, name) and what it is to the row."""

    pool: str
    name: str
    gpu: int  # the row's GPU index
    profile: str | None  # MIG profile; None: the whole GPU
    start: int  # MIG start slice (0 for a whole GPU)
    memory_mib: int
    shareable: bool  # allowMultipleAllocations: shares (consumable capacity) may be allocated
    # the slice's entry as published, what CEL selectors are evaluated against
    raw: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)
    driver: str = DRIVER  # NVIDIA's, or gpufleet's node plugin on a shared-GPU node
    # not allocatable: a NoSchedule or NoExecute taint (DRADeviceTaints); placement books the
    # device as taken (gpufleet does not read requests' tolerations)
    tainted: str | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        """(driver, pool, device): how an allocation result names it."""
        return (self.driver, self.pool, self.name)


@dataclass(slots=True)
class NodeDevices:
    node: str
    inventory: GpuInventory
    by_name: dict[tuple[str, str], Device] = field(default_factory=dict)  # (pool, device)
    whole: dict[int, Device] = field(default_factory=dict)  # GPU index → its whole device
    mig: dict[tuple[int, str, int], Device] = field(default_factory=dict)  # (gpu, profile, start)
    driver: str = DRIVER  # whose devices these are
    tainted: list[Device] = field(default_factory=list)  # those with a blocking taint
    # (pool, device) → the device as CEL's ``device`` variable, built when first evaluated
    cel_inputs: dict[tuple[str, str], DeviceInput] = field(default_factory=dict)

    def cel_input(self, dev: Device) -> DeviceInput:
        got = self.cel_inputs.get((dev.pool, dev.name))
        if got is None:
            got = DeviceInput(dev.raw or {"name": dev.name}, dev.driver)
            self.cel_inputs[(dev.pool, dev.name)] = got
        return got

    @property
    def static_mig(self) -> bool:
        """MIG instances fixed by a static mig-parted config: a MIG GPU without its whole
        device published (dynamic MIG publishes the whole GPU and every placement). Placement
        may pick a start slice such a config did not create, so gpufleet allocates no MIG
        device here (other schedulers' allocations are still counted)."""
        return any(g not in self.whole for g in self.inventory.mig_gpus)


# the taint effects that keep a scheduler from allocating a device (``None`` only informs)
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


def blocking_taint(device: Mapping[str, Any]) -> str | None:
    """The first taint on a published device that keeps it from being allocated, as text
    (``gpu.gpufleet.io/unhealthy=xid-79:NoExecute``); None: the device is allocatable.

    kube-scheduler's allocator skips a tainted device unless the request tolerates the taint;
    gpufleet does not read tolerations, so a tainted device is never given out by gpufleet (an
    allocation another scheduler made on it is still booked)."""
    for t in device.get("taints") or ():
        if isinstance(t, Mapping) and t.get("effect") in BLOCKING_EFFECTS:
            value = f"={t['value']}" if t.get("value") else ""
            return f"{t.get('key')}{value}:{t['effect']}"
    return None


def _node_devices(node: str, slices: list[Mapping[str, Any]], cat: GpuCatalog,
                  problems: list[SliceProblem]) -> NodeDevices | None:
    got = inventory_from_slices(slices, cat)
    problems.extend(got.problems)
    if got.inventory is None:
        return None
    driver = got.driver
    attr = partial(device_attribute, driver=driver)
    minors: set[int] = set()
    devs: list[tuple[str, Mapping[str, Any]]] = []
    for s in slices:
        spec = s["spec"]
        if spec.get("driver") != driver:
            continue
        pool = str((spec.get("pool") or {}).get("name") or node)
        for d in spec.get("devices") or ():
            if isinstance(d, Mapping) and isinstance(attr(d, "minor"), int):
                minors.add(int(attr(d, "minor")))
                devs.append((pool, d))
    order = {m: i for i, m in enumerate(sorted(minors))}
    out = NodeDevices(node, got.inventory, driver=driver)
    for pool, d in devs:
        kind, name = attr(d, "type"), str(d.get("name"))
        mem = memory_mib(((d.get("capacity") or {}).get("memory") or {}).get("value"))
        gpu = order[int(attr(d, "minor"))]
        shareable = bool(d.get("allowMultipleAllocations"))
        tainted = blocking_taint(d)
        if kind == "gpu":
            dev = Device(pool, name, gpu, None, 0, mem, shareable, d, driver, tainted)
            out.whole[gpu] = dev
        elif kind == "mig" and (m := _START.search(name)) is not None:
            prof = str(attr(d, "profile"))
            dev = Device(pool, name, gpu, prof, int(m.group(1)), mem, False, d, driver, tainted)
            out.mig[(gpu, str(dev.profile), dev.start)] = dev
        else:
            continue
        out.by_name[(pool, name)] = dev
        if tainted is not None:
            out.tainted.append(dev)
    return out


def devices_by_node(
    slices: Iterable[Mapping[str, Any]], catalog: GpuCatalog | None = None
) -> tuple[dict[str, NodeDevices], list[SliceProblem]]:
    """Every node's GPU devices, NVIDIA's or gpufleet's node plugin's (nodes whose slices hold
    no usable GPU are left out: they keep the label path), and what was wrong in the slices."""
    cat = catalog or default_gpu_catalog()
    per_node: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for s in slices:
        spec = s.get("spec") if isinstance(s, Mapping) else None
        if isinstance(spec, Mapping) and spec.get("driver") in GPU_DRIVERS \
                and spec.get("nodeName"):
            per_node[str(spec["nodeName"])].append(s)
    problems: list[SliceProblem] = []
    out = {}
    for node, mine in per_node.items():
        got = _node_devices(node, mine, cat, problems)
        if got is not None:
            out[node] = got
    return out, problems
