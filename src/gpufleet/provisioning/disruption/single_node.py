"""Single-node consolidation: drain one under-used node whose pods fit the others' free room.

A node whose GPU allocation has stayed below ``utilization_threshold`` (CA's 0.5) for
``unneeded_s``, whose pods are all movable (checkpointable, single-replica) and fit in the free
space of the other ready nodes of a compatible capacity type, is drained: its pods are preempted
(they checkpoint and requeue) and the node is terminated. One node per scan, the cheapest to
disrupt first (fewest pods, then lowest allocation), so the fleet shrinks without a thundering
herd of restarts.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.decisions import Cause, Decision, Preempt, Terminate
from gpufleet.provisioning.disruption.command import SINGLE_NODE, Command
from gpufleet.provisioning.disruption.method import consolidation_candidates
from gpufleet.provisioning.disruption.room import fits_elsewhere
from gpufleet.provisioning.disruption.views import DisruptionSnapshot


@dataclass(frozen=True, slots=True)
class SingleNodeConsolidation:
    unneeded_s: float = 600.0
    utilization_threshold: float = 0.5
    max_candidates: int = 5
    name: str = SINGLE_NODE

    def compute(self, snapshot: DisruptionSnapshot) -> Command | None:
        nodes = snapshot.nodes
        cands = consolidation_candidates(nodes, snapshot.now, self.unneeded_s,
                                         self.utilization_threshold)
        for cand in cands[: self.max_candidates]:
            if fits_elsewhere(cand, nodes):
                decisions: list[Decision] = [Preempt(p.job_id, "consolidation", Cause.CONSOLIDATION)
                                                  for p in cand.pods]
                decisions.append(Terminate(cand.name, "consolidation"))
                return Command(SINGLE_NODE, (cand.name,), tuple(decisions))
        return None
