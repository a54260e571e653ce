"""Scale-up for MIG pods: MIG-mode offers only, compute share as useful GPUs,
a Launch with mig_config out."""

from __future__ import annotations

from gpufleet.decisions import CapacityType, Launch
from gpufleet.provisioning import MIG_CONFIG, NodeShape, Offer, PendingPod, ScaleUpPolicy
from gpufleet.provisioning import score as score_of
from gpufleet.state import ResourceRequest

A100 = frozenset({"A100-40GB"})
WHOLE_8 = NodeShape("A100-40GB", 8, 96000, 1179648, 40960, 12040)
MIG_8 = NodeShape("A100-40GB", 8, 96000, 1179648, 40960, 12040, mig_compute=7)
MIG_1 = NodeShape("A100-40GB", 1, 12000, 96256, 40960, 12040, mig_compute=7)
OFFERS = [
    Offer("p4d.24xlarge", CapacityType.ON_DEMAND, WHOLE_8, 32.77, "us-east-1a"),
    Offer("p4d.24xlarge", CapacityType.ON_DEMAND, MIG_8, 32.77, "us-east-1a"),
]


def mig_pod(profile: str = "1g.5gb", waited: float = 0.0) -> PendingPod:
    r = ResourceRequest(cpu_milli=1000, memory_mib=4096, num_gpu=1, gpu_models=A100,
                        mig_profile=profile)
    return PendingPod("m", r, False, waited)


def test_mig_pods_launch_a_mig_node() -> None:
    # 14 × 1g.5gb = 14 × 142 milli = 1.988 GPUs < 2: below the threshold until one has waited
    pol = ScaleUpPolicy(gpu_threshold=2, max_wait_s=60)
    assert pol.decide([mig_pod()] * 14, OFFERS) == []
    out = pol.decide([mig_pod()] * 15, OFFERS)  # 2.13 GPUs
    assert out == [Launch("p4d.24xlarge", "us-east-1a", CapacityType.ON_DEMAND, 1,
                          reason="15 pending pods", mig_config=MIG_CONFIG)]


def test_whole_gpu_pods_never_take_the_mig_offer() -> None:
    r = ResourceRequest(cpu_milli=4000, memory_mib=4096, num_gpu=1, gpu_models=A100)
    out = ScaleUpPolicy().decide([PendingPod("w", r, False, 100.0)] * 3, OFFERS)
    assert len(out) == 1 and out[0].mig_config is None and out[0].count == 1


def test_score_counts_compute_share() -> None:
    # 7 × 1g.5gb on a 1-GPU MIG node: 1 node, useful = 7 × 0.142 = 0.994 GPU
    reqs = [mig_pod().request] * 7
    cost, nodes = score_of(reqs, Offer("gn7", CapacityType.ON_DEMAND, MIG_1, 4.825))
    assert nodes == 1 and abs(cost - 4.825 / 0.994) < 1e-9
    # the 8th does not fit the first GPU: two nodes
    assert score_of(reqs + reqs[:1], Offer("gn7", CapacityType.ON_DEMAND, MIG_1, 4.825))[1] == 2
