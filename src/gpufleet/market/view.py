"""What the control layer may ask of a spot market: the driver's side of the market contract.

The simulator answers from availability traces or a price process (``gpufleet.market.spot_model``);
the
Kubernetes driver answers from its cloud provider's offerings (price and capacity per zone). Every
answer is about now or the past, never the future: a strategy that reads one of these cannot
see a reclaim coming.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Protocol

import numpy as np

from gpufleet.market.bidding import ZoneMarket


class SpotMarketView(Protocol):
    """Spot offers per instance type, as of time ``t`` (seconds since the run's start)."""

    def tick_key(self, t: float) -> Hashable:
        """Equal at two times only if every answer below is the same at both (answers may be
        cached per key)."""
        ...

    def zones(self, instance_type: str) -> list[str]:
        """Zones that offer ``instance_type`` on spot at all (in the run)."""
        ...

    def markets(self, instance_type: str, t: float) -> list[ZoneMarket]:
        """Zones a spot launch could succeed in now, each with its price and availability
        history (``gpufleet.market.bidding``'s input)."""
        ...

    def best_price(self, instance_type: str, t: float) -> float | None:
        """The cheapest spot price (USD/hour) over the zones available now; None: none is."""
        ...

    def signal(self, instance_type: str, t: float, window: int) -> np.ndarray:
        """Fleet-level availability history (1 where any zone was available), last ``window``
        ticks up to now."""
        ...
