"""Devices given out by ResourceClaims, judged against the ResourceSlices that publish them.

The API server validates a claim's ``status.allocation`` only for shape: it never looks a device
up in a slice, never counts how often a device is allocated, and never sums shares or counters
(docs: "double-booking prevention is the scheduler's job"). Any scheduler that allocates claims —
gpufleet, kube-scheduler, both at once — can therefore double-book without the cluster noticing
until a kubelet plugin fails to prepare. This module reads what the cluster shows (claims and
slices as the API's JSON) and reports, per device, what the DRA rules forbid:

* ``missing`` — an allocated device that no slice of the newest pool generation publishes;
* ``exclusive`` — a device without ``allowMultipleAllocations`` in more than one allocation
  result (two claims, or one claim twice);
* ``capacity`` — the ``consumedCapacity`` of a shared device's allocations sums above one of the
  device's capacities (a result without ``consumedCapacity`` takes all of it);
* ``counters`` — the devices allocated from one pool consume more of a shared counter set
  (``sharedCounters`` / ``consumesCounters``, KEP-4815) than the set holds; a shared device
  consumes its counters once however many shares it carries.

It also turns each allocation of a ``gpu.nvidia.com`` device into a use of one physical GPU
(:class:`GpuClaimUse`: node, GPU index as the node's FleetState row numbers them — the ``minor``
order of :func:`~gpufleet.k8s.dra.slices.inventory_from_slices` — a milli share, a MIG memory-slice
mask), so :mod:`gpufleet.k8s.translate.overcommit` judges claims and gpufleet's annotation
assignments (``gpufleet.io/gpus`` …) by one rule per GPU: a whole GPU and a MIG slice of it both
given out, or an annotation pod on a GPU a claim holds.

Pure (dicts in, findings out).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from typing import Any

from gpufleet.catalog.gpus import GpuCatalog, default_gpu_catalog
from gpufleet.k8s.dra.slices import GPU_DRIVERS, device_attribute
from gpufleet.k8s.translate.node_selector import matches_node_selector
from gpufleet.k8s.translate.pods import TERMINAL_PHASES, pod_key
from gpufleet.k8s.translate.quantity import quantity
from gpufleet.state import GPU_MILLI

DeviceKey = tuple[str, str, str]  # driver, pool, device
_MIG_NAME = re.compile(r"^gpu-\d+-mig-[a-z0-9]+-\d+-(\d+)$")  # ...-<gi profile>-<start slice>
_MEMORY_SLICE = re.compile(r"^memory-slice-(\d+)$")


@dataclass(frozen=True, slots=True)
class DeviceFinding:
    """One device (or counter set) given out beyond what the slices publish."""

    node: str  # the slice's node; the pool's name for a device not local to one node
    key: DeviceKey  # for ``counters``: (driver, pool, counter set)
    kind: str  # missing | exclusive | capacity | counters
    claims: tuple[str, ...]
    detail: str
    gpu: int | None = None  # the GPU index on ``node`` for a gpu.nvidia.com device


@dataclass(frozen=True, slots=True)
class GpuClaimUse:
    """What one allocation result takes of one physical GPU (a ``gpu.nvidia.com`` device)."""

    claim: str
    pods: frozenset[str]  # the pods it is reserved for (``ns/name``)
    milli: Fraction  # share of the GPU; 1000 = whole; 0 for a MIG device
    mig_mask: int = 0  # memory slices a MIG device occupies
    mig: str = ""  # the MIG device's name


@dataclass(frozen=True, slots=True)
class _Published:
    node: str
    multi: bool
    capacity: dict[str, Decimal]
    consumes: tuple[tuple[str, dict[str, Decimal]], ...]
    raw: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Allocation:
    """One ``status.allocation.devices.results`` entry of an allocated claim."""

    claim: str  # ns/name
    key: DeviceKey
    request: str
    share_id: str | None
    consumed: dict[str, Decimal]
    pods: frozenset[str]


@dataclass(slots=True)
class ClaimDevices:
    """Claims' allocations judged against the slices (:func:`judge_claims`)."""

    findings: list[DeviceFinding] = field(default_factory=list)
    # node -> GPU index -> uses of that GPU by claims
    gpu_uses: dict[str, dict[int, list[GpuClaimUse]]] = field(default_factory=dict)


def _items(obj: Any) -> list[Any]:
    return list(obj) if isinstance(obj, list | tuple) else []


