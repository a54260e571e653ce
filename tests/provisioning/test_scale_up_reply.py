"""Scale-up returns the pods it could not provision as data, with the reason."""

from __future__ import annotations

from gpufleet.decisions import CapacityType
from gpufleet.provisioning import (
    NodeShape,
    Offer,
    PendingPod,
    ScaleUpPolicy,
    ScaleUpReply,
    Unprovisioned,
)
from gpufleet.state import ResourceRequest

P3 = NodeShape("V100-16GB", 1, 8000, 61 * 1024, 16384, 12040)
OD = Offer("p3.2xlarge", CapacityType.ON_DEMAND, P3, 3.06, "us-east-1a")
SPOT = Offer("p3.2xlarge", CapacityType.SPOT, P3, 0.9)
ONE = ResourceRequest(cpu_milli=1000, memory_mib=1024, num_gpu=1)
A100 = ResourceRequest(cpu_milli=1000, memory_mib=1024, num_gpu=1,
                       gpu_models=frozenset({"A100-80GB"}))


def test_pods_no_offer_fits_come_back_with_the_reason() -> None:
    pods = [PendingPod("v", ONE, False, 100.0), PendingPod("a", A100, False, 100.0)]
    reply = ScaleUpPolicy(gpu_threshold=0).plan(pods, [OD])
    assert [x.instance_type for x in reply.launches] == ["p3.2xlarge"]
    assert reply.unprovisioned == (Unprovisioned("a", "no offer fits"),)
    assert ScaleUpPolicy(gpu_threshold=0).decide(pods, [OD]) == list(reply.launches)


def test_spot_only_without_a_strategy_is_declined_not_dropped() -> None:
    reply = ScaleUpPolicy(gpu_threshold=0).plan([PendingPod("s", ONE, True, 0.0)], [SPOT])
    assert reply.launches == ()
    assert [u.job_id for u in reply.unprovisioned] == ["s"]
    assert "no on-demand offer" in reply.unprovisioned[0].reason


def test_below_the_trigger_nothing_is_listed() -> None:
    assert ScaleUpPolicy().plan([PendingPod("v", A100, False, 0.0)], [OD]) == ScaleUpReply()
