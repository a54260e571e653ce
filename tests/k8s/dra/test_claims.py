"""ResourceClaims ⇄ requests and bookings, as case tables with hand-worked numbers, and the
snapshot of a fleet whose GPUs are ResourceSlices (no API server: the JSON the API returns)."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest

from gpufleet.catalog.gpus import default_gpu_catalog
from gpufleet.catalog.instances import default_instance_catalog
from gpufleet.decisions import Bind, MigSlot
from gpufleet.k8s.dra.allocator import allocate
from gpufleet.k8s.dra.claim_assume import ClaimAssume
from gpufleet.k8s.dra.claim_view import DeviceCache, DraWorld
from gpufleet.k8s.dra.claims import (
    allocation,
    allocation_node,
    claim_asks,
    holdings,
    pod_ask,
    pod_claim_names,
)
from gpufleet.k8s.dra.devices import devices_by_node
from gpufleet.k8s.dra.extended_claims import (
    ExtendedRequest,
    extended_claim,
    extended_classes,
    extended_mappings,
    extended_requests,
)
from gpufleet.k8s.dra.shares import share_claim_template, share_device_class
from gpufleet.k8s.dra.slices import device_classes, resource_slices
from gpufleet.k8s.schedule.cycle import device_mask, pending_units
from gpufleet.k8s.translate.node_objects import node_object, spec_from_instance
from gpufleet.k8s.translate.quantity import memory_mib
from gpufleet.k8s.translate.snapshot import build_snapshot
from gpufleet.lab.dra import shared_pool_slices
from gpufleet.state import ResourceRequest

CAT = default_gpu_catalog()
IT = default_instance_catalog()
CLASSES = {c["metadata"]["name"]: c for c in [*device_classes(), share_device_class()]}
PROFILE = "device.attributes['gpu.nvidia.com'].profile == '{}'"
SHAREABLE = "device.allowMultipleAllocations == true"
MEM = "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('{}')) == 0"


def claim(name: str = "c", cls: str = "gpu.nvidia.com", count: int | None = 1,
          cel: str | None = None, capacity: dict[str, str] | None = None,
          status: dict[str, Any] | None = None, **exactly: Any) -> dict[str, Any]:
    ex: dict[str, Any] = {"deviceClassName": cls, **exactly}
    if count is not None:
        ex["count"] = count
    if cel:
        ex["selectors"] = [{"cel": {"expression": cel}}]
    if capacity:
        ex["capacity"] = {"requests": capacity}
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                         "resourceVersion": "10"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": ex}]}},
            "status": status or {}}


def slices(itype: str, name: str, mig: str | None = None) -> list[dict[str, Any]]:
    spec = spec_from_instance(IT[itype], name, mig_config=mig)
    return resource_slices(spec, nvlink_domains=IT[itype].nvlink_domain_of())


ASKS = [
    # (claim, count, profile, share MiB, refusal fragment)
    (claim(count=2), 2, None, 0, None),
    (claim(count=None), 1, None, 0, None),  # count defaults to 1
    (claim(cls="mig.nvidia.com", cel=PROFILE.format("3g.20gb")), 1, "3g.20gb", 0, None),
    (claim(capacity={"memory": "10Gi"}), 1, None, 10240, None),
    (claim(cls="mig.nvidia.com"), 0, None, 0, "needs a profile selector"),
    (claim(cls="mig.nvidia.com", count=2, cel=PROFILE.format("1g.5gb")), 0, None, 0,
     "one MIG device per request"),
    (claim(count=2, capacity={"memory": "1Gi"}), 0, None, 0, "a share is of one GPU"),
    (claim(capacity={"cores": "1"}), 0, None, 0, "consumable on gpu.nvidia.com: memory"),
    (claim(cls="nic.example.com"), 0, None, 0, "DeviceClass 'nic.example.com' does not exist"),
    # a selector placement does not read is kept and evaluated per device (test_claims_cel.py)
    (claim(cel="device.attributes['gpu.nvidia.com'].minor == 3"), 1, None, 0, None),
    # outside a firstAvailable share the memory and shareable terms are such selectors too
    (claim(cel=MEM.format("16Gi"), capacity={"memory": "4Gi"}), 1, None, 4096, None),
    (claim(cel=SHAREABLE), 1, None, 0, None),
    (claim(allocationMode="All"), 0, None, 0, "only ExactCount"),
    (claim(cel=PROFILE.format("1g.5gb")), 0, None, 0, "a whole GPU has no profile"),
]


@pytest.mark.parametrize(("body", "count", "profile", "share", "why"), ASKS)
def test_claim_asks(body: dict[str, Any], count: int, profile: str | None, share: int,
                    why: str | None) -> None:
    asks, refusal = claim_asks(body, CLASSES)
    if why is not None:
        assert refusal is not None and why in refusal and asks == []
        return
    assert refusal is None
    (a,) = asks
    assert (a.count, a.profile, a.share_memory_mib, a.request, a.claim) == (
        count, profile, share, "gpu", "ns/c")



def sub(name: str, size: str | None, memory: str | None, cls: str = "gpu.nvidia.com",
        count: int = 1, shareable: bool = True, extra: str | None = None) -> dict[str, Any]:
    """One subrequest as dra.shares writes them (or broken in one way)."""
    terms = [t for t in (SHAREABLE if shareable else None,
                         MEM.format(size) if size else None, extra) if t]
    out: dict[str, Any] = {"name": name, "deviceClassName": cls, "count": count}
    if terms:
        out["selectors"] = [{"cel": {"expression": " && ".join(terms)}}]
    if memory:
        out["capacity"] = {"requests": {"memory": memory}}
    return out


def templated(milli: int) -> dict[str, Any]:
    """The claim the controller-manager makes from dra.shares' template ``gpu-share-<milli>``."""
    return {"metadata": {"name": "c", "namespace": "ns"},
            "spec": share_claim_template(milli)["spec"]["spec"]}


