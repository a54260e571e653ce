"""Claims whose CEL selectors placement does not read: evaluated per device against the lab's
slices (:func:`gpufleet.k8s.dra.claims.selector_nodes`), through the snapshot and the real
cycle to the allocation written back — every device given out satisfies the selectors."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

from gpufleet.catalog.gpus import default_gpu_catalog
from gpufleet.catalog.instances import default_instance_catalog
from gpufleet.k8s.dra.cel import DeviceInput, matches
from gpufleet.k8s.dra.claim_view import DraWorld, general_binds
from gpufleet.k8s.dra.claims import (
    allocation,
    candidate_devices,
    claim_asks,
    selector_nodes,
)
from gpufleet.k8s.dra.devices import devices_by_node
from gpufleet.k8s.dra.slices import (
    DRIVER,
    device_classes,
    nvml_product_name,
    resource_slices,
)
from gpufleet.k8s.schedule.cycle import plan_cycle
from gpufleet.k8s.translate.node_objects import node_object, spec_from_instance
from gpufleet.k8s.translate.snapshot import build_snapshot
from gpufleet.placement import get_policy

CAT = default_gpu_catalog()
IT = default_instance_catalog()
NV = f"device.attributes['{DRIVER}']"
CAP = f"device.capacity['{DRIVER}']"
# the fleet: 8 × A100-SXM4-40GB, 8 × H100 80 GiB, 4 × T4 16 GiB (all driver 550.54.14; the
# A100 node's slices are rewritten to driver 535.104.12 where a test says so)
FLEET = (("a100", "p4d.24xlarge"), ("h100", "p5.48xlarge"), ("t4", "g4dn.12xlarge"))


def lab_slices(itype: str, name: str, mig: str | None = None) -> list[dict[str, Any]]:
    spec = spec_from_instance(IT[itype], name, mig_config=mig)
    return resource_slices(spec, nvlink_domains=IT[itype].nvlink_domain_of())


def with_driver(slices: list[dict[str, Any]], version: str) -> list[dict[str, Any]]:
    out = copy.deepcopy(slices)
    for s in out:
        for d in s["spec"].get("devices") or ():
            d["attributes"]["driverVersion"] = {"version": version}
    return out


def claim(name: str, cel: list[str] | None = None, cls: str = "gpu.nvidia.com",
          count: int = 1) -> dict[str, Any]:
    ex: dict[str, Any] = {"deviceClassName": cls, "count": count}
    if cel:
        ex["selectors"] = [{"cel": {"expression": e}} for e in cel]
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                         "resourceVersion": "1"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": ex}]}}, "status": {}}


def pod(name: str, claim_name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                         "resourceVersion": "1", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"schedulerName": "gpufleet",
                     "resourceClaims": [{"name": "g", "resourceClaimName": claim_name}],
                     "containers": [{"name": "m", "resources": {
                         "limits": {"cpu": "1", "memory": "1Gi"}, "claims": [{"name": "g"}]}}]},
            "status": {"phase": "Pending"}}


def plan(claims: list[dict[str, Any]], classes: list[dict[str, Any]] | None = None,
         a100_driver: str | None = None) -> tuple[Any, Any, DraWorld]:
    """The fleet's snapshot with one pending pod per claim, and the real cycle's plan."""
    slices: list[dict[str, Any]] = []
    for name, itype in FLEET:
        got = lab_slices(itype, name)
        slices += with_driver(got, a100_driver) if a100_driver and name == "a100" else got
    world = DraWorld.of(slices, claims, classes or device_classes(), CAT)
    nodes = [node_object(spec_from_instance(IT[itype], name)) for name, itype in FLEET]
    snap = build_snapshot(nodes, [pod(f"p-{c['metadata']['name']}", c["metadata"]["name"])
                                  for c in claims], dra=world)
    got = plan_cycle(snap, get_policy("fgd-strand", tie_seed=0), np.random.default_rng(0))
    return snap, got, world


def allocated_devices(snap: Any, got: Any, world: DraWorld, name: str
                      ) -> tuple[str, list[dict[str, Any]]]:
    """The node and the published devices the plan's bind for pod ``p-<name>`` allocates."""
    (bind,) = [b for b in got.binds if b.job_id == f"ns/p-{name}"]
    pc = snap.claims[f"ns/p-{name}"]
    assert pc.ask is not None and pc.claim is not None
    alloc = allocation(pc.claim, pc.ask, bind, world.devices[bind.node], world.classes)
    assert alloc is not None
    raw = {d.name: d.raw for d in world.devices[bind.node].by_name.values()}
    return bind.node, [dict(raw[r["device"]] or {}) for r in alloc["devices"]["results"]]


