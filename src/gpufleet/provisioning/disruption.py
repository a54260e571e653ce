"""Scale-down: an ordered list of disruption methods where the first that acts wins (Karpenter).

1. **Emptiness** — nodes with no pods for ``unneeded_s`` (Cluster Autoscaler's 10 min
   ``scale-down-unneeded-time``) are terminated, all at once.
2. **Single-node consolidation** — a node whose GPU allocation has stayed below
   ``utilization_threshold`` (CA's 0.5) for ``unneeded_s``, whose pods are all movable
   (checkpointable, single-replica) and fit in the free space of the other ready nodes of a
   compatible capacity type, is drained: its pods are preempted (they checkpoint and requeue) and
   the node is terminated. One node per scan, the cheapest to disrupt first (fewest pods, then
   lowest allocation), so the fleet shrinks without a thundering herd of restarts.
3. **Multi-node consolidation** — Karpenter's: remove two or more consolidatable nodes at once,
   their pods going to the other nodes' free room plus at most **one** new on-demand node whose
   price is below the removed nodes' total. Candidates are ordered as above and the largest
   prefix that works is found by binary search over its length (as Karpenter does, after first
   trying all candidates at once), up to ``max_multi_candidates``. It runs only when single-node
   consolidation found nothing (the order this project chose; Karpenter itself tries multi-node
   first), so in practice it is the method that *replaces*: after single-node, deleting several
   nodes without a replacement can never succeed where deleting one of them failed.

Example: two 4-GPU nodes at 12.24 $/h, each running one 1-GPU pod that needs 20 vCPU (the other
node has 12 vCPU left, so single-node fails); an offer of a 2-GPU, 48-vCPU node at 10 $/h takes
both pods for less than 24.48 $/h: terminate both, launch it, the two pods move.

Replace-with-cheaper for a single node is not implemented. Each method returns a
:class:`Command`; "cannot consolidate" is ``None``, not an error. The driver re-validates a
command against the state before executing it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpufleet.decisions import CapacityType, Decision, Launch, Preempt, Terminate
from gpufleet.provisioning.binpack import Bin, NodeShape, pack
from gpufleet.provisioning.scale_up import MigLaunch, Offer
from gpufleet.state import GPU_MILLI, ResourceRequest


@dataclass(frozen=True, slots=True)
class PodView:
    job_id: str
    request: ResourceRequest
    movable: bool
    spot_ok: bool


@dataclass(frozen=True, slots=True)
class NodeView:
    name: str
    shape: NodeShape
    spot: bool
    free_milli: tuple[int, ...]
    cpu_free: int
    mem_free: int
    pods: tuple[PodView, ...]
    empty_since: float | None  # None: has pods
    underused_since: float | None  # None: allocation >= threshold
    mig_used: tuple[int, ...] = ()  # MIG node: memory-slice bitmask per GPU
    mig_compute_used: tuple[int, ...] = ()
    usd_per_hour: float = 0.0  # what removing the node saves (multi-node consolidation)

    @property
    def allocation(self) -> float:
        if not self.shape.gpus:
            return 0.0
        if self.shape.mig:
            return sum(self.mig_compute_used) / (self.shape.mig_compute * self.shape.gpus)
        return 1.0 - sum(self.free_milli) / (GPU_MILLI * self.shape.gpus)

    def bin(self) -> Bin:
        """The node's free room, for packing pods into it."""
        if self.shape.mig:
            return Bin(self.shape, list(self.free_milli), self.cpu_free, self.mem_free, self.name,
                       mig_used=list(self.mig_used) or [0] * self.shape.gpus,
                       mig_compute_used=list(self.mig_compute_used) or [0] * self.shape.gpus)
        return Bin(self.shape, list(self.free_milli), self.cpu_free, self.mem_free, self.name)


@dataclass(frozen=True, slots=True)
class Command:
    method: str
    candidates: tuple[str, ...]
    decisions: tuple[Decision, ...]