def listed(*subs: dict[str, Any]) -> dict[str, Any]:
    body = claim()
    body["spec"]["devices"]["requests"] = [{"name": "gpu", "firstAvailable": list(subs)}]
    return body


FIRST = [
    # (claim, (subrequest, device MiB, share MiB) options, refusal fragment)
    (listed(sub("gpu-16gi", "16Gi", "4Gi"), sub("gpu-40gi", "40Gi", "10Gi")),
     (("gpu-16gi", 16384, 4096), ("gpu-40gi", 40960, 10240)), None),
    (templated(250),  # the shipped gpu-share-250: a quarter of each catalog size
     (("gpu-12gi", 12288, 3072), ("gpu-16gi", 16384, 4096), ("gpu-24gi", 24576, 6144),
      ("gpu-32gi", 32768, 8192), ("gpu-40gi", 40960, 10240), ("gpu-80gi", 81920, 20480),
      ("gpu-141gi", 144384, 36096)), None),
    (listed(), (), "an empty firstAvailable"),
    (listed(sub("a", "16Gi", None)), (), "lists shares of one GPU"),  # no capacity request
    (listed(sub("a", None, "4Gi")), (), "lists shares of one GPU"),  # no memory selector
    (listed(sub("a", "16Gi", "4Gi", shareable=False)), (), "lists shares of one GPU"),
    (listed(sub("a", "16Gi", "4Gi", count=2)), (), "a share is of one GPU (count 1)"),
    (listed(sub("a", "16Gi", "4Gi", cls="mig.nvidia.com")), (), "needs a profile selector"),
    (listed(sub("a", "16Gi", "4Gi"), sub("b", "16Gi", "2Gi")), (),
     "two subrequests select 16384 MiB devices"),
    (listed(sub("a", "16Gi", "4Gi", extra="device.attributes['gpu.nvidia.com'].productName "
                "== 'Tesla T4'"), sub("b", "40Gi", "10Gi")), (),
     "different DeviceClasses or products"),
    # an operand placement does not read keeps the subrequest's selector for CEL
    (listed(sub("a", "16Gi", "4Gi", extra="device.attributes['gpu.nvidia.com'].minor == 0")),
     (("a", 16384, 4096),), None),
    (listed(sub("a", "16Gi", "4Gi", cls="nic.example.com")), (), "does not exist"),
]


@pytest.mark.parametrize(("body", "options", "why"), FIRST)
def test_first_available_shares(body: dict[str, Any], options: tuple[Any, ...],
                                why: str | None) -> None:
    asks, refusal = claim_asks(body, CLASSES)
    if why is not None:
        assert refusal is not None and why in refusal and asks == [], refusal
        return
    assert refusal is None
    (a,) = asks
    cls = body["spec"]["devices"]["requests"][0]["firstAvailable"][0]["deviceClassName"]
    assert (a.request, a.class_name, a.count, a.share_memory_mib, a.product) == (
        "gpu", cls, 1, 0, None)
    assert tuple((o.name, o.device_memory_mib, o.share_memory_mib) for o in a.options) == options


ALL_MODELS = frozenset(CAT.models)


