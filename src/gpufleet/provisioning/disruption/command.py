"""A disruption command: the candidates, the decisions, and its re-validation before it runs.

Karpenter computes a command on a snapshot and, before executing it, re-validates it against the
cluster as it is then: a pod may have landed on an "empty" node, a candidate may be gone, the
room its pods were to move into may have filled. :meth:`Command.validate` is that check; it uses
the rules that built the command (``room``), so a command valid when computed stays valid on an
unchanged snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.decisions import Cause, Decision, Preempt
from gpufleet.provisioning.binpack import NodeShape
from gpufleet.provisioning.disruption.room import fits_new_node, pack_into
from gpufleet.provisioning.disruption.views import DisruptionSnapshot

EMPTINESS = "emptiness"
SINGLE_NODE = "single-node-consolidation"
MULTI_NODE = "multi-node-consolidation"
SPOT_SWAP = "spot-swap"  # an on-demand node's pods moved to a spot node (control.spot_swap)


def cause_of(method: str) -> Cause:
    """What evicting a command's pods counts as: a swap for ``spot-swap``, else consolidation
    (a swap is carried out as a consolidation is, so the method is what tells them apart)."""
    return Cause.SWAP if method == SPOT_SWAP else Cause.CONSOLIDATION


@dataclass(frozen=True, slots=True)
class Command:
    method: str
    candidates: tuple[str, ...]
    decisions: tuple[Decision, ...]
    replacement: NodeShape | None = None  # the node launched for the pods that fit nowhere

    def validate(self, state: DisruptionSnapshot) -> list[str]:
        """Why this command must not run on ``state`` any more; [] = run it.

        Example: an emptiness command for node a, re-checked after a pod was bound to a →
        ``["a is no longer empty"]``; the driver drops the command and the next scan decides
        again.
        """
        reasons: list[str] = []
        nodes = {n.name: n for n in state.nodes}
        cands = [nodes.get(name) for name in self.candidates]
        for name, node in zip(self.candidates, cands, strict=True):
            if node is None:
                reasons.append(f"{name} is gone")
            elif self.method == EMPTINESS and node.pods:
                reasons.append(f"{name} is no longer empty")
        if reasons or self.method == EMPTINESS:
            return reasons
        moving = {d.job_id for d in self.decisions if isinstance(d, Preempt)}
        pods = [p for n in cands if n is not None for p in n.pods]
        if {p.job_id for p in pods} != moving:
            reasons.append("the candidates' pods changed")
        if any(not p.movable for p in pods):
            reasons.append("a pod is no longer movable")
        if reasons:
            return reasons
        others = [n for n in state.nodes if n.name not in set(self.candidates)]
        left = pack_into(pods, others)
        if left and (self.replacement is None or not fits_new_node(left, self.replacement)):
            reasons.append("the pods no longer fit elsewhere")
        return reasons
