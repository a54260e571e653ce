"""Node objects as the NVIDIA device plugin and GPU Feature Discovery publish them."""

from __future__ import annotations

import pytest

from gpufleet.catalog.gpus import default_gpu_catalog
from gpufleet.catalog.instances import default_instance_catalog
from gpufleet.errors import InputError
from gpufleet.k8s.translate.node_objects import (
    GPU_RESOURCE,
    KWOK_ANNOTATION,
    GpuNodeSpec,
    mig_layout,
    node_object,
    spec_from_instance,
    spec_from_openb,
)
from gpufleet.traces.openb import OpenbNode

INSTANCES = default_instance_catalog()


def test_whole_gpu_node_has_device_plugin_capacity_and_gfd_labels() -> None:
    node = node_object(
        spec_from_instance(INSTANCES["p3.8xlarge"], "v", zone="us-east-1b", capacity_type="spot")
    )
    labels = node["metadata"]["labels"]
    cap = node["status"]["capacity"]
    assert cap[GPU_RESOURCE] == "4"
    assert cap["cpu"] == "32" and cap["memory"] == f"{244 * 1024}Mi"
    assert node["status"]["allocatable"] == cap
    assert labels["nvidia.com/gpu.product"] == "Tesla-V100-SXM2-16GB"
    assert labels["nvidia.com/gpu.count"] == "4"
    assert labels["nvidia.com/gpu.memory"] == "16384"
    assert labels["nvidia.com/gpu.family"] == "volta"
    assert labels["nvidia.com/mig.strategy"] == "none"
    assert labels["topology.kubernetes.io/zone"] == "us-east-1b"
    assert labels["topology.kubernetes.io/region"] == "us-east-1"
    assert labels["node.kubernetes.io/instance-type"] == "p3.8xlarge"
    assert labels["karpenter.sh/capacity-type"] == "spot"
    assert node["metadata"]["annotations"][KWOK_ANNOTATION] == "fake"
    assert "taints" not in node["spec"]


def test_product_label_resolves_back_to_the_catalog_model() -> None:
    catalog = default_gpu_catalog()
    for itype in ("p4d.24xlarge", "g4dn.xlarge", "g5.xlarge", "g6.xlarge", "p5.48xlarge"):
        it = INSTANCES[itype]
        labels = node_object(spec_from_instance(it, "n"))["metadata"]["labels"]
        assert catalog.resolve(labels["nvidia.com/gpu.product"]) == it.gpu_model, itype


def test_cuda_labels_split_driver_and_runtime_versions() -> None:
    labels = node_object(spec_from_instance(INSTANCES["p2.xlarge"], "k80"))["metadata"]["labels"]
    # p2 is pinned to CUDA 11.8: the runtime labels say so, the driver labels give its driver.
    assert (labels["nvidia.com/cuda.runtime.major"], labels["nvidia.com/cuda.runtime.minor"]) == (
        "11",
        "8",
    )
    assert labels["nvidia.com/cuda.driver.major"] == "520"
    t4 = node_object(spec_from_instance(INSTANCES["g4dn.xlarge"], "t4"))["metadata"]["labels"]
    assert t4["nvidia.com/gpu.family"] == "turing"
    assert t4["nvidia.com/cuda.runtime.major"] == "12"


def test_mig_mixed_strategy_exposes_only_mig_devices() -> None:
    node = node_object(spec_from_instance(INSTANCES["p4d.24xlarge"], "a", mig_config="all-1g.5gb"))
    cap = node["status"]["capacity"]
    labels = node["metadata"]["labels"]
    assert cap[GPU_RESOURCE] == "0"
    assert cap["nvidia.com/mig-1g.5gb"] == str(7 * 8)
    assert labels["nvidia.com/mig.strategy"] == "mixed"
    assert labels["nvidia.com/mig.config"] == "all-1g.5gb"
    assert labels["nvidia.com/mig-1g.5gb.memory"] == "5120"


def test_balanced_mig_layout_fits_the_gpu() -> None:
    for model_name in ("A100-40GB", "A100-80GB", "H100-80GB"):
        model = default_gpu_catalog()[model_name]
        layout = mig_layout(model, "all-balanced")
        assert model.mig is not None
        assert sum(n for n in layout.values()) == 4
        used = sum(model.mig.profiles[p].compute * n for p, n in layout.items())
        assert used <= model.mig.compute_slices
    assert mig_layout(default_gpu_catalog()["A100-40GB"], "all-balanced") == {
        "1g.5gb": 2,
        "2g.10gb": 1,
        "3g.20gb": 1,
    }


def test_bad_mig_config_and_capacity_type_are_input_errors() -> None:
    with pytest.raises(InputError, match="unknown MIG config"):
        node_object(spec_from_instance(INSTANCES["p4d.24xlarge"], "a", mig_config="all-9g.99gb"))
    with pytest.raises(InputError, match="no MIG support"):
        node_object(spec_from_instance(INSTANCES["p3.2xlarge"], "v", mig_config="all-1g.5gb"))
    with pytest.raises(InputError, match="capacity type"):
        node_object(GpuNodeSpec(name="x", cpu_milli=1000, memory_mib=1024, capacity_type="x"))


def test_openb_rows_become_nodes_cpu_only_included() -> None:
    gpu = node_object(spec_from_openb(OpenbNode("openb-node-0001", 64000, 262144, 2, "P100")))
    assert gpu["status"]["capacity"][GPU_RESOURCE] == "2"
    assert gpu["metadata"]["labels"]["nvidia.com/gpu.product"] == "Tesla-P100-PCIE-16GB"
    assert gpu["metadata"]["labels"]["node.kubernetes.io/instance-type"] == "openb-2xP100"
    cpu = node_object(spec_from_openb(OpenbNode("openb-node-9", 96000, 786432, 0, None)))
    assert GPU_RESOURCE not in cpu["status"]["capacity"]
    assert "nvidia.com/gpu.product" not in cpu["metadata"]["labels"]
    fractional_cpu = node_object(GpuNodeSpec(name="c", cpu_milli=1500, memory_mib=512))
    assert fractional_cpu["status"]["capacity"]["cpu"] == "1500m"
