"""First-fit-decreasing bin packing of pod requests into node shapes.

Used by scale-up ("how many nodes of this type does the pending set need?"), by the in-flight
accounting ("which pending pods will the nodes already booting absorb?") and by consolidation
("do this node's pods fit in the others' free space?"). It applies placement's fit rule
(``gpufleet.placement.fit``) at the granularity a provisioner needs: whether a node can take a pod
at all (model through the aliases, driver and per-model CUDA limit, taints, MIG mode, sizes) is
``fits`` asked of an empty node of the shape, and the room left as pods are packed is tracked per
GPU in milli-GPU *and* GPU memory: a multi-GPU pod takes whole idle GPUs; a shared pod takes
``gpu_milli`` and its ``gpu_memory_mib`` on one GPU (best fit); CPU and memory must fit too.

MIG: a node shape with ``mig_compute > 0`` is a node whose GPUs are all in MIG mode (it offers
slices, never milli-GPU). A MIG pod takes one instance of its profile on such a node, on the
fullest GPU at the start offset that keeps the most later placements open — the same choice and
the same legal-start rule (``gpufleet.placement.mig``) that placement applies, so the provisioner
never promises a layout that placement (or the driver) would refuse: two 3g.20gb fit an A100
(starts 0 and 4), a third needs a second GPU even though a 1g.5gb would still fit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache, lru_cache

from gpufleet.catalog.gpus import MigSpec, default_gpu_catalog
from gpufleet.catalog.instances import InstanceType
from gpufleet.placement.fit import NodeRoom, fits, gpu_takes
from gpufleet.placement.mig import best_mig_slot  # the placement rule itself, not a copy
from gpufleet.state import GPU_MILLI, ResourceRequest

# mig-manager's named config that turns MIG mode on for every GPU without creating instances:
# instances are then created per pod at bind time (dynamic partitioning), which is what the
# simulator models. Nodes launched for MIG pods carry this label.
MIG_CONFIG = "all-enabled"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"


@dataclass(frozen=True, slots=True)
class NodeShape:
    """Capacity of one node type (what a new node offers)."""

    gpu_model: str
    gpus: int
    cpu_milli: int
    memory_mib: int
    gpu_memory_mib: int = 0
    cuda_driver: int = 0
    mig_compute: int = 0  # > 0: every GPU is in MIG mode with this many compute slices
    taints: frozenset[str] = frozenset()  # NoSchedule taints every node of the shape carries

    @property
    def mig(self) -> bool:
        return self.mig_compute > 0

    @classmethod
    def of(cls, it: InstanceType, mig: bool = False) -> NodeShape:
        """An instance type's node, every GPU in MIG mode when ``mig`` (and the model has MIG)."""
        gm = default_gpu_catalog()[it.gpu_model]
        compute = gm.mig.compute_slices if mig and gm.mig is not None else 0
        return cls(it.gpu_model, it.gpus, it.cpu_milli, it.memory_mib, gm.memory_mib,
                   it.cuda_driver, compute)

    def empty_room(self) -> NodeRoom:
        """A node of this shape with nothing bound, as the fit rule reads it."""
        return NodeRoom.empty(self.gpu_model, self.gpus, self.cpu_milli, self.memory_mib,
                              self.gpu_memory_mib, self.cuda_driver, self.taints,
                              self.mig_compute)


def mig_spec(gpu_model: str) -> MigSpec | None:
    cat = default_gpu_catalog()
    return cat[gpu_model].mig if gpu_model in cat else None


