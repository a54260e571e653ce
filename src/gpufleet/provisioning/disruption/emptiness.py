"""Emptiness: nodes with no pods for ``unneeded_s`` are terminated, all at once.

Cluster Autoscaler's ``scale-down-unneeded-time`` (10 min). Nothing moves, so it is the cheapest
method and runs first.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.decisions import Terminate
from gpufleet.provisioning.disruption.command import EMPTINESS, Command
from gpufleet.provisioning.disruption.views import DisruptionSnapshot


@dataclass(frozen=True, slots=True)
class Emptiness:
    unneeded_s: float = 600.0
    name: str = EMPTINESS

    def compute(self, snapshot: DisruptionSnapshot) -> Command | None:
        gone = [
            n.name
            for n in snapshot.nodes
            if n.empty_since is not None and snapshot.now - n.empty_since >= self.unneeded_s
        ]
        if not gone:
            return None
        terminate = tuple(Terminate(n, "empty", only_if_empty=True) for n in gone)
        return Command(EMPTINESS, tuple(gone), terminate)
