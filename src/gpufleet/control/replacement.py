"""A fixed (non-autoscaled) fleet kept at its size: node replacement and spot rebalance.

A fixed fleet's node groups (``control.fleet``) do not shrink when a node goes away: a node
reclaimed by spot or lost to a hardware failure is replaced by one of the same type. A node that
wants spot asks the spot strategy for zones; when it finds none (or the cloud refuses every one),
the node is launched on-demand as a *fallback*, and spot rebalance (EC2 Auto Scaling's capacity
rebalancing, in spirit) swaps an empty fallback node for spot once a zone has capacity again.

A static cluster is one placement group, so each node group has one *home zone* (chosen once,
where its first on-demand node would go) that every on-demand node of the group uses: a gang must
fit inside one zone.

Each answer is a :class:`Replacement`: launches to try in order (the first the cloud accepts is
the node, as with EC2 Fleet's prioritised overrides; the driver reports which one with
``launched``) and, for rebalance, the fallback node to ``Terminate`` once its replacement is
launched. Example: a p3.2xlarge spot node reclaimed, zones b and c available → try spot in b,
then c, then on-demand in the home zone (a fallback, rebalanced later).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace

from gpufleet.catalog.instances import InstanceType
from gpufleet.control.fleet import NodeGroup
from gpufleet.control.offers import OfferBook
from gpufleet.decisions import CapacityType, Launch, Terminate
from gpufleet.market.bidding import SpotStrategy
from gpufleet.market.view import SpotMarketView
from gpufleet.provisioning import MIG_CONFIG

REBALANCE = "spot rebalance"


@dataclass(frozen=True, slots=True)
class Replacement:
    """One node for a fixed group: ``launches`` in order of preference (one node in all);
    ``wants_spot``: an on-demand launch is a fallback; ``terminate``: the node this one
    replaces, deleted once the new node is launched."""

    launches: tuple[Launch, ...]
    wants_spot: bool
    terminate: Terminate | None = None


class FixedFleet:
    """The fixed fleet's node groups over time (home zones and fallback nodes)."""

    def __init__(
        self, offers: OfferBook, market: SpotMarketView | None, strategy: SpotStrategy | None
    ) -> None:
        self.offers = offers
        self.market = market
        self.strategy = strategy if market is not None else None
        self.home_zone: dict[str, str] = {}
        self.fallback: set[str] = set()  # on-demand nodes that wanted spot

    def initial(self, groups: Iterable[NodeGroup], spot: bool) -> Iterator[Replacement]:
        """The fleet's first nodes, group by group (lazily: each zone choice sees the nodes
        launched before it). On a spot fleet the group's first ``on_demand_nodes`` are
        on-demand, the rest want spot."""
        for g in groups:
            it = g.instance_type
            self.home_zone.setdefault(it.name, self.offers.on_demand_zone(it))
            for k in range(g.nodes):
                yield self.replacement(it, spot and k >= g.on_demand_nodes, g.mig, 0.0)

    def replacement(self, it: InstanceType, spot: bool, mig: bool, now: float) -> Replacement:
        """One node of ``it``: spot where the strategy finds a zone, else on-demand at home."""
        cfg = MIG_CONFIG if mig else None
        launches: list[Launch] = []
        if spot and self.strategy is not None and self.market is not None:
            plan = self.strategy.plan(it.name, self.market.markets(it.name, now), 1)
            launches = [replace(x, count=1, mig_config=cfg) for x in plan]
        zone = self.home_zone.get(it.name) or self.offers.on_demand_zone(it)
        launches.append(Launch(it.name, zone, CapacityType.ON_DEMAND, 1,
                               reason="fallback" if spot else "replacement", mig_config=cfg))
        return Replacement(tuple(launches), spot)

    def reclaimed(self, it: InstanceType, mig: bool, now: float) -> Replacement:
        """A spot node of the group was reclaimed: replace it, spot wanted."""
        return self.replacement(it, True, mig, now)

    def failed(self, name: str, it: InstanceType, spot: bool, mig: bool,
               now: float) -> Replacement:
        """Node ``name`` failed: replace it with what it was meant to be (a fallback wanted
        spot)."""
        wanted = spot or name in self.fallback
        self.fallback.discard(name)
        return self.replacement(it, wanted, mig, now)

    def launched(self, name: str, launch: Launch, rep: Replacement) -> None:
        """The driver launched ``name`` for ``rep`` with ``launch`` (one of its launches)."""
        if rep.wants_spot and launch.capacity_type == CapacityType.ON_DEMAND:
            self.fallback.add(name)
        if rep.terminate is not None:
            self.fallback.discard(rep.terminate.node)

    def rebalance(
        self, idle: Iterable[tuple[str, InstanceType, bool]], now: float
    ) -> Iterator[Replacement]:
        """Spot replacements for the empty, ready fallback nodes in ``idle`` (name, type, MIG),
        by name; stops at the first the strategy finds no zone for (the market is out). The
        driver stops too when the cloud refuses every launch of one."""
        if self.strategy is None or self.market is None:
            return
        for name, it, mig in sorted(idle, key=lambda x: x[0]):
            if name not in self.fallback:
                continue
            plan = self.strategy.plan(it.name, self.market.markets(it.name, now), 1)
            if not plan:
                return
            cfg = MIG_CONFIG if mig else None
            yield Replacement(tuple(replace(x, count=1, mig_config=cfg) for x in plan), True,
                              Terminate(name, REBALANCE, only_if_empty=True))


def replaces_lost_node(autoscaling: bool, work_left: bool, reclaimed: bool, failed: bool) -> bool:
    """Whether a node that went away is replaced by a fixed-fleet ``Replacement``: a fixed fleet
    keeps its size while work is left, so a node reclaimed by spot or lost to a failure is
    replaced; one the fleet itself let go (emptiness, rebalance) is not, and neither is any
    node once every job is done. An autoscaled fleet replaces capacity through scale-up."""
    return not autoscaling and work_left and (reclaimed or failed)
