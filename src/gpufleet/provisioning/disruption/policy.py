"""The disruption policy: an ordered list of methods where the first that acts wins.

The list (Karpenter's ``disruption`` controller shape; the order is this project's):

1. **emptiness** — nothing moves, so it is always safe and goes first;
2. **single-node consolidation** — one node drained per scan, its pods into existing room;
3. **multi-node consolidation** — several nodes at once plus at most one cheaper replacement;
   after single-node, only a group *with* a replacement can succeed where single-node failed,
   so this is in practice the replacing method, and the costliest to compute (last).

Spot rebalance is not in this list: it acts on fixed fleets only, reading the node group's
fallback nodes and the spot market (``gpufleet.control.replacement``; see ``method``).

Replace-with-cheaper for a single node is not implemented. "Cannot consolidate" is ``None``,
not an error. The driver re-validates a command (:meth:`Command.validate`) against the state
before executing it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpufleet.provisioning.disruption.command import Command
from gpufleet.provisioning.disruption.emptiness import Emptiness
from gpufleet.provisioning.disruption.method import DisruptionMethod
from gpufleet.provisioning.disruption.multi_node import MultiNodeConsolidation
from gpufleet.provisioning.disruption.single_node import SingleNodeConsolidation
from gpufleet.provisioning.disruption.views import DisruptionSnapshot, NodeView
from gpufleet.provisioning.scale_up import Offer


@dataclass(frozen=True, slots=True)
class DisruptionPolicy:
    unneeded_s: float = 600.0
    utilization_threshold: float = 0.5
    consolidation: bool = True
    max_candidates: int = 5
    multi_node: bool = True
    max_multi_candidates: int = 20  # Karpenter: 100; fewer keeps a scan cheap on big fleets

    def methods(self) -> tuple[DisruptionMethod, ...]:
        """The ordered list (see the module docstring); switched-off methods are left out."""
        out: list[DisruptionMethod] = [Emptiness(self.unneeded_s)]
        if self.consolidation:
            out.append(SingleNodeConsolidation(self.unneeded_s, self.utilization_threshold,
                                               self.max_candidates))
            if self.multi_node:
                out.append(MultiNodeConsolidation(self.unneeded_s, self.utilization_threshold,
                                                  self.max_multi_candidates))
        return tuple(out)

    def decide(
        self, nodes: Sequence[NodeView], now: float, offers: Sequence[Offer] = ()
    ) -> Command | None:
        """``offers``: what a replacement node could be (multi-node consolidation only)."""
        snapshot = DisruptionSnapshot(nodes, now, offers)
        for method in self.methods():
            cmd = method.compute(snapshot)
            if cmd is not None:
                return cmd
        return None
