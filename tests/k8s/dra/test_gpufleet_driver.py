"""GPUs of gpufleet's node plugin (``gpu.gpufleet.io``) beside NVIDIA's: read as the same rows,
allocated with every capacity kube-scheduler's allocator would write, and tainted devices kept
out of placement. Case tables with hand-worked numbers; the JSON the API returns, no server."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.catalog.gpus import default_gpu_catalog
from gpufleet.catalog.instances import default_instance_catalog
from gpufleet.decisions import Bind
from gpufleet.k8s.dra.claim_view import DraWorld
from gpufleet.k8s.dra.claims import (
    allocation,
    claim_asks,
    consumed_capacity,
    holdings,
    pod_ask,
)
from gpufleet.k8s.dra.devices import blocking_taint, devices_by_node
from gpufleet.k8s.dra.shares import SHARE_CLASS, share_claim_template, share_device_class
from gpufleet.k8s.dra.slices import (
    GPUFLEET_DRIVER,
    device_classes,
    inventory_from_slices,
    resource_slices,
)
from gpufleet.k8s.schedule.cycle import device_mask
from gpufleet.k8s.translate.node_objects import node_object, spec_from_instance
from gpufleet.k8s.translate.snapshot import build_snapshot
from gpufleet.node_plugin.inventory import Gpu
from gpufleet.node_plugin.slices import desired_spec
from gpufleet.state import ResourceRequest

CAT = default_gpu_catalog()
IT = default_instance_catalog()
CLASSES = {c["metadata"]["name"]: c for c in [*device_classes(), share_device_class()]}
H100 = "NVIDIA H100 80GB HBM3"


def plugin_slice(node: str, gpus: int = 2, taints: dict[str, list[dict[str, str]]] | None = None
                 ) -> dict[str, Any]:
    """The slice ``gpufleet node-plugin`` publishes for ``gpus`` H100s."""
    inv = [Gpu.model_validate({"uuid": f"GPU-{node}-{i}", "index": i, "minor": i,
                               "product": H100, "memoryMiB": 81920}) for i in range(gpus)]
    return {"metadata": {"name": f"{node}-{GPUFLEET_DRIVER}"},
            "spec": desired_spec(node, inv, taints=taints)}


def plugin_device(**capacity: dict[str, Any]) -> dict[str, Any]:
    return {"name": "gpu-0", "capacity": capacity}


# the node plugin's two capacities, as it publishes them
MEMORY = {"value": "80Gi", "requestPolicy": {"default": "80Gi",
                                              "validRange": {"min": "1Gi", "step": "1Mi"}}}
CORES = {"value": "100", "requestPolicy": {"default": "100",
                                            "validRange": {"min": "1", "max": "100", "step": "1"}}}

CONSUMED = [
    # a quarter: memory as planned, cores as asked
    (plugin_device(memory=MEMORY, cores=CORES), 20480, {"cores": "25"},
     {"memory": "20Gi", "cores": "25"}),
    # 512 MiB is under the 1Gi minimum: raised to it; cores not asked: the default, all 100
    (plugin_device(memory=MEMORY, cores=CORES), 512, {}, {"memory": "1Gi", "cores": "100"}),
    # a whole GPU through the share class: all memory, all cores
    (plugin_device(memory=MEMORY, cores=CORES), 81920, {}, {"memory": "80Gi", "cores": "100"}),
    # NVIDIA-shaped shareable device (no policy): what was planned
    (plugin_device(memory={"value": "16Gi"}), 4096, {}, {"memory": "4Gi"}),
    # valid values: 30 % rounds up to the next one, 50
    (plugin_device(memory={"value": "16Gi"}, cores={"value": "100", "requestPolicy": {
        "validValues": ["25", "50", "100"]}}), 4096, {"cores": "30"},
     {"memory": "4Gi", "cores": "50"}),
    # a range with a 1Gi step: 1536Mi rounds up to 2Gi
    (plugin_device(memory={"value": "16Gi", "requestPolicy": {
        "validRange": {"min": "1Gi", "step": "1Gi"}}}), 1536, {}, {"memory": "2Gi"}),
    # no more than the device has, whatever was asked
    (plugin_device(memory={"value": "16Gi"}), 20000, {}, {"memory": "16Gi"}),
]


@pytest.mark.parametrize(("device", "used", "asked", "want"), CONSUMED)
def test_consumed_capacity(device: dict[str, Any], used: int, asked: dict[str, str],
                           want: dict[str, str]) -> None:
    assert consumed_capacity(device, used, asked.items()) == want


def test_the_plugins_slice_reads_as_nvidias_would() -> None:
    """Two 80 GiB H100s from the plugin: the same row NVIDIA's slices of them would give."""
    got = inventory_from_slices([plugin_slice("n")], CAT)
    assert got.problems == () and got.driver == GPUFLEET_DRIVER
    assert got.inventory is not None
    inv = got.inventory
    assert (inv.gpu_model, inv.num_gpus, inv.gpu_memory_mib, inv.cuda_driver) == (
        CAT.resolve(H100.replace(" ", "-")), 2, 81920, 12040)


