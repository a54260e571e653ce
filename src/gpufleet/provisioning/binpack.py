"""First-fit-decreasing bin packing of pod requests into node shapes.

Used by scale-up ("how many nodes of this type does the pending set need?"), by the in-flight
accounting ("which pending pods will the nodes already booting absorb?") and by consolidation
("do this node's pods fit in the others' free space?"). It mirrors the placement rules at the
granularity a provisioner needs: a multi-GPU pod takes whole idle GPUs; a shared pod takes
``gpu_milli`` on one GPU (best fit); CPU and memory must fit too. MIG requests are not packed
here (the simulator rejects them up front).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gpufleet.state import GPU_MILLI, ResourceRequest


@dataclass(frozen=True, slots=True)
class NodeShape:
    """Capacity of one node type (what a new node offers)."""

    gpu_model: str
    gpus: int
    cpu_milli: int
    memory_mib: int
    gpu_memory_mib: int = 0
    cuda_driver: int = 0


@dataclass(slots=True)
class Bin:
    """A node being filled: free milli per GPU, CPU, memory."""

    shape: NodeShape
    free: list[int]
    cpu: int
    mem: int
    tag: str = ""
    items: list[int] = field(default_factory=list)

    @classmethod
    def empty(cls, shape: NodeShape, tag: str = "") -> Bin:
        return cls(shape, [GPU_MILLI] * shape.gpus, shape.cpu_milli, shape.memory_mib, tag)

    def take(self, req: ResourceRequest) -> bool:
        """Claim room for ``req`` if it fits; False leaves the bin unchanged."""
        if req.cpu_milli > self.cpu or req.memory_mib > self.mem:
            return False
        if req.num_gpu == 0:
            self.cpu -= req.cpu_milli
            self.mem -= req.memory_mib
            return True
        if req.num_gpu == 1 and req.gpu_milli < GPU_MILLI:
            best = -1
            for g, f in enumerate(self.free):
                if f >= req.gpu_milli and (best < 0 or f < self.free[best]):
                    best = g
            if best < 0:
                return False
            self.free[best] -= req.gpu_milli
        else:
            idle = [g for g, f in enumerate(self.free) if f == GPU_MILLI]
            if len(idle) < req.num_gpu:
                return False
            for g in idle[: req.num_gpu]:
                self.free[g] = 0
        self.cpu -= req.cpu_milli
        self.mem -= req.memory_mib
        return True


def fits_shape(req: ResourceRequest, shape: NodeShape) -> bool:
    """Could ``req`` run on an empty node of ``shape`` at all (model, CUDA, sizes)?"""
    if req.mig_profile is not None:
        return False
    if req.num_gpu > 0:
        if req.gpu_models is not None and shape.gpu_model not in req.gpu_models:
            return False
        if req.num_gpu > shape.gpus:
            return False
        if req.gpu_memory_mib and req.gpu_memory_mib > shape.gpu_memory_mib:
            return False
    if req.min_cuda and shape.cuda_driver and req.min_cuda > shape.cuda_driver:
        return False
    return req.cpu_milli <= shape.cpu_milli and req.memory_mib <= shape.memory_mib


def size_key(req: ResourceRequest) -> tuple[int, int, int]:
    return (req.total_gpu_milli, req.cpu_milli, req.memory_mib)


def pack(
    items: Sequence[ResourceRequest], shape: NodeShape | None, bins: list[Bin] | None = None
) -> tuple[list[Bin], list[int]]:
    """Pack ``items`` (largest first) into ``bins``, opening new ``shape`` bins as needed.

    Returns (bins, indices of items that fit nowhere). ``shape=None`` opens no new bins: what
    does not fit the given ones is returned as left over.
    """
    bins = list(bins or [])
    left: list[int] = []
    # bins with GPU room left; a bin leaves this list once its GPUs are all taken, which keeps
    # packing many small pods into many small nodes linear instead of quadratic
    open_bins = [b for b in bins if any(f > 0 for f in b.free) or not b.free]
    order = sorted(range(len(items)), key=lambda i: size_key(items[i]), reverse=True)
    for i in order:
        req = items[i]
        pool = open_bins if req.num_gpu > 0 else bins
        placed = None
        for b in pool:
            if b.take(req):
                placed = b
                break
        if placed is None:
            if shape is None or not fits_shape(req, shape):
                left.append(i)
                continue
            placed = Bin.empty(shape)
            if not placed.take(req):
                left.append(i)
                continue
            bins.append(placed)
            open_bins.append(placed)
        placed.items.append(i)
        if placed.free and req.num_gpu > 0 and max(placed.free) <= 0:
            open_bins.remove(placed)
    return bins, left
