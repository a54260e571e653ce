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

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gpufleet.decisions import Terminate
from gpufleet.provisioning.disruption.command import EMPTINESS, Command
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
        self, nodes: Sequence[NodeView], now: float, offers: Sequence[Offer] = (),
        spare_gpus: float = math.inf,
    ) -> Command | None:
        """``offers``: what a replacement node could be (multi-node consolidation only).
        ``spare_gpus``: how many GPUs the fleet may lose (``control.headroom``'s buffer kept):
        a command that takes more is not made (``within_spare``)."""
        snapshot = DisruptionSnapshot(nodes, now, offers)
        for method in self.methods():
            cmd = method.compute(snapshot)
            if cmd is not None and spare_gpus < math.inf:
                cmd = within_spare(cmd, snapshot, spare_gpus)
            if cmd is not None:
                return cmd
        return None


def within_spare(cmd: Command, snapshot: DisruptionSnapshot, spare_gpus: float) -> Command | None:
    """``cmd`` if the GPUs it takes away — its candidates' GPUs less its replacement's (the
    pods move, so that is what the free room loses) — are at most ``spare_gpus``. Emptiness
    keeps what it can: its dearest nodes per GPU go first while they fit; a consolidation is
    all or nothing (None)."""
    by = {n.name: n for n in snapshot.nodes}
    gained = cmd.replacement.gpus if cmd.replacement is not None else 0
    if sum(by[c].shape.gpus for c in cmd.candidates) - gained <= spare_gpus:
        return cmd
    if cmd.method != EMPTINESS:
        return None
    order = sorted(cmd.candidates,
                   key=lambda c: (-by[c].usd_per_hour / max(by[c].shape.gpus, 1), c))
    keep: list[str] = []
    taken = 0
    for c in order:
        if taken + by[c].shape.gpus <= spare_gpus:
            keep.append(c)
            taken += by[c].shape.gpus
    if not keep:
        return None
    gone = set(keep)
    return Command(EMPTINESS, tuple(c for c in cmd.candidates if c in gone),
                   tuple(d for d in cmd.decisions
                         if not isinstance(d, Terminate) or d.node in gone))
