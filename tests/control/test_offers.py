"""The offer rule both drivers use (``control.offers.offer_list``), as case tables worked by hand.

Types from the catalog: p3.2xlarge (1 V100, not MIG-capable) and p4d.24xlarge (8 A100, MIG).
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from gpufleet.catalog.instances import default_instance_catalog
from gpufleet.control.offers import OfferBook, mig_capable, next_on_demand_zone, offer_list
from gpufleet.decisions import CapacityType
from gpufleet.market.bidding import ZoneMarket

CAT = default_instance_catalog()
P3 = CAT["p3.2xlarge"]
P4D = CAT["p4d.24xlarge"]
OD, SPOT = CapacityType.ON_DEMAND, CapacityType.SPOT


@pytest.mark.parametrize(("name", "prices", "counts", "want"), [
    ("cheapest zone wins", {"us-east-1a": 3.0, "us-east-1b": 2.5}, {}, "us-east-1b"),
    ("same price: fewest on-demand nodes", {"us-east-1a": 3.0, "us-east-1b": 3.0},
     {("p3.2xlarge", "us-east-1a"): 2}, "us-east-1b"),
    ("same price, same count: the type's zone order", {"us-east-1b": 3.0, "us-east-1a": 3.0},
     {}, "us-east-1a"),
    ("counts of another type do not matter", {"us-east-1a": 3.0, "us-east-1b": 3.0},
     {("p3.8xlarge", "us-east-1a"): 5}, "us-east-1a"),
    ("price before count", {"us-east-1a": 2.0, "us-east-1b": 3.0},
     {("p3.2xlarge", "us-east-1a"): 9}, "us-east-1a"),
    ("only zones outside the type's list: any priced zone", {"mars-1a": 3.0}, {}, "mars-1a"),
])
def test_next_on_demand_zone(name: str, prices: dict, counts: dict, want: str) -> None:
    assert next_on_demand_zone(P3, prices, counts) == want, name


def _rows(offers: list) -> list[tuple]:
    return [(o.instance_type, o.capacity_type, o.shape.mig, o.usd_per_hour, o.zone)
            for o in offers]


@pytest.mark.parametrize(("name", "types", "od", "spot", "mig", "want"), [
    ("on-demand and spot of one type", [P3], {"p3.2xlarge": {"us-east-1a": 3.06}},
     {"p3.2xlarge": 0.9}, False,
     [("p3.2xlarge", OD, False, 3.06, "us-east-1a"), ("p3.2xlarge", SPOT, False, 0.9, "")]),
    ("no spot price now: on-demand only", [P3], {"p3.2xlarge": {"us-east-1a": 3.06}}, {},
     False, [("p3.2xlarge", OD, False, 3.06, "us-east-1a")]),
    ("spot only (no on-demand offering)", [P3], {}, {"p3.2xlarge": 0.9}, False,
     [("p3.2xlarge", SPOT, False, 0.9, "")]),
    ("neither: nothing", [P3], {}, {}, False, []),
    ("MIG pods around, type not MIG-capable: one shape", [P3],
     {"p3.2xlarge": {"us-east-1a": 3.06}}, {}, True,
     [("p3.2xlarge", OD, False, 3.06, "us-east-1a")]),
    ("MIG pods around, MIG-capable: whole GPUs then MIG mode, each with spot", [P4D],
     {"p4d.24xlarge": {"us-east-1a": 32.77}}, {"p4d.24xlarge": 10.0}, True,
     [("p4d.24xlarge", OD, False, 32.77, "us-east-1a"), ("p4d.24xlarge", SPOT, False, 10.0, ""),
      ("p4d.24xlarge", OD, True, 32.77, "us-east-1a"), ("p4d.24xlarge", SPOT, True, 10.0, "")]),
    ("types in the given order", [P4D, P3],
     {"p3.2xlarge": {"us-east-1a": 3.06}, "p4d.24xlarge": {"us-east-1a": 32.77}}, {}, False,
     [("p4d.24xlarge", OD, False, 32.77, "us-east-1a"),
      ("p3.2xlarge", OD, False, 3.06, "us-east-1a")]),
])
def test_offer_list(name: str, types: list, od: dict, spot: dict, mig: bool,
                    want: list) -> None:
    assert _rows(offer_list(types, od, spot, {}, mig)) == want, name


def test_mig_capable_follows_the_gpu_catalog() -> None:
    assert mig_capable(P4D) and not mig_capable(P3)


class _CountingMarket:
    """A spot market view whose answers change with its 600 s step, counting the reads."""

    def __init__(self) -> None:
        self.reads = 0

    def tick_key(self, t: float) -> int:
        return int(t // 600.0)

    def zones(self, instance_type: str) -> list[str]:
        return ["us-east-1a"] if instance_type == P3.name else []

    def best_price(self, instance_type: str, t: float) -> float | None:
        return 0.9 + self.tick_key(t) if instance_type == P3.name else None

    def markets(self, instance_type: str, t: float) -> list[ZoneMarket]:
        self.reads += 1
        price = Decimal("0.9") + self.tick_key(t)
        return [ZoneMarket("us-east-1a", Decimal("3.06"), (price,) * 10, (1,) * 96)]


@pytest.mark.parametrize(("times", "reads", "price"), [
    ((0.0, 10.0, 599.0), 1, "0.9"),  # one market step: read once, the same answer
    ((0.0, 600.0), 2, "1.9"),  # a new step: read again, its own answer
    ((0.0, 600.0, 0.0), 3, "0.9"),  # back to an older step: read again (only the last kept)
])
def test_markets_are_read_once_per_market_step(times: tuple[float, ...], reads: int,
                                               price: str) -> None:
    """``OfferBook.markets`` per spot-offered type (p4d has no zone here), kept while the
    market's ``tick_key`` is the same: answers at equal keys are equal."""
    m = _CountingMarket()
    book = OfferBook({P3.name: P3, P4D.name: P4D}, m, mig=False)
    got = [book.markets(t) for t in times]
    assert m.reads == reads
    assert list(got[-1]) == [P3.name]
    assert got[-1][P3.name][0].price_history[0] == Decimal(price)


def test_price_scores_go_with_the_offer_list_they_were_worked_out_on() -> None:
    """``OfferBook.price_scores`` is kept while ``offers`` answers with the same list: within
    a market step it is the same dict; a new step, or an on-demand node added (the on-demand
    zone moves), makes a new list and an empty dict."""
    m = _CountingMarket()
    book = OfferBook({P3.name: P3}, m, mig=False)
    prices = book.price_scores(0.0)
    prices[("k",)] = ([], 0.0)
    assert book.price_scores(10.0) is prices and book.offers(10.0) is book.offers(0.0)
    assert book.price_scores(600.0) == {}
    again = book.price_scores(600.0)
    again[("k",)] = ([], 0.0)
    book.on_demand_added(P3.name, "us-east-1a")
    assert book.price_scores(600.0) == {}
