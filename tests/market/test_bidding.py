from __future__ import annotations

import itertools
import random
from decimal import Decimal as D

import pytest

from gpufleet.decisions import CapacityType
from gpufleet.errors import InputError
from gpufleet.market.bidding import (
    CapacityAwareSpot,
    DiversifiedSpot,
    SpotBidAgent,
    SpotStrategy,
    ZoneMarket,
    bids_anywhere,
    get_spot_strategy,
    list_spot_strategies,
)


def prices(*xs: str) -> tuple[D, ...]:
    return tuple(D(x) for x in xs)


@pytest.mark.parametrize(
    ("history", "bids", "why"),
    [
        (prices(*["1.00"] * 12), False, "flat price: current is part of the average, never < 0.9x"),
        (prices("1.00"), False, "a single price is its own average"),
        (prices(*["1.00"] * 9, "0.80"), True, "0.80 < 0.9 * 0.98 and < 1.2 max"),
        (prices(*["1.00"] * 9, "0.89"), True, "mean 0.989: 0.89 < 0.8901 by a hair"),
        (prices(*["1.00"] * 9, "0.8902"), False, "mean 0.98902: 0.8902 >= 0.890118"),
        (prices("1.00", *["1.50"] * 8, "1.25"), False, "1.25 < 0.9 * 1.425 but above max 1.20"),
        (prices("1.00", "2.00", "2.00", "1.15"), True, "1.15 < 1.2 max and < 0.9 * 1.5375"),
        ((), False, "no prices, no bid"),
    ],
)
def test_bid_agent_rule(history: tuple[D, ...], bids: bool, why: str) -> None:
    agent = SpotBidAgent()
    assert agent.should_bid(history) is bids, why


def test_bid_agent_only_window_counts() -> None:
    agent = SpotBidAgent()
    # 20 old expensive prices then 10 at 1.0: the window forgets the old ones -> flat -> no bid
    hist = prices("1.0", *["5.0"] * 20, *["1.0"] * 10)
    assert not agent.should_bid(hist)
    assert agent.should_bid((*hist[:-1], D("0.5")))


def test_bid_agent_plan_uses_cheapest_zone_at_max_price() -> None:
    a = ZoneMarket("a", D("3.06"), prices(*["1.0"] * 9, "0.5"))
    b = ZoneMarket("b", D("3.06"), prices(*["1.0"] * 9, "0.6"))
    (launch,) = SpotBidAgent().plan("p3.2xlarge", [b, a], 3)
    assert (launch.zone, launch.count, launch.capacity_type) == ("a", 3, CapacityType.SPOT)
    assert launch.max_price == D("1.20")
    flat = ZoneMarket("a", D("3.06"), prices(*["1.0"] * 10))
    assert SpotBidAgent().plan("p3.2xlarge", [flat], 3) == []


def test_diversified_spreads_over_cheapest_zones() -> None:
    ms = [
        ZoneMarket(z, D("3"), prices(p))
        for z, p in [("a", "1.0"), ("b", "0.7"), ("c", "0.9"), ("d", "2")]
    ]
    plan = DiversifiedSpot(zones=3).plan("p3.2xlarge", ms, 5)
    assert [(lch.zone, lch.count) for lch in plan] == [("b", 2), ("c", 2), ("a", 1)]
    assert all(lch.max_price == D("3") for lch in plan)


def test_capacity_aware_docstring_example() -> None:
    ms = [
        ZoneMarket("a", D("3"), prices("1.0"), (1,) * 9 + (0,)),
        ZoneMarket("b", D("3"), prices("0.8"), (1,) * 4 + (0,) * 6),
        ZoneMarket("c", D("3"), prices("1.1"), (1,) * 19 + (0,)),
    ]
    plan = CapacityAwareSpot().plan("p3.2xlarge", ms, 2)
    assert [(lch.zone, lch.count) for lch in plan] == [("a", 1), ("c", 1)]


def test_capacity_aware_no_zone_good_enough_means_on_demand() -> None:
    ms = [ZoneMarket("a", D("3"), prices("1.0"), (0, 0, 1))]
    assert CapacityAwareSpot().plan("p3.2xlarge", ms, 2) == []


def test_registry() -> None:
    assert {"bid-agent", "diversified", "capacity-aware"} <= set(list_spot_strategies())
    assert get_spot_strategy("diversified", zones=2).zones == 2
    with pytest.raises(InputError, match="valid: bid-agent, capacity-aware, diversified"):
        get_spot_strategy("yolo")


FLAT = ZoneMarket("a", D("3.06"), prices(*["1.0"] * 10), (1,) * 10)
DROP = ZoneMarket("b", D("3.06"), prices(*["1.0"] * 9, "0.5"), (1,) * 10)  # 0.5 < 0.9 × 0.95
SCARCE = ZoneMarket("c", D("3.06"), prices("0.5"), (1, 0, 0, 0))  # 25 % available < 50 % bar


@pytest.mark.parametrize(("strategy", "markets", "want", "why"), [
    (SpotBidAgent(), {"p3.2xlarge": [FLAT]}, False, "a flat price: the bidder never bids"),
    (SpotBidAgent(), {"p3.2xlarge": [FLAT], "p3.8xlarge": [FLAT, DROP]}, True,
     "the drop in b is a bid, though a is cheaper on the list"),
    (SpotBidAgent(), {}, False, "no spot market at all"),
    (CapacityAwareSpot(), {"p3.2xlarge": [SCARCE]}, False, "below the availability bar"),
    (CapacityAwareSpot(), {"p3.2xlarge": [SCARCE, FLAT]}, True, "a is always available"),
    (DiversifiedSpot(), {"p3.2xlarge": [SCARCE]}, True, "any zone will do"),
    (DiversifiedSpot(), {"p3.2xlarge": []}, False, "a type no zone offers now"),
])
def test_bids_anywhere(strategy: SpotStrategy, markets: dict[str, list[ZoneMarket]], want: bool,
                       why: str) -> None:
    assert bids_anywhere(strategy, markets) is want, why


@pytest.mark.parametrize("name", list_spot_strategies())
def test_every_strategy_keeps_the_contract_bids_anywhere_relies_on(name: str) -> None:
    """``SpotStrategy``'s contract, on random markets: a plan with a spot launch over some zones
    and count means one of those zones alone gets a one-node launch, so ``bids_anywhere`` is
    True whenever any subset of its zones would launch. A strategy that breaks it would let
    the spot swap skip a swap scale-up could plan."""
    strategy = get_spot_strategy(name)
    rng = random.Random(7)
    seen = {True: 0, False: 0}
    for _ in range(300):
        zones = []
        for z in "abcd"[: rng.randint(1, 4)]:
            base = rng.choice(["1.0", "0.8", "1.2"])
            last = rng.choice([base, "0.5", "0.9", "1.3"])
            avail = tuple(rng.choice((0, 1, 1)) for _ in range(rng.randint(1, 12)))
            zones.append(ZoneMarket(z, D("3.06"), prices(*[base] * 9, last), avail))
        anywhere = bids_anywhere(strategy, {"p3.2xlarge": zones})
        for k in range(1, len(zones) + 1):
            for subset in itertools.combinations(zones, k):
                for count in (1, 2, 5):
                    if strategy.plan("p3.2xlarge", list(subset), count):
                        assert anywhere, (name, subset, count)
        seen[anywhere] += 1
    assert seen[True] and (seen[False] or name == "diversified"), seen  # both cases were drawn
