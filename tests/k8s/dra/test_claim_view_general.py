"""Pods the general allocator serves, through the snapshot and the real cycle: which nodes their
claims are kept to, and how :func:`~gpufleet.k8s.dra.claim_view.general_binds` allocates them
beside the cycle's other binds (placement's devices first, then the general pods in plan order).

The fleet: a g4dn.12xlarge (4 × T4 on ``gpu.nvidia.com``) that also publishes two NICs of
another driver, and a p3.8xlarge (4 × V100) with none."""

from __future__ import annotations

from typing import Any

import numpy as np

from gpufleet.catalog.gpus import default_gpu_catalog
from gpufleet.catalog.instances import default_instance_catalog
from gpufleet.k8s.dra.claim_view import DraWorld, general_binds
from gpufleet.k8s.dra.slices import DRIVER, device_classes, resource_slices
from gpufleet.k8s.schedule.cycle import plan_cycle
from gpufleet.k8s.translate.node_objects import node_object, spec_from_instance
from gpufleet.k8s.translate.snapshot import build_snapshot
from gpufleet.placement import get_policy

CAT = default_gpu_catalog()
IT = default_instance_catalog()
NIC = "nic.example.com"
FLEET = (("t4", "g4dn.12xlarge"), ("v100", "p3.8xlarge"))


def nic_slice(node: str) -> dict[str, Any]:
    return {"metadata": {"name": f"{node}-nic"}, "spec": {
        "driver": NIC, "nodeName": node, "pool": {"name": node, "generation": 1,
                                                  "resourceSliceCount": 1},
        "devices": [{"name": f"nic-{i}", "attributes": {"numa": {"int": i}}}
                    for i in range(2)]}}


def classes() -> list[dict[str, Any]]:
    return [*device_classes(), {"metadata": {"name": NIC}, "spec": {"selectors": [
        {"cel": {"expression": f"device.driver == '{NIC}'"}}]}}]


def claim(name: str, *requests: dict[str, Any], allocated_on: str | None = None
          ) -> dict[str, Any]:
    body: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                     "resourceVersion": "1"},
        "spec": {"devices": {"requests": list(requests)}}, "status": {}}
    if allocated_on is not None:
        body["status"]["allocation"] = {
            "devices": {"results": [{"request": "nic", "driver": NIC, "pool": allocated_on,
                                     "device": "nic-0"}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [allocated_on]}]}]}}
    return body


def req(name: str, cls: str, **exactly: Any) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": cls, **exactly}}


def pod(name: str, *claim_names: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                         "resourceVersion": "1", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"schedulerName": "gpufleet",
                     "resourceClaims": [{"name": c, "resourceClaimName": c}
                                        for c in claim_names],
                     "containers": [{"name": "m", "resources": {
                         "limits": {"cpu": "1", "memory": "1Gi"},
                         "claims": [{"name": c} for c in claim_names]}}]}}


def cycle(claims: list[dict[str, Any]], pods: list[dict[str, Any]]) -> tuple[Any, Any, DraWorld]:
    slices: list[dict[str, Any]] = [nic_slice("t4")]
    for name, itype in FLEET:
        spec = spec_from_instance(IT[itype], name)
        slices += resource_slices(spec, nvlink_domains=IT[itype].nvlink_domain_of())
    world = DraWorld.of(slices, claims, classes(), CAT)
    nodes = [node_object(spec_from_instance(IT[itype], name)) for name, itype in FLEET]
    snap = build_snapshot(nodes, pods, dra=world)
    got = plan_cycle(snap, get_policy("fgd-strand", tie_seed=0), np.random.default_rng(0))
    return snap, got, world


def devices(alloc: dict[str, Any]) -> list[str]:
    return [r["device"] for r in alloc["devices"]["results"]]


def test_a_gpu_and_a_nic_are_allocated_on_the_one_node_that_has_both() -> None:
    """Two requests of two drivers in one claim: only the T4 node publishes NICs, so the pod
    is kept to it and gets gpu-0 and nic-0 (kube's order); its request asks no GPU of
    placement, so nothing is booked twice."""
    c = claim("c", req("gpu", DRIVER), req("nic", NIC))
    snap, got, world = cycle([c], [pod("p", "c")])
    pc = snap.claims["ns/p"]
    assert pc.general == (c,) and pc.nodes == {"t4"}
    assert snap.pods["ns/p"].request is not None and snap.pods["ns/p"].request.num_gpu == 0
    (bind,) = got.binds
    assert bind.node == "t4" and bind.gpus == ()
    done, failed = general_binds(world, got.binds, snap.claims)
    assert failed == []
    ((key, alloc),) = done["ns/p"].allocations
    assert key == "ns/c" and devices(alloc) == ["gpu-0", "nic-0"]


