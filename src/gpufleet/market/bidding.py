"""Spot strategies: where (and whether) to buy spot capacity, as pure functions of market data.

Each strategy reads a :class:`ZoneMarket` per zone (recent prices and availability ticks) and
returns ``Launch`` decisions on spot capacity: an empty list means "not spot, not now" and the
provisioner falls back to on-demand. Strategies are registered by name with a decorator
(SkyPilot's habit) and selected from config; an unknown name fails listing the valid ones.

Example sequence (capacity-aware, 2 nodes wanted, zones a/b/c with recent availability
0.9/0.4/0.95 and prices 1.0/0.8/1.1): b misses the 0.5 availability bar although cheapest; a
ranks before c on price per available hour (1.0/0.9 = 1.11 < 1.1/0.95 = 1.16), and the two nodes
are spread one per zone → ``[Launch(a, 1), Launch(c, 1)]``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Protocol

from gpufleet.decisions import CapacityType, Launch
from gpufleet.registry import Registry


@dataclass(frozen=True, slots=True)
class ZoneMarket:
    """What a strategy may know about one zone: the past, never the future."""

    zone: str
    on_demand_price: Decimal
    price_history: tuple[Decimal, ...]  # oldest first; the last is the current price
    availability_history: tuple[int, ...] = ()  # 1 = spot could be had at that tick

    @property
    def price(self) -> Decimal:
        return self.price_history[-1] if self.price_history else self.on_demand_price

    def availability(self, window: int) -> float:
        recent = self.availability_history[-window:]
        return sum(recent) / len(recent) if recent else 1.0


class SpotStrategy(Protocol):
    """A spot strategy. Contract (``bids_anywhere`` relies on it, and the tests check it for
    every registered strategy): a strategy that launches spot in a set of zones, for any count,
    would also launch one node in one of those zones alone."""

    name: str

    def plan(self, instance_type: str, markets: Sequence[ZoneMarket], count: int) -> list[Launch]:
        """Spot launches for ``count`` nodes of ``instance_type``; [] = use on-demand."""
        ...


DEFAULT_SPOT_STRATEGY = "capacity-aware"
STRATEGIES: Registry[Callable[..., SpotStrategy]] = Registry(
    "spot strategy", field="spot_strategy", default=DEFAULT_SPOT_STRATEGY
)
register = STRATEGIES.register


def get_spot_strategy(name: str = DEFAULT_SPOT_STRATEGY, **kwargs: object) -> SpotStrategy:
    return STRATEGIES.get(name)(**kwargs)


def list_spot_strategies() -> list[str]:
    return STRATEGIES.names()


def bids_anywhere(strategy: SpotStrategy, markets: Mapping[str, Sequence[ZoneMarket]]) -> bool:
    """Whether ``strategy`` would launch spot for some instance type of ``markets`` in some
    zone now. By the strategies' contract (``SpotStrategy``), False means that no plan over
    any of these zones, for any count, launches spot; scale-up's plans then launch on-demand
    or nothing. The spot swap asks it once per look before any candidate's plan (a swap needs
    an all-spot plan): the seed's bidder never bids on a flat price, and its scenario judged
    every candidate on a scale-up pass that could only end on-demand."""
    return any(strategy.plan(it, [z], 1) for it in sorted(markets) for z in markets[it])


def _launch(it: str, zone: str, n: int, max_price: Decimal, why: str) -> Launch:
    return Launch(it, zone, CapacityType.SPOT, n, max_price=max_price, reason=why)


def _spread(it: str, ranked: Sequence[ZoneMarket], count: int, why: str) -> list[Launch]:
    """Round-robin ``count`` nodes over ``ranked`` zones (best first), capped at on-demand."""
    per = [0] * len(ranked)
    for i in range(count):
        per[i % len(ranked)] += 1
    return [
        _launch(it, m.zone, n, m.on_demand_price, why)
        for m, n in zip(ranked, per, strict=True)
        if n
    ]


@register("bid-agent")
@dataclass
class SpotBidAgent:
    """The seed system's bidder, kept as the baseline.

    Max price is ``markup`` × the reference price (the first price it saw); it remembers the last
    ``window`` prices and bids (at the max price) only while the current price is below the max
    and below ``discount`` × the average of that window. The window includes the current price,
    so on a flat price the condition ``p < 0.9·p`` never holds and it never bids: every node goes
    on-demand. The simulator's report shows what that costs.
    """

    markup: Decimal = Decimal("1.2")
    window: int = 10
    discount: Decimal = Decimal("0.9")
    name: str = "bid-agent"

    def max_price(self, reference: Decimal) -> Decimal:
        return reference * self.markup

    def should_bid(self, prices: Sequence[Decimal]) -> bool:
        if not prices:
            return False
        recent = list(prices[-self.window :])
        current = recent[-1]
        average = sum(recent, Decimal(0)) / len(recent)
        return current < self.max_price(prices[0]) and current < self.discount * average

    def plan(self, instance_type: str, markets: Sequence[ZoneMarket], count: int) -> list[Launch]:
        if count <= 0 or not markets:
            return []
        best = min(markets, key=lambda m: (m.price, m.zone))
        if not self.should_bid(best.price_history):
            return []
        return [
            _launch(instance_type, best.zone, count, self.max_price(best.price_history[0]), "bid")
        ]


@register("diversified")
@dataclass
class DiversifiedSpot:
    """Spread nodes round-robin over the ``zones`` cheapest zones (EC2 Fleet "diversified").

    One zone's reclaim then takes at most ceil(count/zones) nodes. Max price is the on-demand
    price (AWS's default since 2017: pay the spot price, never more than on-demand).
    """

    zones: int = 3
    name: str = "diversified"

    def plan(self, instance_type: str, markets: Sequence[ZoneMarket], count: int) -> list[Launch]:
        if count <= 0 or not markets:
            return []
        ranked = sorted(markets, key=lambda m: (m.price, m.zone))[: max(1, self.zones)]
        return _spread(instance_type, ranked, count, "diversified")


@register("capacity-aware")
@dataclass
class CapacityAwareSpot:
    """Prefer zones whose recent availability is high (price-capacity-optimized in spirit).

    Zones below ``min_availability`` over the last ``window`` ticks are skipped (their nodes
    would mostly be reclaimed); the rest are ranked by price / availability, the expected price
    of a useful hour, and nodes are spread over the best ``zones`` of them. No zone clears the
    bar → [] (on-demand).
    """

    window: int = 96
    min_availability: float = 0.5
    zones: int = 2
    name: str = "capacity-aware"

    def plan(self, instance_type: str, markets: Sequence[ZoneMarket], count: int) -> list[Launch]:
        if count <= 0:
            return []
        good = [m for m in markets if m.availability(self.window) >= self.min_availability]
        if not good:
            return []
        ranked = sorted(
            good, key=lambda m: (float(m.price) / m.availability(self.window), m.zone)
        )[: max(1, self.zones)]
        return _spread(instance_type, ranked, count, "capacity-aware")
