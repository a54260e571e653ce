"""Fixed-fleet replacement and spot rebalance, and the offers they launch from."""

from __future__ import annotations

from decimal import Decimal

import numpy as np

from gpufleet.catalog.instances import InstanceType, default_instance_catalog
from gpufleet.control.fleet import NodeGroup
from gpufleet.control.offers import OfferBook
from gpufleet.control.replacement import FixedFleet, replaces_lost_node
from gpufleet.decisions import CapacityType, Terminate
from gpufleet.market.bidding import ZoneMarket, get_spot_strategy
from gpufleet.provisioning import MIG_CONFIG

P3 = next(t for t in default_instance_catalog() if t.name == "p3.2xlarge")


class Market:
    """A spot market view with fixed answers: ``up`` zones have capacity at ``price``."""

    def tick_key(self, t: float) -> int:
        return int(t // 600.0)

    def __init__(self, up: tuple[str, ...], price: float = 0.9) -> None:
        self.up = up
        self.price = price

    def zones(self, instance_type: str) -> list[str]:
        return ["us-east-1a", "us-east-1b"]

    def markets(self, instance_type: str, t: float) -> list[ZoneMarket]:
        return [ZoneMarket(z, Decimal("3.06"), (Decimal(str(self.price)),) * 10, (1,) * 96)
                for z in self.up]

    def best_price(self, instance_type: str, t: float) -> float | None:
        return self.price if self.up else None

    def signal(self, instance_type: str, t: float, window: int) -> np.ndarray:
        return np.ones(window, dtype=np.int8)


def fleet(up: tuple[str, ...]) -> FixedFleet:
    market = Market(up)
    types: dict[str, InstanceType] = {P3.name: P3}
    return FixedFleet(OfferBook(types, market, mig=False), market, get_spot_strategy())


def test_on_demand_zone_spreads_and_offers_follow_the_fleet() -> None:
    book = OfferBook({P3.name: P3}, Market(("us-east-1b",)), mig=False)
    first = book.on_demand_zone(P3)
    book.on_demand_added(P3.name, first)
    assert book.on_demand_zone(P3) != first  # same price: the zone with fewer nodes
    offers = book.offers(0.0)
    assert [(o.capacity_type, o.usd_per_hour) for o in offers] == [
        (CapacityType.ON_DEMAND, 3.06), (CapacityType.SPOT, 0.9)]
    assert offers[0].zone == book.on_demand_zone(P3)
    assert book.on_demand_offers(0.0) == offers[:1]
    assert list(book.markets(0.0)) == [P3.name]


def test_initial_fleet_puts_the_on_demand_share_first_at_home() -> None:
    f = fleet(("us-east-1b",))
    reps = list(f.initial([NodeGroup(P3, False, nodes=3, on_demand_nodes=1)], spot=True))
    home = f.home_zone[P3.name]
    assert [[(x.capacity_type, x.zone) for x in r.launches] for r in reps] == [
        [(CapacityType.ON_DEMAND, home)],
        [(CapacityType.SPOT, "us-east-1b"), (CapacityType.ON_DEMAND, home)],
        [(CapacityType.SPOT, "us-east-1b"), (CapacityType.ON_DEMAND, home)],
    ]
    assert [r.wants_spot for r in reps] == [False, True, True]


def test_a_spot_node_launched_on_demand_is_a_fallback_until_rebalanced() -> None:
    f = fleet(())  # no spot zone has capacity
    rep = f.reclaimed(P3, mig=True, now=0.0)
    assert [x.capacity_type for x in rep.launches] == [CapacityType.ON_DEMAND]
    assert rep.launches[0].mig_config == MIG_CONFIG
    f.launched("n1", rep.launches[0], rep)
    assert f.fallback == {"n1"}
    assert list(f.rebalance([("n1", P3, False)], 10.0)) == []  # still no spot: nothing
    f.market.up = ("us-east-1a",)  # type: ignore[attr-defined]
    (back,) = f.rebalance([("n1", P3, False), ("other", P3, False)], 20.0)
    assert back.launches[0].capacity_type == CapacityType.SPOT
    assert back.terminate == Terminate("n1", "spot rebalance", only_if_empty=True)
    f.launched("n2", back.launches[0], back)
    assert f.fallback == set()


def test_a_failed_fallback_is_replaced_as_what_it_was_meant_to_be() -> None:
    f = fleet(("us-east-1a",))
    f.fallback.add("n1")
    rep = f.failed("n1", P3, spot=False, mig=False, now=0.0)
    assert rep.wants_spot and rep.launches[0].capacity_type == CapacityType.SPOT
    assert f.fallback == set()
    plain = f.failed("n2", P3, spot=False, mig=False, now=0.0)
    assert not plain.wants_spot and len(plain.launches) == 1


def test_lost_nodes_replaced_only_in_a_fixed_fleet_with_work_left() -> None:
    # a fixed fleet keeps its size: reclaimed and failed nodes come back
    assert replaces_lost_node(False, True, reclaimed=True, failed=False)
    assert replaces_lost_node(False, True, reclaimed=False, failed=True)
    # a node the fleet let go itself (emptiness, rebalance) is not replaced
    assert not replaces_lost_node(False, True, reclaimed=False, failed=False)
    # nothing left to run: no replacement
    assert not replaces_lost_node(False, False, reclaimed=True, failed=False)
    assert not replaces_lost_node(False, False, reclaimed=False, failed=True)
    # an autoscaled fleet replaces capacity through scale-up, never here
    assert not replaces_lost_node(True, True, reclaimed=True, failed=False)
    assert not replaces_lost_node(True, True, reclaimed=False, failed=True)