def test_two_gpu_drivers_on_one_node_count_nvidias_and_say_so() -> None:
    nvidia = resource_slices(spec_from_instance(IT["g4dn.12xlarge"], "n"))
    got = inventory_from_slices([*nvidia, plugin_slice("n")], CAT)
    assert got.inventory is not None and got.inventory.num_gpus == 4  # NVIDIA's four T4s
    (problem,) = got.problems
    assert problem.field == "spec.driver" and "run one GPU driver per node" in problem.message


def test_the_share_template_asks_a_gpufleet_device_with_cores() -> None:
    body = {"metadata": {"name": "c", "namespace": "ns"},
            "spec": share_claim_template(250, CAT)["spec"]["spec"]}
    (ask,), why = claim_asks(body, CLASSES)
    assert why is None
    assert (ask.class_name, ask.driver) == (SHARE_CLASS, GPUFLEET_DRIVER)
    assert {o.capacity for o in ask.options} == {(("cores", "25"),)}
    by_size = {o.device_memory_mib: o.share_memory_mib for o in ask.options}
    assert by_size[81920] == 20480 and by_size[16384] == 4096


def _pod(name: str, claims: tuple[str, ...], ann: dict[str, str] | None = None
         ) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                         "resourceVersion": "1", "annotations": ann or {}},
            "spec": {"schedulerName": "gpufleet",
                     "resourceClaims": [{"name": f"g{i}", "resourceClaimName": c}
                                        for i, c in enumerate(claims)],
                     "containers": [{"name": "m", "resources": {"limits": {
                         "cpu": "1", "memory": "1Gi"}}}]},
            "status": {"phase": "Pending"}}


def _share_claim(name: str, milli: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                         "resourceVersion": "1"},
            "spec": share_claim_template(milli, CAT)["spec"]["spec"], "status": {}}


def _h100_node(name: str) -> dict[str, Any]:
    return node_object(spec_from_instance(IT["p5.48xlarge"], name))


def test_a_share_goes_to_the_plugins_node_only_and_is_written_with_its_driver() -> None:
    """A p5 of NVIDIA's driver (whole GPUs) and a p5 of the plugin's (2 GPUs published): the
    quarter share may land on the plugin's node only; its allocation names driver
    gpu.gpufleet.io and consumes 20 GiB and 25 % of the cores (the template's ``gpu-80gi``)."""
    nvidia = resource_slices(spec_from_instance(IT["p5.48xlarge"], "whole"))
    world = DraWorld.of([*nvidia, plugin_slice("shared")], [_share_claim("q", 250)],
                        list(CLASSES.values()), CAT)
    snap = build_snapshot([_h100_node("whole"), _h100_node("shared")],
                          [_pod("p", ("q",), {"gpu-fraction": "0.25"})], dra=world)
    (p,) = snap.pending
    assert p.request is not None and p.request.gpu_milli == 250
    mask = device_mask(snap, p)
    assert mask is not None
    assert {n for n, i in snap.state.index.items() if mask[i]} == {"shared"}
    pc = snap.claims["ns/p"]
    assert pc.ask is not None and pc.claim is not None
    node = world.devices["shared"]
    alloc = allocation(pc.claim, pc.ask, Bind("ns/p", "shared", (1,), 250), node, CLASSES)
    assert alloc is not None
    (r,) = alloc["devices"]["results"]
    assert (r["request"], r["driver"], r["pool"], r["device"]) == (
        "gpu/gpu-80gi", GPUFLEET_DRIVER, "shared", "gpu-1")
    assert r["consumedCapacity"] == {"memory": "20Gi", "cores": "25"}
    # read back: the same 250 milli of GPU 1
    done = {**pc.claim, "status": {"allocation": alloc}}
    (h,), bad = holdings([done], world.devices, CAT)
    assert bad == {} and (h.node, h.bind.gpus, h.bind.milli_per_gpu) == ("shared", (1,), 250)


TAINTS = [
    ([{"key": "gpu.gpufleet.io/unhealthy", "value": "xid-79", "effect": "NoExecute"}],
     "gpu.gpufleet.io/unhealthy=xid-79:NoExecute"),
    ([{"key": "gpu.gpufleet.io/unhealthy", "value": "xid-13", "effect": "NoSchedule"}],
     "gpu.gpufleet.io/unhealthy=xid-13:NoSchedule"),
    ([{"key": "example.com/maintenance", "effect": "None"}], None),  # informs only
    ([], None),
]


