"""ResourceSlices for a GPU node (NVIDIA's DRA driver shape) and back to the snapshot's inventory.

Round trip: for every case, spec → slices → inventory equals spec → Node object → the label
path's inventory, and both give the same FleetState row. Hand-worked cases pin names, placements,
counters and attribute values; bad slices come back as problems naming slice/device/field.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from gpufleet.catalog.gpus import GpuModel, default_gpu_catalog
from gpufleet.catalog.instances import default_instance_catalog
from gpufleet.k8s.dra.slices import (
    ATTR_NVLINK_DOMAIN,
    GpuInventory,
    SliceProblem,
    device_classes,
    inventory_from_slices,
    inventory_of_node_spec,
    nvlink_domains_for,
    place_static_mig,
    resource_slices,
)
from gpufleet.k8s.translate.node_objects import GpuNodeSpec, node_object, spec_from_instance
from gpufleet.k8s.translate.nodes import node_spec
from gpufleet.state import FleetState

REPO = Path(__file__).resolve().parents[3]
ITYPES = default_instance_catalog()


def inst(itype: str, name: str, mig: str | None = None) -> GpuNodeSpec:
    return spec_from_instance(ITYPES[itype], name, mig_config=mig)


def openb(name: str, model: str, gpus: int) -> GpuNodeSpec:
    return GpuNodeSpec(name=name, cpu_milli=64000, memory_mib=262144, gpu_model=model,
                       gpus=gpus, instance_type=f"openb-{gpus}x{model}", zone="openb-a")


ROUND_TRIP = [
    inst("p3.8xlarge", "v100-4"),
    inst("p3.16xlarge", "v100-8"),
    inst("g4dn.12xlarge", "t4-4"),
    inst("p4d.24xlarge", "a100-plain"),
    inst("p4d.24xlarge", "a100-balanced", "all-balanced"),
    inst("p4d.24xlarge", "a100-1g", "all-1g.5gb"),
    inst("p4d.24xlarge", "a100-3g", "all-3g.20gb"),
    inst("p4d.24xlarge", "a100-dynamic", "all-enabled"),
    inst("p4de.24xlarge", "a100-80-balanced", "all-balanced"),
    inst("p5.48xlarge", "h100-dynamic", "all-enabled"),
    inst("g5.xlarge", "a10g-1"),
    replace(inst("g4dn.12xlarge", "t4-cuda118"), cuda_version=11080),
    openb("openb-t4", "T4", 2),
    openb("openb-v100m32", "V100-32GB", 8),
]


def _row(st: FleetState, row: int) -> dict[str, list]:
    names = ("num_gpus", "model_id", "cuda_driver", "free_milli", "gpu_mem_total",
             "mig_enabled", "mig_compute_total", "cpu_total", "mem_total")
    return {n: np.asarray(getattr(st, n)[row]).tolist() for n in names}


@pytest.mark.parametrize("spec", ROUND_TRIP, ids=lambda s: s.name)
def test_slices_and_labels_give_the_same_inventory_and_row(spec: GpuNodeSpec) -> None:
    labelled = node_spec(node_object(spec))
    got = inventory_from_slices(
        resource_slices(spec, node_uid="u-1", nvlink_domains=nvlink_domains_for(spec))
    )
    assert got.problems == ()
    assert got.inventory is not None
    assert replace(got.inventory, nvlink_domains=()) == inventory_of_node_spec(labelled)
    st_labels, st_slices = FleetState(), FleetState()
    r1 = labelled.add_to(st_labels)
    r2 = got.inventory.apply_to(labelled).add_to(st_slices)
    assert _row(st_labels, r1) == _row(st_slices, r2)


def test_cpu_only_node_has_no_slices() -> None:
    spec = GpuNodeSpec(name="cpu-0", cpu_milli=8000, memory_mib=32768)
    assert resource_slices(spec) == []
    assert inventory_from_slices([]).inventory is None


def _devices(slices: list[dict]) -> list[dict]:
    return [d for s in slices for d in s["spec"].get("devices") or ()]


def test_whole_gpu_node_attributes_hand_worked() -> None:
    sl = resource_slices(inst("p3.16xlarge", "v100-8"), node_uid="uid-9",
                         nvlink_domains=[0, 0, 0, 0, 1, 1, 1, 1])
    assert len(sl) == 1
    s = sl[0]
    assert s["apiVersion"] == "resource.k8s.io/v1" and s["kind"] == "ResourceSlice"
    assert s["metadata"]["name"] == "v100-8-gpu.nvidia.com-0"
    assert s["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "v100-8", "uid": "uid-9", "controller": True}
    ]
    assert s["spec"]["driver"] == "gpu.nvidia.com" and s["spec"]["nodeName"] == "v100-8"
    assert s["spec"]["pool"] == {"name": "v100-8", "generation": 1, "resourceSliceCount": 1}
    devs = s["spec"]["devices"]
    assert [d["name"] for d in devs] == [f"gpu-{i}" for i in range(8)]
    a = devs[5]["attributes"]
    assert a["type"] == {"string": "gpu"} and a["minor"] == {"int": 5}
    assert a["productName"] == {"string": "Tesla V100-SXM2-16GB"}
    assert a["architecture"] == {"string": "Volta"}
    assert a["cudaComputeCapability"] == {"version": "7.0.0"}
    # the lab's nodes default to CUDA 12.4, whose first driver is 550.54.14
    assert a["driverVersion"] == {"version": "550.54.14"}
    assert a["cudaDriverVersion"] == {"version": "12.4.0"}
    assert a["resource.kubernetes.io/pcieRoot"] == {"string": "pci0000:02"}
    assert a[ATTR_NVLINK_DOMAIN] == {"int": 1}
    assert a["uuid"]["string"].startswith("GPU-")
    assert devs[5]["capacity"] == {"memory": {"value": "16Gi"}}
    assert "consumesCounters" not in devs[5]
    assert len({d["attributes"]["uuid"]["string"] for d in devs}) == 8


def test_turing_and_pcie_only_gpus() -> None:
    devs = _devices(resource_slices(inst("g4dn.12xlarge", "t4"),
                                    nvlink_domains=nvlink_domains_for(inst("g4dn.12xlarge", "t4"))))
    assert devs[0]["attributes"]["architecture"] == {"string": "Turing"}
    assert devs[0]["attributes"]["productName"] == {"string": "Tesla T4"}
    assert all(ATTR_NVLINK_DOMAIN not in d["attributes"] for d in devs)


def test_all_balanced_a100_placement_is_hand_worked() -> None:
    # 3g.20gb first at slice 0 leaves 4-5 for the 2g.10gb and only start 6 for two 1g.5gb
    # (start 7 is no 1g start): so the 3g goes to 4, the 2g to 0, the 1g.5gbs to 2 and 3.
    model: GpuModel = default_gpu_catalog()["A100-40GB"]
    placed = place_static_mig(model, {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1})
    assert [(p.name, s) for p, s in placed] == [
        ("3g.20gb", 4), ("2g.10gb", 0), ("1g.5gb", 2), ("1g.5gb", 3)]
    sl = resource_slices(inst("p4d.24xlarge", "a100", "all-balanced"))
    # 8 counter sets fill one counter slice; 32 MIG devices (no whole GPUs) one device slice
    assert [len(s["spec"].get("sharedCounters") or ()) for s in sl] == [8, 0]
    assert [len(s["spec"].get("devices") or ()) for s in sl] == [0, 32]
    assert all(s["spec"]["pool"]["resourceSliceCount"] == 2 for s in sl)
    names = [d["name"] for d in _devices(sl)[:4]]
    assert names == ["gpu-0-mig-3g20gb-9-4", "gpu-0-mig-2g10gb-14-0",
                     "gpu-0-mig-1g5gb-19-2", "gpu-0-mig-1g5gb-19-3"]
    mig = _devices(sl)[0]
    assert mig["attributes"]["type"] == {"string": "mig"}
    assert mig["attributes"]["profile"] == {"string": "3g.20gb"}
    assert mig["attributes"]["parentUUID"]["string"].startswith("GPU-")
    assert mig["attributes"]["uuid"]["string"].startswith("MIG-")
    assert mig["capacity"] == {"memory": {"value": "20Gi"}}  # 40960 MiB × 4/8 slices
    assert mig["consumesCounters"] == [{"counterSet": "gpu-0-counter-set", "counters": {
        "memory": {"value": "20Gi"}, "compute-slices": {"value": "3"},
        **{f"memory-slice-{i}": {"value": "1"} for i in (4, 5, 6, 7)}}}]
    cset = sl[0]["spec"]["sharedCounters"][0]
    assert cset["name"] == "gpu-0-counter-set"
    assert cset["counters"]["memory"] == {"value": "40Gi"}
    assert cset["counters"]["compute-slices"] == {"value": "7"}
    assert sorted(k for k in cset["counters"] if k.startswith("memory-slice-")) == [
        f"memory-slice-{i}" for i in range(8)]


def test_dynamic_mig_publishes_whole_gpu_and_every_placement_within_api_limits() -> None:
    # A100-40GB: 1 whole GPU + placements 7 (1g.5gb) + 4 (1g.10gb) + 3 + 2 + 1 + 1 = 19 per GPU,
    # 152 devices; with counters at most 64 per slice → 64, 64, 24, after one counter slice.
    sl = resource_slices(inst("p4d.24xlarge", "dyn", "all-enabled"))
    assert [len(s["spec"].get("devices") or ()) for s in sl] == [0, 64, 64, 24]
    assert all(s["spec"]["pool"]["resourceSliceCount"] == 4 for s in sl)
    whole = next(d for d in _devices(sl) if d["name"] == "gpu-3")
    assert whole["consumesCounters"][0]["counterSet"] == "gpu-3-counter-set"
    assert whole["consumesCounters"][0]["counters"]["compute-slices"] == {"value": "7"}
    assert len(whole["consumesCounters"][0]["counters"]) == 2 + 8


def test_nine_mig_gpus_need_a_second_counter_slice() -> None:
    spec = GpuNodeSpec(name="big", cpu_milli=1000, memory_mib=1024, gpu_model="A100-40GB",
                       gpus=9, mig_config="all-7g.40gb")
    sl = resource_slices(spec)
    assert [len(s["spec"].get("sharedCounters") or ()) for s in sl] == [8, 1, 0]
    inv = inventory_from_slices(sl).inventory
    assert inv is not None and inv.num_gpus == 9 and inv.mig_resources == {"7g.40gb": 9}


def test_device_classes_match_nvidia_and_deploy_yaml() -> None:
    classes = {c["metadata"]["name"]: c for c in device_classes()}
    assert {"gpu.nvidia.com", "mig.nvidia.com", "mig-3g.20gb.gpu.nvidia.com"} <= set(classes)
    assert classes["gpu.nvidia.com"]["spec"]["extendedResourceName"] == "nvidia.com/gpu"
    assert "extendedResourceName" not in classes["mig.nvidia.com"]["spec"]
    assert classes["mig.nvidia.com"]["spec"]["selectors"] == [{"cel": {"expression":
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"}}]
    on_disk = list(yaml.safe_load_all((REPO / "deploy/dra/deviceclasses.yaml").read_text()))
    assert on_disk == device_classes()


def _a100_slices() -> list[dict]:
    return resource_slices(inst("p4d.24xlarge", "a100", "all-balanced"))


def _break(slices: list[dict], device: int, fn) -> list[dict]:
    out = copy.deepcopy(slices)
    fn(out[1]["spec"]["devices"][device])
    return out


def _set_attr(name: str, value: dict):
    return lambda d: d["attributes"].__setitem__(name, value)


def _del_attr(name: str):
    return lambda d: d["attributes"].pop(name)


BAD = [
    ("missing productName", 0, _del_attr("productName"),
     SliceProblem("a100-gpu.nvidia.com-1", "gpu-0-mig-3g20gb-9-4", "attributes.productName",
                  "missing")),
    ("missing parentUUID", 1, _del_attr("parentUUID"),
     SliceProblem("a100-gpu.nvidia.com-1", "gpu-0-mig-2g10gb-14-0", "attributes.parentUUID",
                  "missing")),
    ("unknown product", 2, _set_attr("productName", {"string": "NVIDIA Quantum 9000"}),
     SliceProblem("a100-gpu.nvidia.com-1", "gpu-0-mig-1g5gb-19-2", "attributes.productName",
                  "unknown GPU product 'NVIDIA Quantum 9000'")),
    ("profile the model lacks", 3, _set_attr("profile", {"string": "1g.6gb"}),
     SliceProblem("a100-gpu.nvidia.com-1", "gpu-0-mig-1g5gb-19-3", "attributes.profile",
                  "A100-40GB has no MIG profile '1g.6gb'")),
    ("bad CUDA version", 0, _set_attr("cudaDriverVersion", {"string": "twelve"}),
     SliceProblem("a100-gpu.nvidia.com-1", "gpu-0-mig-3g20gb-9-4",
                  "attributes.cudaDriverVersion",
                  "expected a version like 12.4.0, got 'twelve'")),
    ("unknown type", 0, _set_attr("type", {"string": "vfio"}),
     SliceProblem("a100-gpu.nvidia.com-1", "gpu-0-mig-3g20gb-9-4", "attributes.type",
                  "expected 'gpu' or 'mig', got 'vfio'")),
    ("other model", 4, _set_attr("productName", {"string": "Tesla T4"}),
     SliceProblem("a100-gpu.nvidia.com-1", "gpu-1-mig-3g20gb-9-4", "attributes.productName",
                  "T4 on a node whose GPUs are A100-40GB (device gpu-0-mig-3g20gb-9-4)")),
]


@pytest.mark.parametrize(("case", "device", "fn", "problem"), BAD, ids=[b[0] for b in BAD])
def test_bad_device_is_a_problem_and_the_rest_still_count(case, device, fn, problem) -> None:
    got = inventory_from_slices(_break(_a100_slices(), device, fn))
    assert got.problems == (problem,)
    assert str(problem).startswith(f"ResourceSlice {problem.slice} device {problem.device}: ")
    assert got.inventory is not None and got.inventory.num_gpus == 8
    assert sum(got.inventory.mig_resources.values()) == 31  # one of 32 MIG devices dropped


def test_garbage_never_raises() -> None:
    slices = [
        None, "x", {"spec": None}, {"spec": {"driver": "gpu.nvidia.com", "devices": 7}},
        {"metadata": {"name": "s"}, "spec": {"driver": "gpu.nvidia.com", "pool": "p",
                                             "devices": [None, {"attributes": "no"}],
                                             "sharedCounters": [1, {"counters": None}]}},
    ]
    got = inventory_from_slices(slices)
    assert got.inventory is None
    assert {(p.slice, p.field) for p in got.problems} == {
        ("s", "devices"), ("s", "attributes.type"), ("s", "sharedCounters")}


def test_other_drivers_and_stale_generations_are_ignored() -> None:
    sl = resource_slices(inst("p3.8xlarge", "v100"))
    other = copy.deepcopy(sl[0])
    other["spec"]["driver"] = "tpu.example.com"
    stale = copy.deepcopy(sl[0])
    stale["metadata"]["name"] = "old"
    stale["spec"]["devices"] = [copy.deepcopy(sl[0]["spec"]["devices"][0]) | {"name": "gpu-9"}]
    stale["spec"]["devices"][0]["attributes"]["minor"] = {"int": 9}
    newer = copy.deepcopy(sl[0])
    newer["spec"]["pool"]["generation"] = 2
    inv = inventory_from_slices([other, stale, newer]).inventory
    assert inv is not None and inv.num_gpus == 4


def test_driver_qualified_attribute_names_are_the_same_attribute() -> None:
    spec = inst("p3.8xlarge", "v100")
    sl = resource_slices(spec, nvlink_domains=nvlink_domains_for(spec))
    for d in sl[0]["spec"]["devices"]:
        d["attributes"] = {
            (k if "/" in k else f"gpu.nvidia.com/{k}"): v for k, v in d["attributes"].items()
        }
    inv = inventory_from_slices(sl).inventory
    assert inv == GpuInventory("V100-16GB", 4, 16384, 12040, (), 7, {}, (0, 0, 0, 0))