@pytest.mark.parametrize(("milli", "hint", "models", "want_milli", "why"), [
    # 0.25: every size's quarter is whole MiB (12 GiB → 3072 MiB = 250 milli): the fraction
    (250, 250, None, 250, None),
    # 0.05 of 12 GiB is 614.4 → 615 MiB, 615 × 1000 / 12288 = 50.05 → 51 milli: what the
    # allocated share will book, so placement takes it (no hint: the same)
    (50, 50, None, 51, None),
    (50, None, None, 51, None),
    # a productName on the pod (base) narrows the models to those the sizes allow
    (250, 250, frozenset({"T4", "X"}), 250, None),
    (250, 250, frozenset({"X"}), 0, "no GPU model gpufleet knows has the memory"),
])
def test_pod_ask_first_available(milli: int, hint: int | None, models: frozenset[str] | None,
                                 want_milli: int, why: str | None) -> None:
    body = templated(milli)
    base = ResourceRequest(cpu_milli=1000, memory_mib=1024, gpu_models=models)
    req, ask, refusal = pod_ask(base, hint, [body], CLASSES, CAT)
    if why is not None:
        assert req is None and refusal is not None and why in refusal
        return
    assert refusal is None and ask is not None
    assert req == ResourceRequest(cpu_milli=1000, memory_mib=1024, num_gpu=1,
                                  gpu_milli=want_milli, gpu_memory_mib=0,
                                  gpu_models=ALL_MODELS & (models or ALL_MODELS))


BASE = ResourceRequest(cpu_milli=1000, memory_mib=1024)


@pytest.mark.parametrize(("body", "hint", "want"), [
    (claim(count=2), None, ResourceRequest(cpu_milli=1000, memory_mib=1024, num_gpu=2)),
    (claim(cls="mig.nvidia.com", cel=PROFILE.format("3g.20gb")), None,
     ResourceRequest(cpu_milli=1000, memory_mib=1024, num_gpu=1, mig_profile="3g.20gb")),
    # a share: milli from the pod's gpu-fraction, memory from the capacity request
    (claim(capacity={"memory": "10Gi"}), 250,
     ResourceRequest(cpu_milli=1000, memory_mib=1024, num_gpu=1, gpu_milli=250,
                     gpu_memory_mib=10240)),
    # without a fraction the device's memory is all that is shared
    (claim(capacity={"memory": "4Gi"}), None,
     ResourceRequest(cpu_milli=1000, memory_mib=1024, num_gpu=1, gpu_milli=1,
                     gpu_memory_mib=4096)),
    (claim(cel="device.attributes['gpu.nvidia.com'].productName == 'NVIDIA A100-SXM4-40GB'"),
     None, ResourceRequest(cpu_milli=1000, memory_mib=1024, num_gpu=1,
                           gpu_models=frozenset({"A100-40GB"}))),
])
def test_pod_ask(body: dict[str, Any], hint: int | None, want: ResourceRequest) -> None:
    req, ask, why = pod_ask(BASE, hint, [body], CLASSES, CAT)
    assert why is None and ask is not None and req == want


def test_pod_ask_refuses_two_device_requests() -> None:
    _, _, why = pod_ask(BASE, None, [claim("a"), claim("b")], CLASSES, CAT)
    assert why == "gpufleet places one GPU device request per pod"


@pytest.mark.parametrize(("pod", "want"), [
    ({"spec": {"resourceClaims": [{"name": "g", "resourceClaimName": "mine"}]}}, (("mine",), None)),
    ({"spec": {"resourceClaims": [{"name": "g", "resourceClaimTemplateName": "t"}]},
      "status": {"resourceClaimStatuses": [{"name": "g", "resourceClaimName": "p-g-x7"}]}},
     (("p-g-x7",), None)),
    ({"spec": {"resourceClaims": [{"name": "g", "resourceClaimTemplateName": "t"}]}},
     ((), "waiting for the claim of template t")),
    ({"spec": {}, "status": {"extendedResourceClaimStatus": {
        "resourceClaimName": "p-extended-resources-abc", "requestMappings": []}}},
     (("p-extended-resources-abc",), None)),
    ({"spec": {}}, ((), None)),
])
def test_pod_claim_names(pod: dict[str, Any], want: tuple[Any, Any]) -> None:
    assert pod_claim_names(pod) == want


def allocated_claim(name: str, results: list[dict[str, Any]], node: str) -> dict[str, Any]:
    return claim(name, status={"allocation": {
        "devices": {"results": results},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}})


def res(pool: str, device: str, **extra: Any) -> dict[str, Any]:
    return {"request": "gpu", "driver": "gpu.nvidia.com", "pool": pool, "device": device,
            **extra}


