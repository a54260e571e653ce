"""Scale-up weighs spot by expected cost (``provisioning.scale_up.spot_score`` over
``market.spot_cost``), worked by hand on the p3 prices of ``test_scale_up``."""

from __future__ import annotations

from decimal import Decimal

import pytest
from p3_offers import OFFERS

from gpufleet.decisions import CapacityType, Launch
from gpufleet.market.bidding import ZoneMarket, get_spot_strategy
from gpufleet.market.spot_cost import SpotRisk
from gpufleet.provisioning import PendingPod, ScaleUpPolicy
from gpufleet.provisioning.scale_up import spot_score
from gpufleet.state import ResourceRequest

SPOT = {"p3.2xlarge": ("0.918", "3.06"), "p3.16xlarge": ("8.0", "24.48")}


def markets(zones: list[str]) -> dict[str, list[ZoneMarket]]:
    """Every zone at the offer's spot price, available for the last 96 ticks."""
    return {it: [ZoneMarket(z, Decimal(od), (Decimal(p),) * 10, (1,) * 96) for z in zones]
            for it, (p, od) in SPOT.items()}


def pod(spot: bool = True, milli: int = 1000) -> PendingPod:
    r = ResourceRequest(cpu_milli=4000, memory_mib=12288, num_gpu=1, gpu_milli=milli,
                        gpu_models=frozenset({"V100-16GB"}))
    return PendingPod("j", r, spot, 0.0)

TEN_H = SpotRisk(36_000.0, 30.0, 120.0, checkpoints=True)
HAZARD = {"us-east-1a": 0.5, "us-east-1b": 20.0}  # reclaims per node-hour


def hazard(_: str, zone: str) -> float:
    return HAZARD[zone]


def risky(p: PendingPod, risk: SpotRisk) -> PendingPod:
    return PendingPod(p.job_id, p.request, p.spot_ok, p.waited_s, risk=risk)


def test_zones_whose_expected_loss_eats_the_discount_are_dropped() -> None:
    # two 1-GPU pods: p3.2x spot scores 0.918, on-demand 3.06. Zone 1a (λ 0.5): 1.227 < 3.06
    # keeps; zone 1b (λ 20): 7.166 > 3.06 goes. Diversified would spread 1 + 1 over both zones
    # (same price); by expected cost both nodes go to 1a.
    pods = [risky(pod(), TEN_H), risky(pod(), TEN_H)]
    mk = markets(["us-east-1a", "us-east-1b"])
    pol = ScaleUpPolicy(provisioning_delay_s=180.0)
    strategy = get_spot_strategy("diversified")
    spread = pol.decide(pods, OFFERS, (), mk, strategy)
    assert sorted(x.zone for x in spread) == ["us-east-1a", "us-east-1b"]
    out = pol.decide(pods, OFFERS, (), mk, strategy, hazard)
    assert out == [Launch("p3.2xlarge", "us-east-1a", CapacityType.SPOT, 2,
                          max_price=Decimal("3.06"), reason="diversified")]


def test_every_zone_too_risky_means_on_demand() -> None:
    pods = [risky(pod(), TEN_H), risky(pod(), TEN_H)]
    mk = markets(["us-east-1b"])
    out = ScaleUpPolicy(provisioning_delay_s=180.0).decide(
        pods, OFFERS, (), mk, get_spot_strategy("diversified"), hazard)
    assert out == [Launch("p3.2xlarge", "us-east-1a", CapacityType.ON_DEMAND, 2,
                          reason="2 pending pods")]


def test_a_spot_group_sent_to_on_demand_packs_with_the_on_demand_group() -> None:
    # two half-GPU pods of one shape, one spot-tolerant but unable to checkpoint (spot ruled
    # out), one on-demand only: packed together they share one p3.2xlarge instead of taking
    # one each
    no_ckpt = SpotRisk(36_000.0, 30.0, 120.0, checkpoints=False)
    pods = [risky(pod(milli=500), no_ckpt), pod(spot=False, milli=500)]
    mk = markets(["us-east-1a"])
    pol = ScaleUpPolicy(gpu_threshold=0.0, provisioning_delay_s=180.0)
    out = pol.decide(pods, OFFERS, (), mk, get_spot_strategy("diversified"), hazard)
    assert out == [Launch("p3.2xlarge", "us-east-1a", CapacityType.ON_DEMAND, 1,
                          reason="2 pending pods")]
    # a spot launch stays its own: the checkpointing pod goes to spot, the other on-demand
    pods = [risky(pod(milli=500), TEN_H), pod(spot=False, milli=500)]
    out = pol.decide(pods, OFFERS, (), mk, get_spot_strategy("diversified"), hazard)
    assert [(x.capacity_type, x.count) for x in out] == [
        (CapacityType.ON_DEMAND, 1), (CapacityType.SPOT, 1)] or [
        (x.capacity_type, x.count) for x in out] == [
        (CapacityType.SPOT, 1), (CapacityType.ON_DEMAND, 1)]


