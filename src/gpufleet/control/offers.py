"""What the fleet could launch now: the offers scale-up and consolidation choose from.

One ``Offer`` per instance type and capacity type (and, where MIG pods are around and the GPU
offers MIG, the same type again booted in MIG mode): on-demand at its list price in the zone the
next on-demand node of the type would go to (``provisioning.on_demand_zone``: cheapest, then
fewest on-demand nodes of the type there), spot at the cheapest zone available now. The offers
change only when the spot market ticks or the on-demand fleet changes, so they are cached until
then; the driver reports on-demand nodes coming and going.

Example: two p3.2xlarge on demand in us-east-1a and none in 1b (same price) → the on-demand
offer names us-east-1b.

The rule (:func:`offer_list`) is the same for both drivers; what differs is where the prices
come from: the simulator reads the catalog's list price in every zone of the type and its spot
market model (:class:`OfferBook`, cached per market tick), the live driver the provider's
offerings (``k8s.capacity.inputs``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping

from gpufleet.catalog.gpus import default_gpu_catalog
from gpufleet.catalog.instances import InstanceType
from gpufleet.decisions import CapacityType
from gpufleet.market.bidding import ZoneMarket
from gpufleet.market.view import SpotMarketView
from gpufleet.provisioning import NodeShape, Offer, PriceScores, on_demand_zone


def mig_capable(it: InstanceType) -> bool:
    """The type's GPU model can be put in MIG mode (A100, H100, …)."""
    cat = default_gpu_catalog()
    return it.gpu_model in cat and cat[it.gpu_model].mig is not None


def next_on_demand_zone(
    it: InstanceType, prices: Mapping[str, float], od_nodes: Mapping[tuple[str, str], int]
) -> str:
    """Zone for the next on-demand node of ``it``: among the type's zones with a price (any
    priced zone when none of the type's own is), the cheapest, then the one with the fewest
    on-demand nodes of the type (``od_nodes``: per (type, zone))."""
    zones = [z for z in it.zones if z in prices] or sorted(prices)
    counts = {z: od_nodes.get((it.name, z), 0) for z in zones}
    return on_demand_zone(zones, prices, counts)


def offer_list(
    types: Iterable[InstanceType], on_demand: Mapping[str, Mapping[str, float]],
    spot: Mapping[str, float], od_nodes: Mapping[tuple[str, str], int], mig: bool,
    shape: Callable[[InstanceType, bool], NodeShape] = NodeShape.of,
) -> list[Offer]:
    """The offers, in ``types`` order: per type (and, with ``mig`` — MIG pods may come — per
    MIG-capable type booted in MIG mode too: a MIG pod fits no whole-GPU shape) one on-demand
    offer where the type has a price (``on_demand``: type → zone → price) in the zone of
    :func:`next_on_demand_zone`, and one spot offer where it has a spot price now (``spot``:
    type → cheapest available price; a spot offer names no zone, the spot strategy picks it).

    Example: a p4d (A100, MIG-capable) with prices in 1a and 1b, no spot, ``mig`` → two
    on-demand offers (whole GPUs, then MIG mode), both in 1a when the prices tie and the
    on-demand counts do too (the zone order breaks the tie)."""
    out = []
    for it in types:
        prices = on_demand.get(it.name)
        spot_price = spot.get(it.name)
        for in_mig in (False, True) if mig and mig_capable(it) else (False,):
            sh = shape(it, in_mig)
            if prices:
                zone = next_on_demand_zone(it, prices, od_nodes)
                out.append(Offer(it.name, CapacityType.ON_DEMAND, sh, prices[zone], zone))
            if spot_price is not None:
                out.append(Offer(it.name, CapacityType.SPOT, sh, spot_price))
    return out


class OfferBook:
    """The offers of ``types`` on ``market`` (None: no spot); ``mig``: MIG pods may come."""

    def __init__(
        self, types: Mapping[str, InstanceType], market: SpotMarketView | None, mig: bool
    ) -> None:
        self.types = types
        self.market = market
        self._mig = mig
        self._od_nodes: Counter[tuple[str, str]] = Counter()  # on-demand nodes per (type, zone)
        self._version = 0
        self._cache: tuple[tuple[Hashable, int], list[Offer]] | None = None
        self._prices: PriceScores = {}  # price scores on the cached offers
        # the last ``markets`` answer and the market step it is for (read-only to callers)
        self._markets: tuple[Hashable, dict[str, list[ZoneMarket]]] | None = None
        self._shapes: dict[tuple[str, bool], NodeShape] = {}

    def on_demand_added(self, instance_type: str, zone: str) -> None:
        self._od_nodes[(instance_type, zone)] += 1
        self._version += 1

    def on_demand_removed(self, instance_type: str, zone: str) -> None:
        self._od_nodes[(instance_type, zone)] -= 1
        self._version += 1

    def shape(self, it: InstanceType, mig: bool = False) -> NodeShape:
        """The packing shape of a node of ``it`` (booted in MIG mode or not), cached."""
        shape = self._shapes.get((it.name, mig))
        if shape is None:
            shape = NodeShape.of(it, mig)
            self._shapes[(it.name, mig)] = shape
        return shape

    def on_demand_zone(self, it: InstanceType) -> str:
        """Zone for the next on-demand node of ``it`` (list price in each of its zones)."""
        return next_on_demand_zone(it, dict.fromkeys(it.zones, float(it.usd_per_hour)),
                                   self._od_nodes)

    def offers(self, now: float) -> list[Offer]:
        """Every offer as of ``now`` (cached per market tick and on-demand fleet version)."""
        m = self.market
        key = (m.tick_key(now) if m is not None else 0, self._version)
        if self._cache is not None and self._cache[0] == key:
            return self._cache[1]
        self._prices = {}
        types = self.types.values()
        spot: dict[str, float] = {}
        if m is not None:
            for it in types:
                p = m.best_price(it.name, now)
                if p is not None:
                    spot[it.name] = p
        on_demand = {it.name: dict.fromkeys(it.zones, float(it.usd_per_hour)) for it in types}
        out = offer_list(types, on_demand, spot, self._od_nodes, self._mig, self.shape)
        self._cache = (key, out)
        return out

    def price_scores(self, now: float) -> PriceScores:
        """Scale-up's price scores on ``offers(now)`` (``ScaleUpPolicy.launch_group``'s
        ``prices``): kept with that list, and begun anew when it is made anew."""
        self.offers(now)
        return self._prices

    def on_demand_offers(self, now: float) -> list[Offer]:
        """What a consolidation's replacement node could be (on-demand only)."""
        return [o for o in self.offers(now) if o.capacity_type == CapacityType.ON_DEMAND]

    def markets(self, now: float) -> dict[str, list[ZoneMarket]]:
        """Per spot-offered type, the zones a spot launch could succeed in now (the spot
        strategy's input)."""
        m = self.market
        if m is None:
            return {}
        key = m.tick_key(now)  # answers at equal keys are equal (``SpotMarketView.tick_key``)
        if self._markets is not None and self._markets[0] == key:
            return self._markets[1]
        out = {name: m.markets(name, now) for name in self.types if m.zones(name)}
        self._markets = (key, out)
        return out
