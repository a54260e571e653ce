"""Node JSON (device plugin + GFD labels) → FleetState rows."""

from __future__ import annotations

from gpufleet.decisions import CapacityType
from gpufleet.k8s.translate.nodes import cuda_of, node_spec, taints_of
from gpufleet.state import FleetState


def node(name: str, alloc: dict, labels: dict | None = None, **spec: object) -> dict:
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": dict(spec),
            "status": {"allocatable": alloc, "capacity": alloc}}


def test_whole_gpu_node_with_gfd_labels() -> None:
    n = node("v100-0", {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8"}, {
        "nvidia.com/gpu.product": "Tesla-V100-SXM2-16GB", "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.memory": "16384", "nvidia.com/cuda.runtime.major": "12",
        "nvidia.com/cuda.runtime.minor": "2", "topology.kubernetes.io/zone": "us-east-1a",
        "node.kubernetes.io/instance-type": "p3.16xlarge", "karpenter.sh/capacity-type": "spot",
    })
    s = node_spec(n)
    assert (s.gpu_model, s.num_gpus, s.mig_gpus) == ("V100-16GB", 8, ())
    assert (s.cpu_milli, s.memory_mib, s.gpu_memory_mib, s.cuda_driver) == (
        32000, 256 * 1024, 16384, 12020)
    assert s.info.zone == "us-east-1a" and s.info.instance_type == "p3.16xlarge"
    assert s.info.capacity_type is CapacityType.SPOT
    st = FleetState()
    row = s.add_to(st)
    assert st.num_gpus[row] == 8 and st.free_milli[row, :8].tolist() == [1000] * 8


def test_mig_node_mixed_strategy_takes_gpus_behind_mig_resources() -> None:
    n = node("a100-0", {"cpu": "96", "memory": "1152Gi", "nvidia.com/gpu": "6",
                        "nvidia.com/mig-1g.5gb": "7", "nvidia.com/mig-3g.20gb": "2"}, {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/gpu.count": "8",
        "nvidia.com/mig.strategy": "mixed",
    })
    s = node_spec(n)
    assert s.gpu_model == "A100-40GB" and s.num_gpus == 8 and s.mig_gpus == (6, 7)
    assert s.gpu_memory_mib == 40 * 1024  # from the catalog when GFD's label is absent
    st = FleetState()
    row = s.add_to(st)
    assert st.mig_enabled[row, :8].tolist() == [False] * 6 + [True] * 2


def test_all_mig_config_makes_every_gpu_mig() -> None:
    n = node("a100-1", {"cpu": "8", "memory": "64Gi", "nvidia.com/mig-1g.5gb": "14"}, {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/gpu.count": "2",
        "nvidia.com/mig.config": "all-1g.5gb"})
    assert node_spec(n).mig_gpus == (0, 1)


def test_unknown_product_keeps_its_name_and_cpu_node_has_no_gpus() -> None:
    assert node_spec(node("x", {"nvidia.com/gpu": "1"},
                          {"nvidia.com/gpu.product": "Acme-X1"})).gpu_model == "Acme-X1"
    s = node_spec(node("cpu", {"cpu": "500m", "memory": "1024Ki"}))
    assert (s.num_gpus, s.gpu_model, s.cpu_milli, s.memory_mib) == (0, "", 500, 1)


def test_cuda_from_driver_version_uses_nvidia_minimum_driver_table() -> None:
    assert cuda_of({"nvidia.com/cuda.driver.major": "535"}) == 12020
    assert cuda_of({"nvidia.com/cuda.driver-version.major": "550"}) == 12040
    assert cuda_of({"nvidia.com/cuda.runtime-version.major": "11",
                    "nvidia.com/cuda.runtime-version.minor": "8"}) == 11080


def test_taints_and_cordon() -> None:
    n = node("t", {}, None, unschedulable=True, taints=[
        {"key": "gpu", "value": "true", "effect": "NoSchedule"},
        {"key": "soft", "effect": "PreferNoSchedule"},
        {"key": "k", "effect": "NoExecute"}])
    assert taints_of(n) == {"gpu=true:NoSchedule", "k:NoExecute",
                            "node.kubernetes.io/unschedulable:NoSchedule"}
