"""Multi-node consolidation: remove several under-used nodes at once, with at most one new node.

Karpenter's: remove two or more consolidatable nodes at once, their pods going to the other
nodes' free room plus at most **one** new on-demand node whose price is below the removed nodes'
total. Candidates are ordered as for single-node consolidation and the largest prefix that works
is found by binary search over its length (as Karpenter does, after first trying all candidates
at once), up to ``max_candidates``. It runs only when single-node consolidation found nothing
(the order this project chose; Karpenter itself tries multi-node first), so in practice it is the
method that *replaces*: after single-node, deleting several nodes without a replacement can never
succeed where deleting one of them failed.

Example: two 4-GPU nodes at 12.24 $/h, each running one 1-GPU pod that needs 20 vCPU (the other
node has 12 vCPU left, so single-node fails); an offer of a 2-GPU, 48-vCPU node at 10 $/h takes
both pods for less than 24.48 $/h: terminate both, launch it, the two pods move.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpufleet.decisions import CapacityType, Cause, Decision, Launch, Preempt, Terminate
from gpufleet.provisioning.binpack import MIG_CONFIG, NodeShape
from gpufleet.provisioning.disruption.command import MULTI_NODE, Command
from gpufleet.provisioning.disruption.method import consolidation_candidates
from gpufleet.provisioning.disruption.room import fits_new_node, pack_into
from gpufleet.provisioning.disruption.views import DisruptionSnapshot, NodeView
from gpufleet.provisioning.scale_up import Offer


@dataclass(frozen=True, slots=True)
class MultiNodeConsolidation:
    unneeded_s: float = 600.0
    utilization_threshold: float = 0.5
    max_candidates: int = 20  # Karpenter: 100; fewer keeps a scan cheap on big fleets
    name: str = MULTI_NODE

    def compute(self, snapshot: DisruptionSnapshot) -> Command | None:
        nodes, offers = snapshot.nodes, snapshot.offers
        if not offers:
            return None
        cands = consolidation_candidates(nodes, snapshot.now, self.unneeded_s,
                                         self.utilization_threshold)[: self.max_candidates]
        if len(cands) < 2:
            return None
        # all of them first: feasibility is not monotone in the prefix length (three small pods
        # may fit one bigger node that is cheaper than three, while two do not fit a node
        # cheaper than two), so a plain binary search, as Karpenter's, can miss the full set
        best = replace_group(cands, nodes, offers)
        if best is not None:
            return best
        lo, hi = 2, len(cands) - 1
        while lo <= hi:  # the largest prefix that consolidates
            mid = (lo + hi) // 2
            cmd = replace_group(cands[:mid], nodes, offers)
            if cmd is not None:
                best, lo = cmd, mid + 1
            else:
                hi = mid - 1
        return best


def replace_group(
    group: Sequence[NodeView], nodes: Sequence[NodeView], offers: Sequence[Offer]
) -> Command | None:
    """Remove every node of ``group``: their pods go to the other nodes' free room first, the
    rest to one on-demand replacement cheaper than the group (cheapest offer that fits)."""
    names = {n.name for n in group}
    others = [n for n in nodes if n.name not in names]
    pods = [p for n in group for p in n.pods]
    left = pack_into(pods, others)
    launch: Launch | None = None
    shape: NodeShape | None = None
    if left:
        budget = sum(n.usd_per_hour for n in group)
        ranked = sorted(
            (o for o in offers
             if o.capacity_type == CapacityType.ON_DEMAND and o.usd_per_hour < budget),
            key=lambda o: (o.usd_per_hour, o.instance_type, o.shape.mig),
        )
        for offer in ranked:
            if fits_new_node(left, offer.shape):
                launch = Launch(offer.instance_type, offer.zone, CapacityType.ON_DEMAND, 1,
                                reason=f"replaces {len(group)} nodes",
                                mig_config=MIG_CONFIG if offer.shape.mig else None)
                shape = offer.shape
                break
        if launch is None:
            return None
    decisions: list[Decision] = [launch] if launch is not None else []
    decisions += [Preempt(p.job_id, "multi-node consolidation", Cause.CONSOLIDATION)
                  for p in pods]
    decisions += [Terminate(n.name, "multi-node consolidation") for n in group]
    return Command(MULTI_NODE, tuple(sorted(names)), tuple(decisions), shape)