def test_the_second_of_two_pods_wanting_the_last_nic_is_not_bound_this_cycle() -> None:
    """Both pods fit alone (each asks both NICs), so both are planned on the T4 node; the
    first in plan order gets the NICs, the second is left out of the cycle."""
    claims = [claim(n, req("nic", NIC, count=2)) for n in ("a", "b")]
    snap, got, world = cycle(claims, [pod("pa", "a"), pod("pb", "b")])
    assert {b.job_id for b in got.binds} == {"ns/pa", "ns/pb"}
    done, failed = general_binds(world, got.binds, snap.claims)
    assert len(done) == 1 and len(failed) == 1
    (winner,) = done
    assert devices(done[winner].allocations[0][1]) == ["nic-0", "nic-1"]


def test_placements_devices_come_first() -> None:
    """A pod asking 3 whole GPUs (placement's) and a general pod asking ``All`` T4s, both on
    the T4 node: placement's bind holds gpu-0..2 whole (their memory all consumed: the T4s
    are shareable devices), so ``All`` — every matching device with room, as kube gathers
    them — is gpu-3 alone."""
    whole = claim("w", req("gpu", DRIVER, count=3, selectors=[{"cel": {
        "expression": f"device.attributes['{DRIVER}'].productName == 'Tesla T4'"}}]))
    every = claim("e", req("gpu", DRIVER, allocationMode="All", selectors=[{"cel": {
        "expression": f"device.attributes['{DRIVER}'].productName == 'Tesla T4'"}}]))
    snap, got, world = cycle([whole, every], [pod("pw", "w"), pod("pe", "e")])
    assert not snap.claims["ns/pw"].general and snap.claims["ns/pe"].general
    assert {b.job_id: b.node for b in got.binds} == {"ns/pw": "t4", "ns/pe": "t4"}
    done, failed = general_binds(world, got.binds, snap.claims)
    assert not failed
    ((_, alloc),) = done["ns/pe"].allocations
    assert devices(alloc) == ["gpu-3"]


def test_a_pod_whose_claims_are_partly_allocated_gets_the_rest_on_their_node() -> None:
    """Claim ``n`` holds nic-0 of the T4 node already; the pod's other claim asks one GPU:
    it is kept to that node, and only the unallocated claim is allocated."""
    held = claim("n", req("nic", NIC), allocated_on="t4")
    gpu = claim("g", req("gpu", DRIVER))
    snap, got, world = cycle([held, gpu], [pod("p", "n", "g")])
    pc = snap.claims["ns/p"]
    assert pc.nodes == {"t4"} and pc.general == (gpu,)
    done, failed = general_binds(world, got.binds, snap.claims)
    assert not failed
    ((key, alloc),) = done["ns/p"].allocations
    assert key == "ns/g" and devices(alloc) == ["gpu-0"]


def test_claims_that_fit_nowhere_refuse_the_pod_as_kube_says() -> None:
    c = claim("c", req("nic", NIC, count=3))
    snap, got, _ = cycle([c], [pod("p", "c")])
    assert not got.binds
    assert snap.pods["ns/p"].refusal == "cannot allocate all claims on any node"


def test_a_general_pods_gpu_model_affinity_keeps_it_to_that_models_nodes() -> None:
    """Node affinity on GPU Feature Discovery's product label (lifted into the request's GPU
    models, which placement checks only for a request with GPUs): a general pod asking one
    GPU of either node is kept to the V100 node it names."""
    c = claim("c", req("a", DRIVER), req("b", DRIVER))
    c["spec"]["devices"]["constraints"] = [{"distinctAttribute": f"{DRIVER}/minor"}]
    body = pod("p", "c")
    body["spec"]["affinity"] = {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{
            "matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In",
                                  "values": ["Tesla-V100-SXM2-16GB"]}]}]}}}
    snap, got, _ = cycle([c], [body])
    assert snap.claims["ns/p"].general and snap.claims["ns/p"].nodes == {"v100"}
    assert [b.node for b in got.binds] == ["v100"]


def test_gpus_pods_without_claims_hold_are_not_given_out() -> None:
    """On a node that has the device plugin too, a pod without claims holds GPU 0 through its
    annotations: the general allocator, which reads claims, is told (``held``) and gives a
    GPU and a NIC from what is left."""
    c = claim("c", req("gpu", DRIVER), req("nic", NIC))
    snap, got, world = cycle([c], [pod("p", "c")])
    done, failed = general_binds(world, got.binds, snap.claims, held=[("t4", 0)])
    assert not failed
    ((_, alloc),) = done["ns/p"].allocations
    assert devices(alloc) == ["gpu-1", "nic-0"]