def _amounts(obj: Any, nested: bool = True) -> dict[str, Decimal]:
    """``{name: {value: q}}`` (capacity, counters) or ``{name: q}`` (consumedCapacity) → Decimals;
    an amount that does not parse is left out (the API server would have refused it)."""
    out: dict[str, Decimal] = {}
    for name, raw in (obj or {}).items() if isinstance(obj, Mapping) else ():
        q = quantity(raw.get("value") if nested and isinstance(raw, Mapping) else raw)
        if q is not None:
            out[str(name)] = q
    return out


def _newest_slices(slices: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The slices of each pool's newest generation (older ones are being replaced)."""
    good = [s for s in slices if isinstance(s, Mapping) and isinstance(s.get("spec"), Mapping)]
    newest: dict[tuple[str, str], int] = {}

    def gen(s: Mapping[str, Any]) -> tuple[tuple[str, str], int]:
        pool = s["spec"].get("pool") or {}
        try:
            g = int(pool.get("generation") or 0)
        except (TypeError, ValueError):
            g = 0
        return (str(s["spec"].get("driver")), str(pool.get("name"))), g

    for s in good:
        k, g = gen(s)
        newest[k] = max(newest.get(k, g), g)
    return [s for s in good if gen(s)[1] == newest[gen(s)[0]]]


def _published(slices: Iterable[Mapping[str, Any]]) -> tuple[
        dict[DeviceKey, _Published], dict[DeviceKey, dict[str, Decimal]]]:
    devices: dict[DeviceKey, _Published] = {}
    counter_sets: dict[DeviceKey, dict[str, Decimal]] = {}
    for s in _newest_slices(slices):
        spec = s["spec"]
        driver, pool = str(spec.get("driver")), str((spec.get("pool") or {}).get("name"))
        node = str(spec.get("nodeName") or pool)
        for cs in _items(spec.get("sharedCounters")):
            if isinstance(cs, Mapping):
                counter_sets[(driver, pool, str(cs.get("name")))] = _amounts(cs.get("counters"))
        for dev in _items(spec.get("devices")):
            if not isinstance(dev, Mapping):
                continue
            consumes = tuple(
                (str(c.get("counterSet")), _amounts(c.get("counters")))
                for c in _items(dev.get("consumesCounters")) if isinstance(c, Mapping)
            )
            devices[(driver, pool, str(dev.get("name")))] = _Published(
                node, bool(dev.get("allowMultipleAllocations")), _amounts(dev.get("capacity")),
                consumes, dev)
    return devices, counter_sets


def claim_key(claim: Mapping[str, Any]) -> str:
    meta = claim.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def allocations(claims: Iterable[Mapping[str, Any]]) -> list[Allocation]:
    """Every allocation result of every allocated claim (a claim being deleted still holds its
    devices until the controller-manager deallocates it)."""
    out: list[Allocation] = []
    for c in claims:
        status = c.get("status") or {}
        alloc = status.get("allocation") or {}
        ns = (c.get("metadata") or {}).get("namespace", "")
        pods = frozenset(
            f"{ns}/{r.get('name')}" for r in _items(status.get("reservedFor"))
            if isinstance(r, Mapping) and r.get("resource") == "pods")
        for r in _items((alloc.get("devices") or {}).get("results")):
            if not isinstance(r, Mapping):
                continue
            out.append(Allocation(
                claim_key(c), (str(r.get("driver")), str(r.get("pool")), str(r.get("device"))),
                str(r.get("request", "")), r.get("shareID"),
                _amounts(r.get("consumedCapacity"), nested=False), pods))
    return out


def _fmt(q: Decimal) -> str:
    """A quantity as a person writes it: bytes in Gi/Mi when whole, else the plain number."""
    for suffix, unit in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20)):
        if q >= unit and q % unit == 0:
            return f"{q // unit}{suffix}"
    return f"{q.normalize():f}"


def _gpu_indices(devices: Mapping[DeviceKey, _Published]) -> dict[tuple[str, int], int]:
    """(node, minor) → the GPU's index on its node: minors in order, as the node's FleetState
    row numbers its GPUs."""
    minors: dict[str, set[int]] = defaultdict(set)
    for (driver, _, _), pub in devices.items():
        m = device_attribute(pub.raw, "minor", driver)
        if driver in GPU_DRIVERS and isinstance(m, int):
            minors[pub.node].add(m)
    return {(node, m): i for node, ms in minors.items() for i, m in enumerate(sorted(ms))}


