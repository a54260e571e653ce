"""Scale-down: an ordered list of disruption methods where the first that acts wins (Karpenter).

1. **Emptiness** — nodes with no pods for ``unneeded_s`` (Cluster Autoscaler's 10 min
   ``scale-down-unneeded-time``) are terminated, all at once.
2. **Single-node consolidation** — a node whose GPU allocation has stayed below
   ``utilization_threshold`` (CA's 0.5) for ``unneeded_s``, whose pods are all movable
   (checkpointable, single-replica) and fit in the free space of the other ready nodes of a
   compatible capacity type, is drained: its pods are preempted (they checkpoint and requeue) and
   the node is terminated. One node per scan, the cheapest to disrupt first (fewest pods, then
   lowest allocation), so the fleet shrinks without a thundering herd of restarts.

Multi-node consolidation and replace-with-cheaper are not implemented (see docs/simulator.md).
Each method returns a :class:`Command`; "cannot consolidate" is ``None``, not an error. The
driver re-validates a command against the state before executing it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpufleet.decisions import Decision, Preempt, Terminate
from gpufleet.provisioning.binpack import Bin, NodeShape, pack
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

    def decide(self, nodes: Sequence[NodeView], now: float) -> Command | None:
        for method in (self._emptiness, self._consolidation):
            cmd = method(nodes, now)
            if cmd is not None:
                return cmd
        return None

    def _emptiness(self, nodes: Sequence[NodeView], now: float) -> Command | None:
        gone = [
            n.name
            for n in nodes
            if n.empty_since is not None and now - n.empty_since >= self.unneeded_s
        ]
        if not gone:
            return None
        return Command("emptiness", tuple(gone), tuple(Terminate(n, "empty") for n in gone))

    def _consolidation(self, nodes: Sequence[NodeView], now: float) -> Command | None:
        if not self.consolidation:
            return None
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
        for cand in cands[: self.max_candidates]:
            if _fits_elsewhere(cand, nodes):
                decisions: list[Decision] = [Preempt(p.job_id, "consolidation") for p in cand.pods]
                decisions.append(Terminate(cand.name, "consolidation"))
                return Command("single-node-consolidation", (cand.name,), tuple(decisions))
        return None


def _fits_elsewhere(cand: NodeView, nodes: Sequence[NodeView]) -> bool:
    """Every pod of ``cand`` fits the free space of the other nodes it may run on.

    Pods that must stay on on-demand capacity are packed first into on-demand nodes; the
    spot-tolerant ones then take what is left anywhere.
    """
    others = [n for n in nodes if n.name != cand.name]

    def bins(spot: bool) -> list[Bin]:
        return [n.bin() for n in others if n.spot == spot]

    on_demand = bins(False)
    strict = [p.request for p in cand.pods if not p.spot_ok]
    loose = [p.request for p in cand.pods if p.spot_ok]
    _, left = pack(strict, None, on_demand)
    if left:
        return False
    _, left = pack(loose, None, bins(True) + on_demand)
    return not left
