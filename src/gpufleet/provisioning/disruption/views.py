"""What a disruption method reads: one view per node and pod, and the snapshot of a scan."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpufleet.provisioning.binpack import Bin, NodeShape
from gpufleet.provisioning.scale_up import Offer
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
    gpu_mem_free: tuple[int, ...] = ()  # free GPU memory per GPU; () = all of it

    @property
    def allocation(self) -> float:
        if not self.shape.gpus:
            return 0.0
        if self.shape.mig:
            return sum(self.mig_compute_used) / (self.shape.mig_compute * self.shape.gpus)
        return 1.0 - sum(self.free_milli) / (GPU_MILLI * self.shape.gpus)

    def bin(self) -> Bin:
        """The node's free room, for packing pods into it."""
        mem = list(self.gpu_mem_free)
        if self.shape.mig:
            return Bin(self.shape, list(self.free_milli), self.cpu_free, self.mem_free, self.name,
                       mig_used=list(self.mig_used) or [0] * self.shape.gpus,
                       mig_compute_used=list(self.mig_compute_used) or [0] * self.shape.gpus,
                       gpu_mem=mem)
        return Bin(self.shape, list(self.free_milli), self.cpu_free, self.mem_free, self.name,
                   gpu_mem=mem)


@dataclass(frozen=True, slots=True)
class DisruptionSnapshot:
    """One scan's input: the nodes the methods may disrupt or move pods to, the clock, and what
    a replacement node could be. A driver builds it; methods only read it."""

    nodes: Sequence[NodeView]
    now: float
    offers: Sequence[Offer] = ()

    def node(self, name: str) -> NodeView | None:
        return next((n for n in self.nodes if n.name == name), None)