def _mig_mask(name: str, pub: _Published, catalog: GpuCatalog) -> int:
    """The memory slices a MIG device occupies: its ``memory-slice-<i>`` counters, else its
    profile placed at the start slice NVIDIA's device name ends with."""
    mask = 0
    for _, counters in pub.consumes:
        for cname in counters:
            m = _MEMORY_SLICE.match(cname)
            if m:
                mask |= 1 << int(m.group(1))
    if mask:
        return mask
    start = _MIG_NAME.match(name)
    product = str(device_attribute(pub.raw, "productName") or "")
    model = catalog.resolve(product.replace(" ", "-")) or catalog.resolve(product)
    prof = catalog.mig_profile(model, str(device_attribute(pub.raw, "profile"))) if model else None
    if start is None or prof is None or int(start.group(1)) not in prof.starts:
        return 0
    return prof.slice_mask(int(start.group(1)))


def _gpu_use(a: Allocation, pub: _Published, catalog: GpuCatalog) -> GpuClaimUse:
    if device_attribute(pub.raw, "type") == "mig":
        return GpuClaimUse(a.claim, a.pods, Fraction(0), _mig_mask(a.key[2], pub, catalog),
                           a.key[2])
    milli = Fraction(GPU_MILLI)
    mem, used = pub.capacity.get("memory"), a.consumed.get("memory")
    if pub.multi and mem and used is not None:
        milli = Fraction(used) / Fraction(mem) * GPU_MILLI
    return GpuClaimUse(a.claim, a.pods, milli)