def test_holdings_of_every_kind() -> None:
    """A100-40GB (40 GiB): a whole GPU, a 10 GiB share (250 milli), a 3g.20gb MIG device on the
    dynamic-MIG node, and a whole GPU of a MIG GPU (all 8 slices: 7g.40gb at 0)."""
    nodes, problems = devices_by_node(slices("p4d.24xlarge", "plain")
                                      + slices("p4d.24xlarge", "mig", "all-enabled"), CAT)
    assert problems == [] and set(nodes) == {"plain", "mig"}
    cs = [
        allocated_claim("whole", [res("plain", "gpu-3", shareID="a", consumedCapacity={
            "memory": "40Gi"})], "plain"),
        allocated_claim("share", [res("plain", "gpu-5", shareID="b", consumedCapacity={
            "memory": "10Gi"})], "plain"),
        allocated_claim("mig", [res("mig", "gpu-2-mig-3g20gb-9-4")], "mig"),
        allocated_claim("full", [res("mig", "gpu-6")], "mig"),
        allocated_claim("gone", [res("plain", "gpu-9")], "plain"),
        allocated_claim("other", [{**res("plain", "nic-0"), "driver": "nic.example.com"}],
                        "plain"),
        claim("unallocated"),
    ]
    held, bad = holdings(cs, nodes, CAT)
    got = {h.claim: (h.node, h.bind.gpus, h.bind.milli_per_gpu, h.bind.mig,
                     h.request.gpu_memory_mib) for h in held}
    assert got == {
        "ns/whole": ("plain", (3,), 1000, (), 40960),
        "ns/share": ("plain", (5,), 250, (), 10240),
        "ns/mig": ("mig", (), 0, (MigSlot(2, "3g.20gb", 4),), 0),
        "ns/full": ("mig", (), 0, (MigSlot(6, "7g.40gb", 0),), 0),
    }
    assert bad == {"ns/gone": "device plain/gpu-9 is not published"}


def test_allocation_results() -> None:
    """T4 16 GiB: a whole GPU on a shareable device is a share of all its memory (as kube's
    allocator writes it); a 0.25 share consumes max(4 GiB asked, 250 × 16 GiB / 1000); MIG
    devices are not shareable. Class configs come first, then the claim's."""
    nodes, _ = devices_by_node(slices("g4dn.12xlarge", "t4")
                               + slices("p4d.24xlarge", "a100", "all-enabled"), CAT)
    classes = copy.deepcopy(CLASSES)
    opaque = {"driver": "gpu.nvidia.com", "parameters": {"sharing": {"strategy": "MPS"}}}
    classes["gpu.nvidia.com"]["spec"]["config"] = [{"opaque": opaque}]
    whole = claim("w", count=2)
    (ask,) = claim_asks(whole, classes)[0]
    got = allocation(whole, ask, Bind("ns/p", "t4", (1, 2)), nodes["t4"], classes)
    assert got is not None
    rs = got["devices"]["results"]
    assert [r["device"] for r in rs] == ["gpu-1", "gpu-2"]
    assert all(r["consumedCapacity"] == {"memory": "16Gi"} and r["shareID"] for r in rs)
    assert got["devices"]["config"] == [{"source": "FromClass", "requests": ["gpu"],
                                         "opaque": opaque}]
    assert allocation_node({"status": {"allocation": got}}) == "t4"

    share = claim("s", capacity={"memory": "3Gi"})
    share["spec"]["devices"]["config"] = [{"requests": ["gpu"], "opaque": opaque}]
    (ask,) = claim_asks(share, CLASSES)[0]
    got = allocation(share, ask, Bind("ns/p", "t4", (0,), 250), nodes["t4"], CLASSES)
    assert got is not None
    (r,) = got["devices"]["results"]
    assert r["consumedCapacity"] == {"memory": "4Gi"}  # 250 milli of 16 GiB > 3 GiB asked
    assert got["devices"]["config"] == [{"source": "FromClaim", "requests": ["gpu"],
                                         "opaque": opaque}]

    mig = claim("m", cls="mig.nvidia.com", cel=PROFILE.format("3g.20gb"))
    (ask,) = claim_asks(mig, CLASSES)[0]
    got = allocation(mig, ask, Bind("ns/p", "a100", (), 0, (MigSlot(2, "3g.20gb", 4),)),
                     nodes["a100"], CLASSES)
    assert got is not None
    assert got["devices"]["results"] == [res("a100", "gpu-2-mig-3g20gb-9-4")]
    # a slot no slice publishes: nothing is written
    assert allocation(mig, ask, Bind("ns/p", "a100", (), 0, (MigSlot(2, "3g.20gb", 1),)),
                      nodes["a100"], CLASSES) is None


