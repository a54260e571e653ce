"""What the fleet could launch now: the offers scale-up and consolidation choose from.

One ``Offer`` per instance type and capacity type (and, where MIG pods are around and the GPU
offers MIG, the same type again booted in MIG mode): on-demand at its list price in the zone the
next on-demand node of the type would go to (``provisioning.on_demand_zone``: cheapest, then
fewest on-demand nodes of the type there), spot at the cheapest zone available now. The offers
change only when the spot market ticks or the on-demand fleet changes, so they are cached until
then; the driver reports on-demand nodes coming and going.

Example: two p3.2xlarge on demand in us-east-1a and none in 1b (same price) → the on-demand
offer names us-east-1b.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from gpufleet.catalog.gpus import default_gpu_catalog
from gpufleet.catalog.instances import InstanceType
from gpufleet.decisions import CapacityType
from gpufleet.market.bidding import ZoneMarket
from gpufleet.market.view import SpotMarketView
from gpufleet.provisioning import NodeShape, Offer, on_demand_zone


class OfferBook:
    """The offers of ``types`` on ``market`` (None: no spot); ``mig``: MIG pods may come."""

    def __init__(
        self, types: Mapping[str, InstanceType], market: SpotMarketView | None, mig: bool
    ) -> None:
        self.types = types
        self.market = market
        self._mig = mig
        self._catalog = default_gpu_catalog()
        self._od_nodes: Counter[tuple[str, str]] = Counter()  # on-demand nodes per (type, zone)
        self._version = 0
        self._cache: tuple[tuple[int, int], list[Offer]] | None = None
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
        """Zone for the next on-demand node of ``it``."""
        price = float(it.usd_per_hour)
        counts = {z: self._od_nodes[(it.name, z)] for z in it.zones}
        return on_demand_zone(it.zones, dict.fromkeys(it.zones, price), counts)

    def offers(self, now: float) -> list[Offer]:
        """Every offer as of ``now`` (cached per market tick and on-demand fleet version)."""
        m = self.market
        key = (int(now // m.tick_s) if m is not None else 0, self._version)
        if self._cache is not None and self._cache[0] == key:
            return self._cache[1]
        out = []
        for it in self.types.values():
            mig_capable = self._mig and self._catalog[it.gpu_model].mig is not None
            for mig in (False, True) if mig_capable else (False,):
                shape = self.shape(it, mig)
                out.append(Offer(it.name, CapacityType.ON_DEMAND, shape, float(it.usd_per_hour),
                                 self.on_demand_zone(it)))
                if m is not None:
                    p = m.best_price(it.name, now)
                    if p is not None:
                        out.append(Offer(it.name, CapacityType.SPOT, shape, p))
        self._cache = (key, out)
        return out

    def on_demand_offers(self, now: float) -> list[Offer]:
        """What a consolidation's replacement node could be (on-demand only)."""
        return [o for o in self.offers(now) if o.capacity_type == CapacityType.ON_DEMAND]

    def markets(self, now: float) -> dict[str, list[ZoneMarket]]:
        """Per spot-offered type, the zones a spot launch could succeed in now (the spot
        strategy's input)."""
        m = self.market
        if m is None:
            return {}
        return {name: m.markets(name, now) for name in self.types if m.zones(name)}
