"""What the node's ResourceSlice publishes for a GPU (the API server's validation of it, and
publish's create/update/unchanged, are in tests/node_plugin/test_node_plugin_live.py)."""

from __future__ import annotations

from gpufleet.k8s.dra.slices import device_attribute
from gpufleet.node_plugin import DRIVER
from gpufleet.node_plugin.inventory import Gpu
from gpufleet.node_plugin.slices import _same, desired_spec, slice_name

GPU = Gpu(uuid="GPU-0000", index=3, minor=5, product="NVIDIA H100", memoryMiB=81559)
TAINT = {"key": f"{DRIVER}/unhealthy", "value": "xid-79", "effect": "NoExecute",
         "timeAdded": "2026-12-07T09:00:00Z"}


def test_one_shareable_device_per_gpu_with_memory_and_cores() -> None:
    assert slice_name("n1") == f"n1-{DRIVER}"
    spec = desired_spec("n1", [GPU], generation=4)
    assert spec == {
        "driver": DRIVER, "nodeName": "n1",
        "pool": {"name": "n1", "generation": 4, "resourceSliceCount": 1},
        "devices": [{
            "name": "gpu-3", "allowMultipleAllocations": True,
            # NVIDIA's driver's names; the versions default to CUDA 12.4 on driver 550.54.15
            "attributes": {"type": {"string": "gpu"}, "productName": {"string": "NVIDIA H100"},
                           "uuid": {"string": "GPU-0000"}, "index": {"int": 3},
                           "minor": {"int": 5}, "cudaDriverVersion": {"version": "12.4.0"},
                           "driverVersion": {"version": "550.54.15"}},
            "capacity": {
                # all of it unless asked; asked from 1 GiB up in MiB (the MPS limit's unit)
                "memory": {"value": "81559Mi", "requestPolicy": {
                    "default": "81559Mi", "validRange": {"min": "1Gi", "step": "1Mi"}}},
                "cores": {"value": "100", "requestPolicy": {
                    "default": "100", "validRange": {"min": "1", "max": "100", "step": "1"}}},
            },
        }],
    }


def test_a_new_generation_alone_is_no_change() -> None:
    assert _same(desired_spec("n1", [GPU], 7), desired_spec("n1", [GPU], 1))
    other = GPU.model_copy(update={"memory_mib": 40960})
    assert not _same(desired_spec("n1", [other]), desired_spec("n1", [GPU]))
    assert not _same(desired_spec("n2", [GPU]), desired_spec("n1", [GPU]))
    # the API server's canonical quantities are the same quantities: 81920 MiB = 80 GiB
    eighty = GPU.model_copy(update={"memory_mib": 81920})
    live = desired_spec("n1", [eighty])
    cap = live["devices"][0]["capacity"]["memory"]
    cap["value"] = cap["requestPolicy"]["default"] = "80Gi"
    assert _same(live, desired_spec("n1", [eighty]))
    cap["value"] = "81Gi"
    assert not _same(live, desired_spec("n1", [eighty]))


def test_optional_attributes_and_semver_versions() -> None:
    gpu = GPU.model_copy(update={"cuda_driver_version": "12.8", "driver_version": "535.104.05",
                                 "cuda_compute_capability": "9.0", "nvlink_domain": 2})
    (dev,) = desired_spec("n1", [gpu])["devices"]
    assert {k: v for k, v in dev["attributes"].items() if k not in ("uuid", "index", "minor")} == {
        "type": {"string": "gpu"}, "productName": {"string": "NVIDIA H100"},
        "cudaDriverVersion": {"version": "12.8.0"},
        "driverVersion": {"version": "535.104.5"},  # semver: no leading zero
        "cudaComputeCapability": {"version": "9.0.0"}, "nvlinkDomain": {"int": 2}}
    # the allocator's reader finds them as it finds NVIDIA's
    assert [device_attribute(dev, a) for a in ("type", "productName", "minor",
                                                 "cudaDriverVersion")] == [
        "gpu", "NVIDIA H100", 5, "12.8.0"]


def test_an_unhealthy_device_carries_its_taint() -> None:
    spec = desired_spec("n1", [GPU], taints={"gpu-3": [TAINT]})
    assert spec["devices"][0]["taints"] == [TAINT]
    assert "taints" not in desired_spec("n1", [GPU], taints={"gpu-9": [TAINT]})["devices"][0]
    # a taint added or removed is a change; the same taint written back with another
    # timeAdded format is not
    assert not _same(spec, desired_spec("n1", [GPU]))
    assert not _same(desired_spec("n1", [GPU]), spec)
    live = desired_spec("n1", [GPU], taints={"gpu-3": [{**TAINT,
                                                       "timeAdded": "2026-12-07T09:00:00+00:00"}]})
    assert _same(live, spec)
    other = desired_spec("n1", [GPU], taints={"gpu-3": [{**TAINT, "effect": "NoSchedule"}]})
    assert not _same(other, spec)
