"""The disruption-method extension point, and the candidates the consolidation methods share.

A method reads a :class:`DisruptionSnapshot` and returns a :class:`Command` or None ("nothing to
do here" is not an error). Methods are tried in the policy's ordered list and the first that acts
wins (Karpenter's ``disruption`` controller). Spot rebalance (today ``ClusterSim._rebalance``:
move work off a spot node whose market turned bad before the reclaim) fits the same shape: its
snapshot adds the market view, its command launches a replacement and drains the node.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from gpufleet.provisioning.disruption.command import Command
from gpufleet.provisioning.disruption.views import DisruptionSnapshot, NodeView


class DisruptionMethod(Protocol):
    name: str

    def compute(self, snapshot: DisruptionSnapshot) -> Command | None:
        """A command for this scan, or None when the method finds nothing to do."""
        ...


def consolidation_candidates(
    nodes: Sequence[NodeView], now: float, unneeded_s: float, utilization_threshold: float
) -> list[NodeView]:
    """Consolidatable nodes, cheapest to disrupt first (fewest pods, lowest allocation): below
    the threshold for ``unneeded_s``, every pod movable."""
    cands = [
        n
        for n in nodes
        if n.pods
        and n.underused_since is not None
        and now - n.underused_since >= unneeded_s
        and n.allocation < utilization_threshold
        and all(p.movable for p in n.pods)
    ]
    cands.sort(key=lambda n: (len(n.pods), n.allocation, n.name))
    return cands