@cache
def _mig_share(profile: str, models: frozenset[str] | None) -> int:
    cat = default_gpu_catalog()
    shares = []
    for m in sorted(models) if models else sorted(cat.models):
        spec = mig_spec(m)
        if spec is not None and profile in spec.profiles:
            shares.append(spec.profiles[profile].compute * GPU_MILLI // spec.compute_slices)
    return max(shares, default=0)


def gpu_milli_of(req: ResourceRequest) -> int:
    """Milli-GPU a request occupies: a MIG instance counts its compute slices as a share of
    the GPU (1g on a 7-slice A100 = 142), like ``FleetState.gpu_allocated_milli``."""
    if req.mig_profile is not None:
        return _mig_share(req.mig_profile, req.gpu_models)
    return req.total_gpu_milli


@dataclass(slots=True)
class Bin:
    """A node being filled: free milli and GPU memory per GPU, CPU, memory (MIG: used slices
    per GPU). ``gpu_mem`` left empty means every GPU's memory is free (the shape's)."""

    shape: NodeShape
    free: list[int]
    cpu: int
    mem: int
    tag: str = ""
    items: list[int] = field(default_factory=list)
    mig_used: list[int] = field(default_factory=list)  # memory-slice bitmask per GPU
    mig_compute_used: list[int] = field(default_factory=list)
    gpu_mem: list[int] = field(default_factory=list)  # free GPU memory (MiB) per GPU

    def __post_init__(self) -> None:
        if not self.gpu_mem:
            self.gpu_mem = [self.shape.gpu_memory_mib] * self.shape.gpus

    @classmethod
    def empty(cls, shape: NodeShape, tag: str = "") -> Bin:
        if shape.mig:
            return cls(
                shape,
                [0] * shape.gpus,
                shape.cpu_milli,
                shape.memory_mib,
                tag,
                mig_used=[0] * shape.gpus,
                mig_compute_used=[0] * shape.gpus,
            )
        # every field given: no default factory and no ``__post_init__`` fill (scale-up makes
        # a bin per booting node on every scan)
        return cls(shape, [GPU_MILLI] * shape.gpus, shape.cpu_milli, shape.memory_mib, tag, [],
                   [], [], [shape.gpu_memory_mib] * shape.gpus)

    def copy(self) -> Bin:
        """An independent copy for a trial packing (a gang tried zone by zone). The shape is
        frozen and shared; every list is copied: ``copy.deepcopy`` did the same by walking
        the object graph, a large share of the scale-up scan's time."""
        return Bin(self.shape, self.free.copy(), self.cpu, self.mem, self.tag, self.items.copy(),
                   self.mig_used.copy(), self.mig_compute_used.copy(), self.gpu_mem.copy())

    def has_gpu_room(self) -> bool:
        if self.shape.mig:
            return any(c < self.shape.mig_compute for c in self.mig_compute_used)
        return bool(self.free) and max(self.free) > 0  # any(f > 0), at C speed

    def take(self, req: ResourceRequest) -> bool:
        """Claim room for ``req`` if it fits; False leaves the bin unchanged."""
        if req.cpu_milli > self.cpu or req.memory_mib > self.mem or not fits_shape(req, self.shape):
            return False
        if req.num_gpu == 0 and req.mig_profile is None:
            self.cpu -= req.cpu_milli
            self.mem -= req.memory_mib
            return True
        if req.mig_profile is not None or self.shape.mig:
            if not (self.shape.mig and req.mig_profile is not None and self._take_mig(req)):
                return False
        elif req.num_gpu == 1 and req.gpu_milli < GPU_MILLI:
            if max(self.free, default=0) < req.gpu_milli:  # no GPU has the milli: a C-speed look
                return False
            best = -1
            for g, f in enumerate(self.free):
                if gpu_takes(req, f, self.gpu_mem[g], False) and (best < 0 or f < self.free[best]):
                    best = g
            if best < 0:
                return False
            self.free[best] -= req.gpu_milli
            self.gpu_mem[best] -= req.gpu_memory_mib
        else:
            if self.free.count(GPU_MILLI) < req.num_gpu:  # too few idle GPUs: a C-speed look
                return False
            idle = [g for g, f in enumerate(self.free) if gpu_takes(req, f, self.gpu_mem[g], False)]
            if len(idle) < req.num_gpu:
                return False
            for g in idle[: req.num_gpu]:
                self.free[g] = 0
                self.gpu_mem[g] -= req.gpu_memory_mib
        self.cpu -= req.cpu_milli
        self.mem -= req.memory_mib
        return True

    def _take_mig(self, req: ResourceRequest) -> bool:
        """placement.mig.choose_mig's choice: fullest GPU, then the start leaving most open."""
        spec = mig_spec(self.shape.gpu_model)
        if spec is None or req.mig_profile not in spec.profiles:
            return False
        prof = spec.profiles[req.mig_profile]
        best = best_mig_slot(
            spec,
            prof,
            (
                (g, used, self.mig_compute_used[g])
                for g, used in enumerate(self.mig_used)
                if self.mig_compute_used[g] + prof.compute <= self.shape.mig_compute
            ),
        )
        if best is None:
            return False
        g, st = best
        self.mig_used[g] |= prof.slice_mask(st)
        self.mig_compute_used[g] += prof.compute
        return True


def fits_shape(req: ResourceRequest, shape: NodeShape) -> bool:
    """Could ``req`` run on an empty node of ``shape`` at all (model, MIG mode, CUDA, taints,
    sizes)? Placement's fit rule asked of an empty node; cached, as the same few requests and
    shapes are asked again on every scan.

    A packing asks it of the same request and shape objects over and over (once per bin tried),
    so answers are first looked up by the objects' identity — a dict keyed by two ints, where
    ``shape_misfits``'s cache hashes and compares two frozen dataclasses field by field. The
    entry holds both objects, so their ids cannot be reused while it lives."""
    key = (id(req), id(shape))
    hit = _FITS_BY_ID.get(key)
    if hit is not None and hit[0] is req and hit[1] is shape:
        return hit[2]
    ok = not shape_misfits(req, shape)
    if len(_FITS_BY_ID) >= _FITS_BY_ID_MAX:
        _FITS_BY_ID.clear()
    _FITS_BY_ID[key] = (req, shape, ok)
    return ok


_FITS_BY_ID: dict[tuple[int, int], tuple[ResourceRequest, NodeShape, bool]] = {}
_FITS_BY_ID_MAX = 1 << 14


@lru_cache(maxsize=1 << 16)
def shape_misfits(req: ResourceRequest, shape: NodeShape) -> tuple[str, ...]:
    """Why an empty node of ``shape`` cannot take ``req`` (placement's reasons); () = it can."""
    return tuple(fits(req, shape.empty_room()))


def size_key(req: ResourceRequest) -> tuple[int, int, int]:
    return (gpu_milli_of(req), req.cpu_milli, req.memory_mib)


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
    open_bins = [b for b in bins if b.has_gpu_room() or not b.free]
    order = sorted(range(len(items)), key=lambda i: size_key(items[i]), reverse=True)
    # An item equal to the one before it starts where that one went: every bin before that
    # one refused the same request, and a bin only loses room, so it would refuse again
    # (first fit unchanged; placeholders and replicas come in runs of equal requests).
    last: ResourceRequest | None = None
    last_left = False  # ``last`` fit nowhere, so neither does an equal item
    start = 0
    for i in order:
        req = items[i]
        same = req is last or req == last
        if same and last_left:
            left.append(i)
            continue
        gpu = req.num_gpu > 0 or req.mig_profile is not None
        pool = open_bins if gpu else bins
        placed = None
        at = start if same else 0
        while at < len(pool):
            if pool[at].take(req):
                placed = pool[at]
                break
            at += 1
        last = req
        if placed is None:
            if shape is None or not fits_shape(req, shape):
                left.append(i)
                last_left = True
                continue
            placed = Bin.empty(shape)
            if not placed.take(req):
                left.append(i)
                last_left = True
                continue
            bins.append(placed)
            open_bins.append(placed)
            at = len(pool) - 1
        last_left = False
        start = at  # a full bin leaves ``open_bins`` below: the next one then sits at ``at``
        placed.items.append(i)
        if placed.free and gpu and not placed.has_gpu_room():
            del open_bins[at]  # ``pool`` is ``open_bins`` for a GPU item: this bin, by position
    return bins, left