@dataclass(frozen=True, slots=True)
class DisruptionPolicy:
    unneeded_s: float = 600.0
    utilization_threshold: float = 0.5
    consolidation: bool = True
    max_candidates: int = 5
    multi_node: bool = True
    max_multi_candidates: int = 20  # Karpenter: 100; fewer keeps a scan cheap on big fleets

    def decide(
        self, nodes: Sequence[NodeView], now: float, offers: Sequence[Offer] = ()
    ) -> Command | None:
        """``offers``: what a replacement node could be (multi-node consolidation only)."""
        for method in (self._emptiness, self._consolidation):
            cmd = method(nodes, now)
            if cmd is not None:
                return cmd
        return self._multi_node(nodes, now, offers)

    def _emptiness(self, nodes: Sequence[NodeView], now: float) -> Command | None:
        gone = [
            n.name
            for n in nodes
            if n.empty_since is not None and now - n.empty_since >= self.unneeded_s
        ]
        if not gone:
            return None
        return Command("emptiness", tuple(gone), tuple(Terminate(n, "empty") for n in gone))

    def _candidates(self, nodes: Sequence[NodeView], now: float) -> list[NodeView]:
        """Consolidatable nodes, cheapest to disrupt first (fewest pods, lowest allocation)."""
        cands = [
            n
            for n in nodes
            if n.pods
            and n.underused_since is not None
            and now - n.underused_since >= self.unneeded_s
            and n.allocation < self.utilization_threshold
            and all(p.movable for p in n.pods)
        ]
        cands.sort(key=lambda n: (len(n.pods), n.allocation, n.name))
        return cands

    def _consolidation(self, nodes: Sequence[NodeView], now: float) -> Command | None:
        if not self.consolidation:
            return None
        for cand in self._candidates(nodes, now)[: self.max_candidates]:
            if _fits_elsewhere(cand, nodes):
                decisions: list[Decision] = [Preempt(p.job_id, "consolidation") for p in cand.pods]
                decisions.append(Terminate(cand.name, "consolidation"))
                return Command("single-node-consolidation", (cand.name,), tuple(decisions))
        return None


    def _multi_node(
        self, nodes: Sequence[NodeView], now: float, offers: Sequence[Offer]
    ) -> Command | None:
        if not (self.consolidation and self.multi_node and offers):
            return None
        cands = self._candidates(nodes, now)[: self.max_multi_candidates]
        if len(cands) < 2:
            return None
        # all of them first: feasibility is not monotone in the prefix length (three small pods
        # may fit one bigger node that is cheaper than three, while two do not fit a node
        # cheaper than two), so a plain binary search, as Karpenter's, can miss the full set
        best = _replace_group(cands, nodes, offers)
        if best is not None:
            return best
        lo, hi = 2, len(cands) - 1
        while lo <= hi:  # the largest prefix that consolidates
            mid = (lo + hi) // 2
            cmd = _replace_group(cands[:mid], nodes, offers)
            if cmd is not None:
                best, lo = cmd, mid + 1
            else:
                hi = mid - 1
        return best


def _replace_group(
    group: Sequence[NodeView], nodes: Sequence[NodeView], offers: Sequence[Offer]
) -> Command | None:
    """Remove every node of ``group``: their pods go to the other nodes' free room first, the
    rest to one on-demand replacement cheaper than the group (cheapest offer that fits)."""
    names = {n.name for n in group}
    others = [n for n in nodes if n.name not in names]
    pods = [p for n in group for p in n.pods]
    left = _pack_into(pods, others)
    launch: Launch | None = None
    if left:
        budget = sum(n.usd_per_hour for n in group)
        ranked = sorted(
            (o for o in offers
             if o.capacity_type == CapacityType.ON_DEMAND and o.usd_per_hour < budget),
            key=lambda o: (o.usd_per_hour, o.instance_type, o.shape.mig),
        )
        reqs = [p.request for p in left]
        for offer in ranked:
            _, rest = pack(reqs, None, [Bin.empty(offer.shape)])
            if not rest:
                launch = Launch(offer.instance_type, offer.zone, CapacityType.ON_DEMAND, 1,
                                reason=f"replaces {len(group)} nodes")
                if offer.shape.mig:
                    launch = MigLaunch.of(launch)
                break
        if launch is None:
            return None
    decisions: list[Decision] = [launch] if launch is not None else []
    decisions += [Preempt(p.job_id, "multi-node consolidation") for p in pods]
    decisions += [Terminate(n.name, "multi-node consolidation") for n in group]
    return Command("multi-node-consolidation", tuple(sorted(names)), tuple(decisions))


def _pack_into(pods: Sequence[PodView], nodes: Sequence[NodeView]) -> list[PodView]:
    """Pods that do not fit the free room of ``nodes``: on-demand-only pods are packed first
    into on-demand nodes, spot-tolerant ones then anywhere."""
    on_demand = [n.bin() for n in nodes if not n.spot]
    spot = [n.bin() for n in nodes if n.spot]
    strict = [p for p in pods if not p.spot_ok]
    loose = [p for p in pods if p.spot_ok]
    _, left_s = pack([p.request for p in strict], None, on_demand)
    _, left_l = pack([p.request for p in loose], None, spot + on_demand)
    return [strict[i] for i in sorted(left_s)] + [loose[i] for i in sorted(left_l)]


def _fits_elsewhere(cand: NodeView, nodes: Sequence[NodeView]) -> bool:
    """Every pod of ``cand`` fits the free space of the other nodes it may run on."""
    return not _pack_into(cand.pods, [n for n in nodes if n.name != cand.name])
