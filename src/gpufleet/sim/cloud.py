"""The simulated cloud: nodes that boot after a delay, bill per second, and end.

Money is kept in integer micro-dollars per node (the ledger never sums floats); a node's bill is
``ceil(lifetime seconds) × price`` for a flat price, or the integral of the spot price path in
the price-process model. Billing starts at launch (the instance runs while it boots) and stops
when the node is terminated or reclaimed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gpufleet.catalog.instances import InstanceType

MICRO = 1_000_000


@dataclass(slots=True, eq=False)
class SimNode:
    name: str
    itype: InstanceType
    zone: str
    spot: bool
    usd_per_hour: float  # flat price (spot: at launch; the price model bills the path)
    launched_s: float
    ready_s: float
    max_price: float | None = None
    state: str = "provisioning"  # provisioning | ready | draining | gone
    ended_s: float | None = None
    bill_micro: int = 0
    jobs: dict[int, int] = field(default_factory=dict)  # job index -> replicas here
    alloc_milli: int = 0
    empty_since: float | None = None
    underused_since: float | None = None
    reclaimed: bool = False
    mig: bool = False  # every GPU in MIG mode (nvidia.com/mig.config=all-enabled)

    @property
    def gpus(self) -> int:
        return self.itype.gpus

    def lifetime_s(self, now: float) -> float:
        end = self.ended_s if self.ended_s is not None else now
        return max(0.0, end - self.launched_s)


def flat_bill_micro(usd_per_hour: float, seconds: float) -> int:
    """Per-second billing: whole seconds, rounded up, at a flat hourly price."""
    price_micro = round(usd_per_hour * MICRO)
    return price_micro * math.ceil(seconds) // 3600


class SimCloud:
    def __init__(self) -> None:
        self.nodes: dict[str, SimNode] = {}
        self.live: dict[str, SimNode] = {}
        self._seq = 0
        self.closed_micro = 0
        self.launches = 0

    def launch(
        self,
        itype: InstanceType,
        zone: str,
        spot: bool,
        usd_per_hour: float,
        now: float,
        delay_s: float,
        max_price: float | None = None,
        mig: bool = False,
    ) -> SimNode:
        self._seq += 1
        self.launches += 1
        kind = ("spot" if spot else "od") + ("-mig" if mig else "")
        name = f"{itype.name}-{zone}-{kind}-{self._seq:06d}"
        node = SimNode(name, itype, zone, spot, usd_per_hour, now, now + delay_s, max_price,
                       mig=mig)
        self.nodes[name] = node
        self.live[name] = node
        return node

    def end(self, node: SimNode, now: float, bill_micro: int | None = None) -> None:
        """Stop billing; ``bill_micro`` overrides the flat bill (price-path spot)."""
        if node.state == "gone":
            return
        node.state = "gone"
        node.ended_s = now
        node.bill_micro = (
            bill_micro
            if bill_micro is not None
            else flat_bill_micro(node.usd_per_hour, node.lifetime_s(now))
        )
        self.closed_micro += node.bill_micro
        self.live.pop(node.name, None)

    def cost_rate_usd_per_hour(self) -> float:
        return sum(n.usd_per_hour for n in self.live.values())

    def accrued_usd(self, now: float) -> float:
        """Closed bills plus what live nodes have run up so far (flat-price estimate)."""
        live = sum(n.usd_per_hour * (now - n.launched_s) / 3600.0 for n in self.live.values())
        return self.closed_micro / MICRO + live