@pytest.mark.parametrize(("cel", "count", "want_node", "a100_driver"), [
    # NVIDIA's example: any A100, by a case-insensitive regex on the NVML name
    ([f"{NV}.productName.lowerAscii().matches('^.*a100.*$')"], 2, "a100", None),
    # at least 40 GiB of memory on a node whose GPUs are all 40 GiB or more: A100 or H100;
    # more than 40 GiB: H100 only
    ([f"{CAP}.memory.compareTo(quantity('41Gi')) >= 0"], 4, "h100", None),
    # a driver newer than 540: the A100 node runs 535 here, the others 550
    ([f"{NV}.driverVersion.isGreaterThan(semver('540.0.0'))",
      f"{NV}.cudaComputeCapability.isGreaterThan(semver('8.0.0'))"], 8, "h100", "535.104.12"),
    # a selector excluding the T4 and the H100 nodes (two selectors, both must hold)
    ([f"{NV}.productName != 'Tesla T4'", f"!{NV}.productName.contains('H100')"], 1, "a100",
     None),
])
def test_a_claim_is_placed_only_on_devices_its_selectors_admit(
        cel: list[str], count: int, want_node: str, a100_driver: str | None) -> None:
    snap, got, world = plan([claim("c", cel, count=count)], a100_driver=a100_driver)
    assert snap.claims["ns/p-c"].nodes == frozenset({want_node})
    node, devices = allocated_devices(snap, got, world, "c")
    assert node == want_node and len(devices) == count
    for d in devices:
        assert all(matches(e, DeviceInput(d, DRIVER)) for e in cel), d["name"]


def test_the_device_class_selectors_are_evaluated_too() -> None:
    """A class of its own: the whole-GPU terms placement reads and a CEL selector on the
    model; the claim adds the memory. Only the A100 node's devices pass both."""
    a100 = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": "a100.example.com"},
            "spec": {"selectors": [
                {"cel": {"expression": f"device.driver == '{DRIVER}' && {NV}.type == 'gpu'"}},
                {"cel": {"expression": f"{NV}.productName.lowerAscii().contains('a100')"}}]}}
    body = claim("c", [f"{CAP}.memory.compareTo(quantity('16Gi')) > 0"],
                 cls="a100.example.com")
    (ask,), why = claim_asks(body, {"a100.example.com": a100})
    assert why is None
    assert [s.label for s in ask.cel] == ["class a100.example.com: selector #1",
                                          "claim ns/c: selector #0"]
    snap, got, world = plan([body], [*device_classes(), a100])
    node, devices = allocated_devices(snap, got, world, "c")
    assert node == "a100"
    assert devices[0]["attributes"]["productName"] == {"string": "NVIDIA A100-SXM4-40GB"}


@pytest.mark.parametrize(("cel", "why"), [
    # a syntax error the API server would have refused: kube-scheduler's wording
    ([f"{NV}.productName.lowerAscii("],
     "claim ns/c: selector #0: CEL compile error: compilation failed: ERROR: <input>:1:"),
    ([f"{NV}.productName.toLower() == 'x'"],
     "claim ns/c: selector #0: CEL compile error: compilation failed: ERROR: <input>: "
     "undeclared reference to 'toLower'"),
    # an attribute no published device has (the second selector; the first holds)
    ([f"{NV}.type == 'gpu' && {NV}.index >= 0", f"{NV}.nvlinkDomain == 0"],
     "claim ns/c: selector #1: CEL runtime error: no such key: nvlinkDomain"),
    # nothing matches
    ([f"{NV}.productName.lowerAscii().matches('^.*b200.*$')"],
     f"claim ns/c: selector #0: no published GPU device matches "
     f"\"{NV}.productName.lowerAscii().matches('^.*b200.*$')\""),
    # matches only some of every node's GPUs, too few of them for the count anywhere
    ([f"{NV}.index >= 2"],
     f"claim ns/c: selector #0: \"{NV}.index >= 2\" matches only some of the GPU devices on "
     "node a100 and 2 more; cannot allocate all claims with the devices it admits"),
])
def test_a_claim_whose_selectors_cannot_be_allocated_is_refused_with_why(
        cel: list[str], why: str) -> None:
    snap, got, _ = plan([claim("c", cel, count=7)])
    assert not got.binds
    (refusal,) = got.refusals
    assert refusal.job_id == "ns/p-c" and refusal.message.startswith(why), refusal.message
    assert snap.pods["ns/p-c"].refusal == refusal.message


