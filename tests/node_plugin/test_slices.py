"""What the node's ResourceSlice publishes for a GPU (the API server's validation of it, and
publish's create/update/unchanged, are in tests/node_plugin/test_node_plugin_live.py)."""

from __future__ import annotations

from gpufleet.node_plugin import DRIVER
from gpufleet.node_plugin.inventory import Gpu
from gpufleet.node_plugin.slices import _same, desired_spec, slice_name

GPU = Gpu(uuid="GPU-0000", index=3, minor=5, product="NVIDIA H100", memoryMiB=81559)


def test_one_shareable_device_per_gpu_with_memory_and_cores() -> None:
    assert slice_name("n1") == f"n1-{DRIVER}"
    spec = desired_spec("n1", [GPU], generation=4)
    assert spec == {
        "driver": DRIVER, "nodeName": "n1",
        "pool": {"name": "n1", "generation": 4, "resourceSliceCount": 1},
        "devices": [{
            "name": "gpu-3", "allowMultipleAllocations": True,
            "attributes": {"product": {"string": "NVIDIA H100"}, "uuid": {"string": "GPU-0000"},
                           "index": {"int": 3}, "minor": {"int": 5}},
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
