"""The disruption-method extension point, and the candidates the consolidation methods share.

A method reads a :class:`DisruptionSnapshot` and returns a :class:`Command` or None ("nothing to
do here" is not an error). Methods are tried in the policy's ordered list and the first that acts
wins (Karpenter's ``disruption`` controller). Spot rebalance is not one of them: it swaps a fixed
fleet's empty on-demand *fallback* node for spot (``gpufleet.control.replacement``), so it reads
the node group's memory (which nodes wanted spot) and the spot market rather than this snapshot,
and its answer is a ``Replacement`` (launch first, then terminate; a refused launch aborts it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from gpufleet.provisioning.disruption.command import Command
from gpufleet.provisioning.disruption.views import DisruptionSnapshot, NodeView


class DisruptionMethod(Protocol):
    @property
    def name(self) -> str:
        """The method's label in commands and metrics (read-only: methods are frozen)."""
        ...

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