@pytest.mark.parametrize(("itype", "millis", "memories", "read_back"), [
    # V100-32GB (32,768 MiB), the bench's claim asking f × 16 GiB: the planned milli in memory,
    # rounded down — 10,911 + 10,911 + 10,944 = 32,766 MiB; rounded up it was 32,769 > 32,768
    ("p3dn.24xlarge", (333, 333, 334), (10911, 10911, 10944), (333, 333, 334)),
    # T4 (16,384 MiB): what the claim asks, ⌈333 × 16,384 / 1000⌉ = 5,456, is above the
    # milli's 5,455 — the claim's request wins, all three still fit (16,368 MiB), and each
    # reads back one milli high (5,456 of 16,384 is 333.008): booked more, never less
    ("g4dn.12xlarge", (333, 333, 333), (5456, 5456, 5456), (334, 334, 334)),
])
def test_share_memory_never_sums_above_the_device(itype: str, millis: tuple[int, ...],
                                                  memories: tuple[int, ...],
                                                  read_back: tuple[int, ...]) -> None:
    """Shares gpufleet planned to 1000 milli or less on one GPU are written as memory that
    sums to at most the device's (the over-commit checker judges that memory exactly), and
    each milli-derived share reads back (:func:`holdings`) as the milli that was planned."""
    nodes, _ = devices_by_node(slices(itype, "n"), CAT)
    dev_mib = nodes["n"].whole[0].memory_mib
    got, back = [], []
    for i, m in enumerate(millis):
        body = claim(f"s{i}", capacity={"memory": f"{-(-m * 16384 // 1000)}Mi"})
        (ask,) = claim_asks(body, CLASSES)[0]
        alloc = allocation(body, ask, Bind(f"ns/p{i}", "n", (0,), m), nodes["n"], CLASSES)
        assert alloc is not None
        (r,) = alloc["devices"]["results"]
        got.append(memory_mib(r["consumedCapacity"]["memory"]))
        (h,) = holdings([{**body, "status": {"allocation": alloc}}], nodes, CAT)[0]
        back.append(h.bind.milli_per_gpu)
    assert tuple(got) == memories and sum(got) <= dev_mib
    assert tuple(back) == read_back