def test_a_selector_matching_some_gpus_of_a_node_is_allocated_on_those() -> None:
    """``index >= 2`` admits only some of each node's GPUs, which placement (choosing GPU
    indices, not devices) cannot honour: the general allocator serves the claim, as kube's
    does — the first node in name order, its first two admitted GPUs."""
    snap, got, world = plan([claim("c", [f"{NV}.index >= 2"], count=2)])
    pc = snap.claims["ns/p-c"]
    assert pc.general and pc.ask is None
    (bind,) = got.binds
    assert bind.gpus == () and bind.node in pc.nodes
    done, failed = general_binds(world, got.binds, snap.claims)
    assert not failed
    ((key, alloc),) = done["ns/p-c"].allocations
    assert key == "ns/c"
    assert [r["device"] for r in alloc["devices"]["results"]] == ["gpu-2", "gpu-3"]


@pytest.mark.parametrize(("itype", "mig"), [
    ("p4d.24xlarge", None), ("p4d.24xlarge", "all-enabled"), ("p4d.24xlarge", "all-balanced"),
    ("p5.48xlarge", None), ("g4dn.12xlarge", None), ("p3.16xlarge", None),
])
def test_the_terms_placement_reads_agree_with_cel_on_the_lab_slices(
        itype: str, mig: str | None) -> None:
    """For each class the lab installs, and each product the catalog knows asked by
    ``productName`` equality, the devices placement may choose (the terms it reads) are
    exactly those the class's and the claim's selectors admit when CEL evaluates them."""
    classes = {c["metadata"]["name"]: c for c in device_classes()}
    (node,) = devices_by_node(lab_slices(itype, "n", mig), CAT)[0].values()
    devices = [(d, node.cel_input(d)) for d in node.by_name.values()]
    products = [None, *(nvml_product_name(m, CAT) for m in sorted(CAT.models))]
    checked = 0
    for cname, cls in sorted(classes.items()):
        for product in products:
            extra = [f"{NV}.productName == '{product}'"] if product else []
            asks, why = claim_asks(claim("c", extra, cls=cname), classes)
            if cname == "mig.nvidia.com":  # any MIG device: placement needs a profile
                assert why is not None and "needs a profile selector" in why
                continue
            (ask,) = asks
            assert why is None and ask.cel == ()  # all read by placement
            fast = {d.name for d, _ in candidate_devices(ask, node)}
            exprs = [s["cel"]["expression"] for s in cls["spec"]["selectors"]] + extra
            by_cel = {d.name for d, inp in devices if all(matches(e, inp) for e in exprs)}
            assert fast == by_cel, (cname, product)
            checked += len(devices)
    assert checked > 0


def test_selector_results_are_kept_for_the_same_devices() -> None:
    """Pods from one template ask the same selectors: judged once per set of devices."""
    devices, _ = devices_by_node(lab_slices("p4d.24xlarge", "a100")
                                 + lab_slices("p5.48xlarge", "h100"), CAT)
    classes = {c["metadata"]["name"]: c for c in device_classes()}
    memo: dict[Any, Any] = {}
    sel = [f"{NV}.productName.lowerAscii().matches('^.*h100.*$')"]
    (a,), _ = claim_asks(claim("one", sel), classes)
    (b,), _ = claim_asks(claim("two", sel), classes)
    assert selector_nodes(a, devices, memo) == (frozenset({"h100"}), None)
    assert len(memo) == 1
    assert selector_nodes(b, devices, memo) == (frozenset({"h100"}), None)
    assert len(memo) == 1
    (plain,), _ = claim_asks(claim("three"), classes)
    assert selector_nodes(plain, devices, memo) == (None, None)  # nothing to evaluate