@pytest.mark.parametrize(("taints", "want"), TAINTS)
def test_blocking_taint(taints: list[dict[str, str]], want: str | None) -> None:
    assert blocking_taint({"name": "gpu-0", "taints": taints}) == want


def test_a_tainted_gpu_is_booked_taken_and_a_share_on_it_keeps_its_room() -> None:
    """gpu-0 of the plugin's node tainted NoExecute after a quarter share was allocated on it:
    the share still books its 250 and the taint the other 750 (placement sees gpu-0 full);
    gpu-1 is untouched."""
    taint = {"key": "gpu.gpufleet.io/unhealthy", "value": "xid-79", "effect": "NoExecute",
             "timeAdded": "2026-12-07T00:00:00Z"}
    held = {"metadata": {"name": "h", "namespace": "ns", "uid": "uid-h"},
            "spec": {}, "status": {"allocation": {"devices": {"results": [{
                "request": "gpu", "driver": GPUFLEET_DRIVER, "pool": "shared",
                "device": "gpu-0", "shareID": "s",
                "consumedCapacity": {"memory": "20Gi", "cores": "25"}}]}}}}
    world = DraWorld.of([plugin_slice("shared", taints={"gpu-0": [taint]})], [held],
                        list(CLASSES.values()), CAT)
    devs, _ = devices_by_node([plugin_slice("shared", taints={"gpu-0": [taint]})], CAT)
    assert [d.name for d in devs["shared"].tainted] == ["gpu-0"]
    snap = build_snapshot([_h100_node("shared")], [], dra=world)
    row = snap.state.index["shared"]
    assert snap.unaccounted == {}
    assert list(snap.state.free_milli[row, :2]) == [0, 1000]


def _exact_share(capacity: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": "c", "namespace": "ns"}, "spec": {"devices": {"requests": [{
        "name": "gpu", "exactly": {"deviceClassName": SHARE_CLASS, "count": 1,
                                   "capacity": {"requests": capacity}}}]}}}


CORES_ASKS = [
    # the cores' fraction as milli (the memory is placed as memory: gpu_memory_mib)
    ({"memory": "20Gi", "cores": "60"}, None, 600, None),
    ({"memory": "20Gi", "cores": "10"}, None, 100, None),
    ({"memory": "20Gi", "cores": "60"}, 700, 700, None),  # the pod's gpu-fraction, larger
    # no cores asked: the policy's default, all of them — kube's allocator books it so too
    ({"memory": "20Gi"}, None, 1000, None),
    ({"memory": "20Gi", "cores": "101"}, None, None, "cores 101 (a GPU has 100"),
]


@pytest.mark.parametrize(("capacity", "hint", "milli", "why"), CORES_ASKS)
def test_a_shares_cores_are_milli_placement_books(
        capacity: dict[str, str], hint: int | None, milli: int | None, why: str | None) -> None:
    """A share of the plugin's device asks memory and ``cores`` (percent of the SMs): placement
    books the cores' fraction as milli-GPU (at least the pod's ``gpu-fraction``), so shares
    never sum above the device's 100 cores (what kube-scheduler's allocator refuses), and a
    share asking more than 100 is refused."""
    req, _, got = pod_ask(ResourceRequest(), hint, [_exact_share(capacity)], CLASSES, CAT)
    if why is not None:
        assert req is None and got is not None and why in got
        return
    assert got is None and req is not None and req.gpu_milli == milli


@pytest.mark.parametrize(("consumed", "milli"), [
    ({"memory": "20Gi", "cores": "60"}, 600),
    ({"memory": "40Gi", "cores": "25"}, 500),
    ({"memory": "4Gi", "cores": "100"}, 1000),  # a memory-only share holds every core
])
def test_a_shares_consumed_cores_are_booked(consumed: dict[str, str], milli: int) -> None:
    held = {"metadata": {"name": "h", "namespace": "ns", "uid": "uid-h"},
            "spec": {}, "status": {"allocation": {"devices": {"results": [{
                "request": "gpu", "driver": GPUFLEET_DRIVER, "pool": "shared",
                "device": "gpu-0", "shareID": "s", "consumedCapacity": consumed}]}}}}
    devs, _ = devices_by_node([plugin_slice("shared")], CAT)
    (h,), bad = holdings([held], devs, CAT)
    assert bad == {} and (h.bind.gpus, h.bind.milli_per_gpu) == ((0,), milli)