def test_the_value_of_time_flips_a_risky_zone_to_on_demand() -> None:
    # one 1-GPU pod, 10 h left, spot 0.918 against on-demand 3.06 (per useful GPU-hour: both
    # scores are the p3.2xlarge's prices over one GPU). Zone 1a reclaims 0.5/h, zone 1c 2/h.
    # v = 0: 1a 1.22707, 1c 1.79114 — both beat 3.06, 1a first.
    # v = 10 $/GPU-h (the loss priced at 3.06 + 10): 1a 2.10017 still beats 3.06, 1c 4.37068
    # does not and is dropped (hand-worked in tests/market/test_spot_cost.py).
    HAZARD["us-east-1c"] = 2.0
    try:
        spot_offer = OFFERS[2]
        zones = markets(["us-east-1a", "us-east-1c"])["p3.2xlarge"]
        for v, kept, best in ((0.0, ["us-east-1a", "us-east-1c"], 1.22707),
                              (10.0, ["us-east-1a"], 2.10017)):
            p = risky(pod(), SpotRisk(36_000.0, 30.0, 120.0, True, value_of_time=v))
            score, left = spot_score(0.918, spot_offer, zones, [p], 1, 3.06, hazard, 180.0)
            assert [z.zone for z in left] == kept
            assert score == pytest.approx(best, abs=5e-5)
        # only zone 1c on offer: v = 0 launches spot there, v = 10 launches on-demand
        mk = markets(["us-east-1c"])
        pol = ScaleUpPolicy(provisioning_delay_s=180.0)
        for v, ct in ((0.0, CapacityType.SPOT), (10.0, CapacityType.ON_DEMAND)):
            r = SpotRisk(36_000.0, 30.0, 120.0, True, value_of_time=v)
            out = pol.decide([risky(pod(), r), risky(pod(), r)], OFFERS, (), mk,
                             get_spot_strategy("diversified"), hazard)
            assert [x.capacity_type for x in out] == [ct]
    finally:
        del HAZARD["us-east-1c"]


def test_a_latency_sensitive_pod_needs_an_on_demand_launch_to_beat() -> None:
    # with only spot offers (od_score inf) a group is launched on spot on price alone — unless
    # a pod of it is latency-sensitive: it goes to spot only where spot beats on-demand, and
    # there is no on-demand launch to beat
    spot_offer = OFFERS[2]
    zones = markets(["us-east-1a"])["p3.2xlarge"]
    plain = risky(pod(), SpotRisk(36_000.0, 30.0, 120.0, True, value_of_time=10.0))
    sens = risky(pod(), SpotRisk(36_000.0, 30.0, 120.0, True, value_of_time=10.0,
                                 latency_sensitive=True))
    inf = float("inf")
    assert spot_score(0.918, spot_offer, zones, [plain], 1, inf, hazard, 180.0) == (
        0.918, zones)
    assert spot_score(0.918, spot_offer, zones, [plain, sens], 1, inf, hazard, 180.0) == (
        inf, [])
    # a team budget that says spot only is the harder limit: the zones stay
    budget = PendingPod(sens.job_id, sens.request, True, 0.0, spot_only=True, risk=sens.risk)
    assert spot_score(0.918, spot_offer, zones, [budget], 1, inf, hazard, 180.0) == (
        0.918, zones)
    # with the on-demand offer there, the rule with its v decides: 1a at 2.10017 < 3.06 → spot
    score, left = spot_score(0.918, spot_offer, zones, [sens], 1, 3.06, hazard, 180.0)
    assert (score, [z.zone for z in left]) == (pytest.approx(2.10017, abs=5e-5), ["us-east-1a"])