@pytest.mark.parametrize("dev_mib", [12288, 16384, 24576, 32768, 40960, 81920, 144384])
def test_a_milli_share_written_as_memory_reads_back_as_that_milli(dev_mib: int) -> None:
    """⌈⌊m·M/1000⌋ · 1000 / M⌉ = m for every milli m and every device memory M ≥ 1000 MiB:
    the snapshot books a written share as exactly what placement planned."""
    assert all(math.ceil((m * dev_mib // 1000) * 1000 / dev_mib) == m for m in range(1, 1001))


@pytest.mark.parametrize(("body", "node", "gpu", "named", "consumed", "milli"), [
    # the shipped 0.25 template on the node plugin's GPUs: the chosen device's size picks the
    # subrequest, which asks a quarter of the memory and 25 % of the cores
    (templated(250), "t4s", 2, "gpu/gpu-16gi", {"memory": "4Gi", "cores": "25"}, 250),
    (templated(250), "a100s", 3, "gpu/gpu-40gi", {"memory": "10Gi", "cores": "25"}, 250),
    # ceil(0.05 × 16384) = 820 MiB, raised to the plugin's 1Gi minimum (its request policy, as
    # kube-scheduler's allocator applies it); booked back as 1024 × 1000 / 16384 = 62.5 → 63
    (templated(50), "t4s", 0, "gpu/gpu-16gi", {"memory": "1Gi", "cores": "5"}, 63),
    # NVIDIA-shaped shareable devices (no policy): what the subrequest asks
    (listed(sub("gpu-16gi", "16Gi", "4Gi")), "t4", 1, "gpu/gpu-16gi", {"memory": "4Gi"}, 250),
    # no subrequest for a 16 GiB device: nothing is written
    (listed(sub("gpu-80gi", "80Gi", "20Gi")), "t4", 0, None, None, 0),
])
def test_first_available_allocation(body: dict[str, Any], node: str, gpu: int,
                                    named: str | None, consumed: dict[str, str] | None,
                                    milli: int) -> None:
    """As kube-scheduler writes a prioritized list's result: ``<request>/<subrequest>``, a
    shareID, the subrequest's capacity consumed; class configs name the same request; and
    :func:`holdings` books the written share back as milli-GPU of that device's memory."""
    plugin = [s for name, itype in (("t4s", "g4dn.12xlarge"), ("a100s", "p4d.24xlarge"))
              for s in shared_pool_slices(spec_from_instance(IT[itype], name), f"uid-{name}")]
    nodes, _ = devices_by_node(slices("g4dn.12xlarge", "t4") + slices("p4d.24xlarge", "a100")
                               + plugin, CAT)
    classes = copy.deepcopy(CLASSES)
    opaque = {"driver": "gpu.nvidia.com", "parameters": {"sharing": {"strategy": "MPS"}}}
    cls = body["spec"]["devices"]["requests"][0]["firstAvailable"][0]["deviceClassName"]
    classes[cls]["spec"]["config"] = [{"opaque": opaque}]
    (ask,) = claim_asks(body, classes)[0]
    bind = Bind("ns/p", node, (gpu,), 250)
    got = allocation(body, ask, bind, nodes[node], classes)
    if named is None:
        assert got is None
        return
    assert got is not None
    (r,) = got["devices"]["results"]
    assert (r["request"], r["pool"], r["device"], r["consumedCapacity"]) == (
        named, node, f"gpu-{gpu}", consumed)
    again = allocation(body, ask, bind, nodes[node], classes)
    assert again is not None and again["devices"]["results"][0]["shareID"] != r["shareID"]
    assert got["devices"]["config"] == [{"source": "FromClass", "requests": [named],
                                         "opaque": opaque}]
    (h,) = holdings([{**body, "status": {"allocation": got}}], nodes, CAT)[0]
    assert consumed is not None
    assert (h.bind.gpus, h.bind.milli_per_gpu, h.request.gpu_memory_mib) == (
        (gpu,), milli, memory_mib(consumed["memory"]))


def test_claim_assume_overlay() -> None:
    t = [0.0]
    cache = ClaimAssume(ttl_s=30, clock=lambda: t[0])
    written = allocated_claim("c", [res("n", "gpu-0")], "n")
    written["metadata"]["resourceVersion"] = "12"
    cache.assume(written)
    informer = claim("c")  # rv 10: the informer has not seen our write
    assert cache.overlay([informer]) == [written]
    newer = copy.deepcopy(informer)
    newer["metadata"]["resourceVersion"] = "13"
    assert cache.overlay([newer]) == [newer] and len(cache) == 0  # confirmed (or superseded)
    cache.assume(written)
    replaced = copy.deepcopy(informer)
    replaced["metadata"]["uid"] = "another"
    assert cache.overlay([replaced]) == [replaced] and len(cache) == 0
    cache.assume(written)
    assert cache.overlay([]) == [written]  # not listed yet (a claim we created)
    t[0] = 31
    assert cache.overlay([informer]) == [informer] and len(cache) == 0  # expired


def pod(name: str, node: str = "", claims: tuple[str, ...] = (), scheduler: str = "gpufleet",
        ann: dict[str, str] | None = None, limits: dict[str, str] | None = None
        ) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                         "resourceVersion": "1", "annotations": ann or {}},
            "spec": {"schedulerName": scheduler, "nodeName": node,
                     "resourceClaims": [{"name": f"g{i}", "resourceClaimName": c}
                                        for i, c in enumerate(claims)],
                     "containers": [{"name": "m", "resources": {"limits": {
                         "cpu": "1", "memory": "1Gi", **(limits or {})}}}]},
            "status": {"phase": "Running" if node else "Pending"}}


def test_snapshot_books_claims_once_and_pins_allocated_pending_pods() -> None:
    """g4dn.12xlarge (4 T4s) with slices. kube-scheduler's pod holds gpu-0 through its claim;
    a gpufleet DRA pod bound on gpu-1 (its claim) with stale annotations naming gpu-3 counts
    gpu-1 only; a pending pod whose claim is allocated on the node is pinned there; a pending
    pod with an unallocated 2-GPU claim is planned with num_gpu=2 on slice nodes only."""
    node = node_object(spec_from_instance(IT["g4dn.12xlarge"], "t4"))
    plain = node_object(spec_from_instance(IT["g4dn.12xlarge"], "labels-only"))
    world = DraWorld.of(slices("g4dn.12xlarge", "t4"), [
        allocated_claim("kube", [res("t4", "gpu-0", shareID="x",
                                     consumedCapacity={"memory": "16Gi"})], "t4"),
        allocated_claim("ours", [res("t4", "gpu-1", shareID="y",
                                     consumedCapacity={"memory": "16Gi"})], "t4"),
        allocated_claim("pinned", [res("t4", "gpu-2", shareID="z",
                                       consumedCapacity={"memory": "16Gi"})], "t4"),
        claim("two", count=2),
    ], device_classes(), CAT)
    pods = [
        pod("k", "t4", ("kube",), scheduler="default-scheduler"),
        pod("o", "t4", ("ours",), ann={"gpufleet.io/node": "t4", "gpufleet.io/gpus": "3",
                                      "gpufleet.io/gpu-milli": "1000"}),
        pod("p", claims=("pinned",)),
        pod("w", claims=("two",)),
    ]
    snap = build_snapshot([node, plain], pods, dra=world)
    row = snap.state.index["t4"]
    assert snap.unaccounted == {}
    assert list(snap.state.free_milli[row, :4]) == [0, 0, 0, 1000]
    assert snap.claims["ns/p"].pinned == "t4"
    w = next(p for p in snap.pending if p.key == "ns/w")
    assert w.request is not None and w.request.num_gpu == 2
    assert snap.dra_nodes == frozenset({"t4"})
    mask = device_mask(snap, w)
    assert mask is not None and list(mask) == [False, True]  # rows: labels-only, t4
    assert [u.members for u in pending_units(snap)] == [("ns/w",)]  # the pinned one is not planned


def test_a_claim_the_state_cannot_fit_still_holds_what_is_left_of_its_gpu() -> None:
    """Two claims written by someone else hold 600 and 700 milli (by memory) of one T4: the
    second is reported (the state has 400 left, not 700) and books those 400, so the GPU is
    full to placement rather than looking 400 free."""
    node = node_object(spec_from_instance(IT["g4dn.12xlarge"], "t4"))
    world = DraWorld.of(slices("g4dn.12xlarge", "t4"), [
        allocated_claim("a", [res("t4", "gpu-0", shareID="x",
                                  consumedCapacity={"memory": f"{16384 * 6 // 10}Mi"})], "t4"),
        allocated_claim("b", [res("t4", "gpu-0", shareID="y",
                                  consumedCapacity={"memory": f"{16384 * 7 // 10}Mi"})], "t4"),
    ], device_classes(), CAT)
    snap = build_snapshot([node], [], dra=world)
    assert list(snap.unaccounted) == ["claim ns/b"]
    row = snap.state.index["t4"]
    assert list(snap.state.free_milli[row, :4]) == [0, 1000, 1000, 1000]


def test_mig_claims_where_static_mig_instances_exist_are_the_general_allocators() -> None:
    """all-balanced (static: the instances mig-parted made, no whole GPU published) vs
    all-enabled (dynamic: every placement): a MIG claim of a profile the static node has is
    served by the general allocator (the instances that exist, on either node: the static
    one first by name order is not what placement would choose, but it is kube's). A
    whole-GPU claim, with no GPU outside MIG mode anywhere, is the general allocator's too:
    the dynamic node publishes each GPU whole (the static one does not), and its whole device
    is what it gets."""
    nodes = [node_object(spec_from_instance(IT["p4d.24xlarge"], n, mig_config=m))
             for n, m in (("static", "all-balanced"), ("dynamic", "all-enabled"))]
    world = DraWorld.of(slices("p4d.24xlarge", "static", "all-balanced")
                        + slices("p4d.24xlarge", "dynamic", "all-enabled"),
                        [claim("m", cls="mig.nvidia.com", cel=PROFILE.format("1g.5gb")),
                         claim("w")], device_classes(), CAT)
    assert world.devices["static"].static_mig and not world.devices["dynamic"].static_mig
    snap = build_snapshot(nodes, [pod("pm", claims=("m",)), pod("pw", claims=("w",))],
                          dra=world)
    assert snap.static_mig_nodes == frozenset({"static"})
    masks = {p.key: device_mask(snap, p) for p in snap.pending}
    order = [snap.state.nodes[i].name for i in range(snap.state.n)]
    assert order == ["dynamic", "static"]
    assert list(masks["ns/pm"]) == [True, True]
    assert snap.claims["ns/pm"].general and snap.claims["ns/pm"].nodes == {"static", "dynamic"}
    assert list(masks["ns/pw"]) == [True, False]
    assert snap.claims["ns/pw"].general and snap.claims["ns/pw"].nodes == {"dynamic"}
    (whole,) = allocate(snap.claims["ns/pw"].general, world.classes, world.pools["dynamic"],
                        world.in_use())
    assert [r["device"] for r in whole["devices"]["results"]] == ["gpu-0"]
    (got,) = allocate(snap.claims["ns/pm"].general, world.classes, world.pools["static"],
                      world.in_use())
    (res,) = got["devices"]["results"]
    assert res["device"] in {d.name for d in world.devices["static"].mig.values()
                             if d.profile == "1g.5gb"}


def test_extended_requests_and_the_claim_kube_scheduler_would_create() -> None:
    """Request names as kube-scheduler's createRequestsAndMappings: container index counts init
    containers first; the request index is the resource's place among the container's sorted
    request names (cpu, memory, nvidia.com/gpu → 2)."""
    pod_obj = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
               "spec": {"initContainers": [{"name": "init"}], "containers": [
                   {"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi",
                                                          "nvidia.com/gpu": "2"}}},
                   {"name": "b", "resources": {"requests": {"nvidia.com/mig-3g.20gb": "1"}}},
                   {"name": "c", "resources": {"limits": {"cpu": "1"}}}]}}
    reqs = extended_requests(pod_obj)
    assert reqs == (ExtendedRequest("a", "container-1-request-2", "nvidia.com/gpu", 2),
                    ExtendedRequest("b", "container-2-request-0", "nvidia.com/mig-3g.20gb", 1))
    mapping = extended_classes(CLASSES)
    assert mapping["nvidia.com/gpu"] == "gpu.nvidia.com"
    assert mapping["nvidia.com/mig-3g.20gb"] == "mig-3g.20gb.gpu.nvidia.com"
    assert mapping["deviceclass.resource.kubernetes.io/mig.nvidia.com"] == "mig.nvidia.com"
    body = extended_claim("ns", "p", "u1", reqs[:1], mapping)
    assert body["metadata"] == {
        "generateName": "p-extended-resources-", "namespace": "ns",
        "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u1",
                             "controller": True}],
        "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"}}
    assert body["spec"]["devices"]["requests"] == [{"name": "container-1-request-2", "exactly": {
        "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 2}}]
    (ask,), why = claim_asks(body, CLASSES)
    assert why is None and ask.count == 2
    (mig,), _ = claim_asks(extended_claim("ns", "p", "u1", reqs[1:], mapping), CLASSES)
    assert mig.profile == "3g.20gb"  # the profile comes from the class's selector
    assert extended_mappings(reqs[:1]) == [{"containerName": "a", "resourceName":
                                            "nvidia.com/gpu",
                                            "requestName": "container-1-request-2"}]


def test_device_cache_reparses_only_changed_slices() -> None:
    cache = DeviceCache()
    sl = slices("g4dn.12xlarge", "t4")
    for i, s in enumerate(sl):
        s["metadata"]["resourceVersion"] = str(i)
    first = cache.devices(sl, CAT)
    assert cache.devices(copy.deepcopy(sl), CAT) is first
    sl[0]["metadata"]["resourceVersion"] = "99"
    again = cache.devices(sl, CAT)
    assert again is not first and set(again[0]) == {"t4"}


def _running(name: str, node: str, claims: tuple[str, ...], priority: int = 0) -> dict[str, Any]:
    p = pod(name, node, claims)
    p["spec"]["priority"] = priority
    return p


def _reserved(c: dict[str, Any], *pods: str) -> dict[str, Any]:
    c["status"]["reservedFor"] = [{"resource": "pods", "name": p, "uid": f"uid-{p}"}
                                  for p in pods]
    return c


def test_pods_with_claims_are_victims_with_their_claims_devices() -> None:
    """g4dn.12xlarge (4 T4s, 16 GiB each). A pod holding two whole GPUs through its claim, one
    holding a 4 GiB share (250 milli) and one whose claim another pod shares too: the first two
    are victims with their devices (what the claim controller's deallocation frees once the pod
    is gone); the third is not (its claim stays allocated for the other pod)."""
    from gpufleet.k8s.schedule.cycle import victims_of

    node = node_object(spec_from_instance(IT["g4dn.12xlarge"], "t4"))
    share = {"shareID": "s", "consumedCapacity": {"memory": "4Gi"}}
    whole = {"shareID": "w", "consumedCapacity": {"memory": "16Gi"}}
    world = DraWorld.of(slices("g4dn.12xlarge", "t4"), [
        _reserved(allocated_claim("two", [res("t4", "gpu-0", **whole),
                                          res("t4", "gpu-1", shareID="w2",
                                              consumedCapacity={"memory": "16Gi"})], "t4"),
                  "a"),
        _reserved(allocated_claim("quarter", [res("t4", "gpu-2", **share)], "t4"), "b"),
        _reserved(allocated_claim("both", [res("t4", "gpu-3", **whole)], "t4"), "c", "d"),
    ], device_classes(), CAT)
    pods = [_running("a", "t4", ("two",), 5), _running("b", "t4", ("quarter",)),
            _running("c", "t4", ("both",)), _running("d", "t4", ("both",))]
    snap = build_snapshot([node], pods, dra=world)
    assert snap.unaccounted == {}
    got = {v.job_id: v for v in victims_of(snap)}
    assert set(got) == {"ns/a", "ns/b"}
    a, b = got["ns/a"], got["ns/b"]
    assert (a.priority, a.bind.gpus, a.bind.milli_per_gpu, a.request.num_gpu) == (
        5, (0, 1), 1000, 2)
    assert (b.bind.gpus, b.bind.milli_per_gpu, b.request.gpu_memory_mib) == ((2,), 250, 4096)
    assert (a.request.cpu_milli, a.request.memory_mib) == (1000, 1024)  # the pod's own, too
    # releasing a victim frees exactly what its pod and its claims booked
    state = snap.state.copy()
    row = state.index["t4"]
    cpu = state.cpu_free[row]
    state.release(a.request, a.bind, a.masks)
    state.release(b.request, b.bind, b.masks)
    assert list(state.free_milli[row, :4]) == [1000, 1000, 1000, 0]
    assert state.cpu_free[row] == cpu + 2000