def judge_claims(claims: Iterable[Mapping[str, Any]], slices: Iterable[Mapping[str, Any]],
                 catalog: GpuCatalog | None = None) -> ClaimDevices:
    """Device-level findings over every allocated claim, and each GPU's uses by claims."""
    catalog = catalog or default_gpu_catalog()
    devices, counter_sets = _published(slices)
    index = _gpu_indices(devices)
    out = ClaimDevices()
    by_device: dict[DeviceKey, list[Allocation]] = defaultdict(list)
    for a in allocations(claims):
        by_device[a.key].append(a)

    def gpu_of(key: DeviceKey) -> int | None:
        pub = devices.get(key)
        m = device_attribute(pub.raw, "minor", key[0]) if pub else None
        return index.get((pub.node, m)) if pub and isinstance(m, int) else None

    def finding(key: DeviceKey, kind: str, allocs: Iterable[Allocation], detail: str) -> None:
        node = devices[key].node if key in devices else key[1]
        out.findings.append(DeviceFinding(node, key, kind, tuple(sorted({a.claim for a in allocs})),
                                          detail, gpu_of(key)))

    used_counters: dict[DeviceKey, dict[str, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    users: dict[DeviceKey, set[str]] = defaultdict(set)
    where: dict[DeviceKey, tuple[str, int | None]] = {}  # counter set -> node, GPU index
    for key, allocs in sorted(by_device.items()):
        pub = devices.get(key)
        if pub is None:
            finding(key, "missing", allocs,
                    f"device {key[2]} of pool {key[1]} (driver {key[0]}) is in no ResourceSlice")
            continue
        if not pub.multi and len(allocs) > 1:
            finding(key, "exclusive", allocs,
                    f"device {key[2]} is not shareable and allocated {len(allocs)} times")
        if pub.multi:
            for cap, have in sorted(pub.capacity.items()):
                total = sum((a.consumed.get(cap, have) for a in allocs), Decimal(0))
                if total > have:
                    finding(key, "capacity", allocs,
                            f"device {key[2]} {cap}: {_fmt(total)} consumed of {_fmt(have)} "
                            f"by {len(allocs)} share(s)")
        for cset, counters in pub.consumes:
            ck = (key[0], key[1], cset)
            users[ck].update(a.claim for a in allocs)
            if where.get(ck, (None, None))[1] is None:
                where[ck] = (pub.node, gpu_of(key))
            for cname, amount in counters.items():
                used_counters[ck][cname] += amount
        if key[0] in GPU_DRIVERS and (g := gpu_of(key)) is not None:
            out.gpu_uses.setdefault(pub.node, {}).setdefault(g, []).extend(
                _gpu_use(a, pub, catalog) for a in allocs)
    for ck, used in sorted(used_counters.items()):
        have_set = counter_sets.get(ck)
        node, gpu = where[ck]
        claims_here = tuple(sorted(users[ck]))
        if have_set is None:
            out.findings.append(DeviceFinding(node, ck, "counters", claims_here,
                                              f"counter set {ck[2]} is in no ResourceSlice", gpu))
            continue
        over = [f"{c} {_fmt(v)} of {_fmt(have_set.get(c, Decimal(0)))}"
                for c, v in sorted(used.items()) if v > have_set.get(c, Decimal(0))]
        if over:
            out.findings.append(DeviceFinding(node, ck, "counters", claims_here,
                                              f"counter set {ck[2]} over: {', '.join(over)}", gpu))
    return out


def pod_claim_names(pod: Mapping[str, Any]) -> list[tuple[str, str | None]]:
    """The pod's claims as (the name the pod gives it, the ResourceClaim's name): a direct
    ``resourceClaimName``; for a template, the name the controller-manager generated
    (``status.resourceClaimStatuses``; None until it has); the extended-resource claim the
    scheduler created (``status.extendedResourceClaimStatus``)."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    generated = {str(s.get("name")): s.get("resourceClaimName")
                 for s in _items(status.get("resourceClaimStatuses")) if isinstance(s, Mapping)}
    out: list[tuple[str, str | None]] = []
    for rc in _items(spec.get("resourceClaims")):
        if not isinstance(rc, Mapping):
            continue
        name = str(rc.get("name"))
        out.append((name, rc.get("resourceClaimName") or generated.get(name)))
    ext = status.get("extendedResourceClaimStatus") or {}
    if isinstance(ext, Mapping) and ext.get("resourceClaimName"):
        out.append(("(extended resources)", str(ext["resourceClaimName"])))
    return out


def uses_claim_template(pod: Mapping[str, Any], pod_claim: str) -> bool:
    """Whether the pod's claim ``pod_claim`` comes from a ResourceClaimTemplate."""
    return any(isinstance(rc, Mapping) and rc.get("name") == pod_claim
               and rc.get("resourceClaimTemplateName")
               for rc in _items((pod.get("spec") or {}).get("resourceClaims")))


def misplaced(pods: Iterable[Mapping[str, Any]], nodes: Mapping[str, Mapping[str, Any]],
              claims: Iterable[Mapping[str, Any]], slices: Iterable[Mapping[str, Any]]
              ) -> list[DeviceFinding]:
    """``node`` findings: a bound, unfinished pod whose allocated claim cannot be on its node —
    the allocation's ``nodeSelector`` does not select the node, or a device comes from a slice
    local to another node. ``nodes`` by name; pods on a node not in it are not judged."""
    by_key = {claim_key(c): c for c in claims}
    local: dict[DeviceKey, str] = {}
    for s in _newest_slices(slices):
        spec = s["spec"]
        if spec.get("nodeName"):
            driver, pool = str(spec.get("driver")), str((spec.get("pool") or {}).get("name"))
            for dev in _items(spec.get("devices")):
                if isinstance(dev, Mapping):
                    local[(driver, pool, str(dev.get("name")))] = str(spec["nodeName"])
    out: list[DeviceFinding] = []
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or node not in nodes or (pod.get("status") or {}).get("phase") in (
                TERMINAL_PHASES):
            continue
        meta = pod.get("metadata") or {}
        pkey = pod_key(pod)
        for _, cname in pod_claim_names(pod):
            claim = by_key.get(f"{meta.get('namespace', '')}/{cname}") if cname else None
            alloc = ((claim or {}).get("status") or {}).get("allocation")
            if not alloc:
                continue
            sel = alloc.get("nodeSelector")
            if sel is not None and not matches_node_selector(sel, nodes[node]):
                out.append(DeviceFinding(node, ("", "", ""), "node", (claim_key(claim or {}),),
                                         f"pod {pkey} is on {node}, outside its claim's "
                                         f"allocation nodeSelector"))
            for a in allocations([claim or {}]):
                where = local.get(a.key)
                if where is not None and where != node:
                    out.append(DeviceFinding(node, a.key, "node", (a.claim,),
                                             f"pod {pkey} is on {node}, its device {a.key[2]} "
                                             f"on {where}"))
    return out
