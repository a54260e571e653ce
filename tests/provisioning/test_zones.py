"""Zones in provisioning: the on-demand zone rule, and a gang's nodes launched (and absorbed by
booting nodes) inside one zone."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gpufleet.decisions import CapacityType, Launch
from gpufleet.market.bidding import ZoneMarket, get_spot_strategy
from gpufleet.provisioning import (
    InFlight,
    NodeShape,
    Offer,
    PendingPod,
    ScaleUpPolicy,
    on_demand_zone,
    one_zone,
)
from gpufleet.state import ResourceRequest

P3_16X = NodeShape("V100-16GB", 8, 64000, 488 * 1024, 16384, 12040)
V100 = frozenset({"V100-16GB"})
SPOT_16X = Offer("p3.16xlarge", CapacityType.SPOT, P3_16X, 8.0)
OD_16X = Offer("p3.16xlarge", CapacityType.ON_DEMAND, P3_16X, 24.48, "us-east-1b")
EIGHT = ResourceRequest(cpu_milli=32000, memory_mib=96 * 1024, num_gpu=8, gpu_models=V100)


def gang(job: str = "g", replicas: int = 2) -> list[PendingPod]:
    return [PendingPod(job, EIGHT, True, 0.0, gang_size=replicas) for _ in range(replicas)]


def singles(n: int) -> list[PendingPod]:
    return [PendingPod(f"s{i}", EIGHT, True, 0.0) for i in range(n)]


def markets(*zones: str) -> dict[str, list[ZoneMarket]]:
    return {"p3.16xlarge": [ZoneMarket(z, Decimal("24.48"), (Decimal("8.0"),) * 10, (1,) * 96)
                            for z in zones]}


def test_on_demand_zone_is_cheapest_then_fewest_nodes_then_listed_first() -> None:
    zones = ["a", "b", "c"]
    flat = dict.fromkeys(zones, 24.48)
    assert on_demand_zone(zones, flat, {}) == "a"
    assert on_demand_zone(zones, flat, {"a": 2, "b": 0, "c": 1}) == "b"  # docstring example
    assert on_demand_zone(zones, flat, {"a": 2, "b": 1, "c": 1}) == "b"
    assert on_demand_zone(zones, {"a": 3.0, "b": 2.5, "c": 2.5}, {"b": 5}) == "c"
    assert on_demand_zone(zones, {"c": 9.0}, {}) == "c"  # only priced zones are offered
    with pytest.raises(ValueError):
        on_demand_zone(zones, {}, {})


def test_spread_spot_plan_is_merged_into_the_first_zone_for_a_gang() -> None:
    plan = get_spot_strategy("capacity-aware").plan("p3.16xlarge", markets("x", "y")["p3.16xlarge"],
                                                    4)
    assert [(x.zone, x.count) for x in plan] == [("x", 2), ("y", 2)]
    assert [(x.zone, x.count) for x in one_zone(plan)] == [("x", 4)]
    assert one_zone(plan[:1]) == plan[:1]


def test_gang_nodes_are_launched_in_one_zone_and_singles_are_spread() -> None:
    strat = get_spot_strategy("capacity-aware")
    pol = ScaleUpPolicy()
    out = pol.decide(gang(replicas=3), [SPOT_16X, OD_16X], (), markets("x", "y"), strat)
    assert out == [Launch("p3.16xlarge", "x", CapacityType.SPOT, 3, max_price=Decimal("24.48"),
                          reason="capacity-aware", all_or_none=True)]  # none of it in part
    spread = pol.decide(singles(3), [SPOT_16X, OD_16X], (), markets("x", "y"), strat)
    assert [(x.zone, x.count) for x in spread] == [("x", 2), ("y", 1)]


def test_gang_and_other_pods_are_launched_apart() -> None:
    """The gang's group is its own: its launch is one zone even with other pods pending."""
    out = ScaleUpPolicy().decide(gang() + singles(2), [SPOT_16X, OD_16X], (),
                                 markets("x", "y"), get_spot_strategy("capacity-aware"))
    counts = sorted((x.zone, x.count, x.all_or_none) for x in out)
    assert counts == [("x", 1, False), ("x", 2, True), ("y", 1, False)]


def test_booting_nodes_absorb_a_gang_only_inside_one_zone() -> None:
    pol = ScaleUpPolicy(gpu_threshold=0)
    offers = [SPOT_16X, OD_16X]
    strat = get_spot_strategy("capacity-aware")
    split = [InFlight(P3_16X, True, "x"), InFlight(P3_16X, True, "y")]
    # one node booting in each zone: they would take two singles, but not a 2-node gang
    assert pol.decide(singles(2), offers, split, markets("x", "y"), strat) == []
    out = pol.decide(gang(), offers, split, markets("x", "y"), strat)
    assert [(x.zone, x.count) for x in out] == [("x", 2)]
    together = [InFlight(P3_16X, True, "y"), InFlight(P3_16X, True, "y")]
    assert pol.decide(gang(), offers, together, markets("x", "y"), strat) == []
