"""FleetState: the snapshot every policy reads.

Nodes live in NumPy arrays (one row per node, one column per GPU slot) so that a placement filter
or scorer is a single vectorised pass over the whole fleet; the per-node Python objects carry only
what no hot path needs (labels, names). Policies read; only drivers call the mutating methods
(``allocate``/``release``/``add_node``/``remove_node``), after a policy has returned a decision.

Units: CPU in milli-cores, memory in MiB, GPU in milli-GPU (1000 = one whole GPU). A MIG-enabled
GPU offers no milli-GPU; it offers memory slices (bitmask ``mig_used``) under its model's profile
placement rules.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpufleet.decisions import Bind, CapacityType

GPU_MILLI = 1000


@dataclass(frozen=True, slots=True)
class ResourceRequest:
    """What one pod / job replica asks for.

    ``gpu_milli`` is per GPU: a shared pod has ``num_gpu == 1`` and ``gpu_milli < 1000``; a
    multi-GPU pod takes whole, fully idle GPUs. ``mig_profile`` (``"1g.5gb"``) asks for one MIG
    instance instead of GPUs. ``gpu_models`` is a hard constraint (None = any model).
    ``min_cuda`` uses CUDA's encoding (12.4 → 12040). ``zone`` pins the pod to one zone
    (``topology.kubernetes.io/zone`` node affinity; None = any): gang admission sets it so that
    every replica of a multi-node job lands in one zone ("" = nodes without a zone).
    """

    cpu_milli: int = 0
    memory_mib: int = 0
    num_gpu: int = 0
    gpu_milli: int = GPU_MILLI
    gpu_models: frozenset[str] | None = None
    gpu_memory_mib: int = 0
    mig_profile: str | None = None
    min_cuda: int = 0
    tolerations: frozenset[str] = frozenset()
    zone: str | None = None

    @property
    def total_gpu_milli(self) -> int:
        if self.mig_profile is not None:
            return 0
        return self.num_gpu * self.gpu_milli

    @property
    def is_shared(self) -> bool:
        return self.num_gpu == 1 and self.gpu_milli < GPU_MILLI and self.mig_profile is None

    @property
    def whole_gpus(self) -> int:
        """GPUs the request needs when fractions are rounded up (the exclusive baseline)."""
        if self.mig_profile is not None:
            return 1
        return self.num_gpu


@dataclass(slots=True)
class NodeInfo:
    """Per-node attributes that hot paths never touch."""

    name: str
    instance_type: str = ""
    zone: str = ""
    capacity_type: CapacityType = CapacityType.ON_DEMAND
    labels: dict[str, str] = field(default_factory=dict)
    taints: frozenset[str] = frozenset()


class FleetState:
    """Nodes as arrays; rows are never reused while a node lives (``active`` masks the gaps)."""

    def __init__(self, max_gpus: int = 8, capacity: int = 64) -> None:
        self.max_gpus = max_gpus
        self._cap = 0
        self.n = 0  # rows used (active or not)
        self.nodes: list[NodeInfo] = []
        self.index: dict[str, int] = {}
        self.model_names: list[str] = []
        self._model_ids: dict[str, int] = {}
        self.taint_names: list[str] = []
        self._taint_ids: dict[str, int] = {}
        self.zone_names: list[str] = []
        self._zone_ids: dict[str, int] = {}
        self._alloc(capacity)

    # -- storage -----------------------------------------------------------------------------
    def _alloc(self, cap: int) -> None:
        g = self.max_gpus

        def grow(
            old: np.ndarray | None, shape: tuple[int, ...], dtype: npt.DTypeLike, fill: int
        ) -> np.ndarray:
            new = np.full(shape, fill, dtype=dtype)
            if old is not None:
                sl = tuple(slice(0, s) for s in old.shape)
                new[sl] = old
            return new

        get = self.__dict__.get
        self.active = grow(get("active"), (cap,), bool, False)
        self.cpu_total = grow(get("cpu_total"), (cap,), np.int64, 0)
        self.cpu_free = grow(get("cpu_free"), (cap,), np.int64, 0)
        self.mem_total = grow(get("mem_total"), (cap,), np.int64, 0)
        self.mem_free = grow(get("mem_free"), (cap,), np.int64, 0)
        self.num_gpus = grow(get("num_gpus"), (cap,), np.int32, 0)
        self.model_id = grow(get("model_id"), (cap,), np.int32, -1)
        self.zone_id = grow(get("zone_id"), (cap,), np.int32, -1)
        self.spot = grow(get("spot"), (cap,), bool, False)
        self.cuda_driver = grow(get("cuda_driver"), (cap,), np.int32, 0)
        self.taint_bits = grow(get("taint_bits"), (cap,), np.int64, 0)
        # Per GPU slot; slots >= num_gpus hold -1 free milli so no filter ever picks them.
        self.free_milli = grow(get("free_milli"), (cap, g), np.int32, -1)
        self.gpu_mem_total = grow(get("gpu_mem_total"), (cap, g), np.int64, 0)
        self.gpu_mem_free = grow(get("gpu_mem_free"), (cap, g), np.int64, 0)
        self.nvlink_domain = grow(get("nvlink_domain"), (cap, g), np.int16, -1)
        self.mig_enabled = grow(get("mig_enabled"), (cap, g), bool, False)
        self.mig_used = grow(get("mig_used"), (cap, g), np.int32, 0)  # memory-slice bitmask
        self.mig_compute_used = grow(get("mig_compute_used"), (cap, g), np.int8, 0)
        self.mig_compute_total = grow(get("mig_compute_total"), (cap, g), np.int8, 0)
        # Bumped on every change to a row: derived per-node data (FGD's fragmentation terms) is
        # memoised against it, so a placement pass only recomputes the nodes that changed.
        self.row_version = grow(get("row_version"), (cap,), np.int64, 0)
        # Pods per GPU shape on the node (column 0: shared GPU, k: k whole GPUs) — what
        # GpuClustering's "same shape already here" reads. Widened with the GPU axis.
        self.shape_count = grow(get("shape_count"), (cap, g + 1), np.int32, 0)
        self._cap = cap

    def _widen(self, gpus: int) -> None:
        """Grow the GPU axis (a 16-GPU p2.16xlarge joins an 8-GPU fleet)."""
        extra = gpus - self.max_gpus
        fills = {
            "free_milli": -1,
            "gpu_mem_total": 0,
            "gpu_mem_free": 0,
            "nvlink_domain": -1,
            "mig_enabled": False,
            "mig_used": 0,
            "mig_compute_used": 0,
            "mig_compute_total": 0,
            "shape_count": 0,
        }
        for name, fill in fills.items():
            arr = getattr(self, name)
            pad = np.full((arr.shape[0], extra), fill, dtype=arr.dtype)
            setattr(self, name, np.concatenate([arr, pad], axis=1))
        self.max_gpus = gpus

    def _id(self, table: dict[str, int], names: list[str], key: str) -> int:
        if key not in table:
            table[key] = len(names)
            names.append(key)
        return table[key]

    def zone_index(self, name: str) -> int:
        """Row value of ``zone_id`` for a zone name: -1 for "" (no zone), -2 if unknown."""
        if not name:
            return -1
        return self._zone_ids.get(name, -2)

    def model_index(self, name: str) -> int:
        return self._id(self._model_ids, self.model_names, name)

    def taint_mask(self, taints: Iterable[str]) -> int:
        bits = 0
        for t in taints:
            idx = self._id(self._taint_ids, self.taint_names, t)
            if idx >= 63:
                raise ValueError("more than 63 distinct taints in one fleet")
            bits |= 1 << idx
        return bits

    def toleration_mask(self, tolerations: Iterable[str]) -> int:
        """Bits of the known taints the tolerations cover (unknown ones cannot matter)."""
        bits = 0
        for t in tolerations:
            idx = self._taint_ids.get(t)
            if idx is not None:
                bits |= 1 << idx
        return bits

    def copy(self) -> FleetState:
        """An independent copy: every array and table copied (``NodeInfo`` records, which
        nothing changes once added, are shared). A driver that rebuilds its snapshot every
        cycle copies its nodes-only state instead of adding every node again."""
        new = FleetState.__new__(FleetState)
        for k, v in self.__dict__.items():
            if isinstance(v, np.ndarray | list | dict):
                v = v.copy()
            new.__dict__[k] = v
        return new

    # -- mutation (drivers only) -------------------------------------------------------------
    def add_node(
        self,
        name: str,
        *,
        gpu_model: str,
        num_gpus: int,
        cpu_milli: int,
        memory_mib: int,
        gpu_memory_mib: int = 0,
        nvlink_domains: Iterable[int] | None = None,
        cuda_driver: int = 12040,
        mig_gpus: Iterable[int] = (),
        info: NodeInfo | None = None,
        mig_compute_slices: int = 7,
    ) -> int:
        if name in self.index:
            raise ValueError(f"node {name!r} already in the fleet")
        if num_gpus > self.max_gpus:
            self._widen(num_gpus)
        if self.n == self._cap:
            self._alloc(max(64, self._cap * 2))
        i = self.n
        self.n += 1
        info = info or NodeInfo(name=name)
        self.nodes.append(info)
        self.index[name] = i
        self.active[i] = True
        self.cpu_total[i] = self.cpu_free[i] = cpu_milli
        self.mem_total[i] = self.mem_free[i] = memory_mib
        self.num_gpus[i] = num_gpus
        self.model_id[i] = self.model_index(gpu_model) if num_gpus else -1
        self.zone_id[i] = self._id(self._zone_ids, self.zone_names, info.zone) if info.zone else -1
        self.spot[i] = info.capacity_type == CapacityType.SPOT
        self.cuda_driver[i] = cuda_driver
        self.taint_bits[i] = self.taint_mask(info.taints)
        self.free_milli[i, :] = -1
        self.free_milli[i, :num_gpus] = GPU_MILLI
        self.gpu_mem_total[i, :num_gpus] = gpu_memory_mib
        self.gpu_mem_free[i, :num_gpus] = gpu_memory_mib
        doms = list(nvlink_domains) if nvlink_domains is not None else [-1] * num_gpus
        self.nvlink_domain[i, :num_gpus] = doms
        self.mig_used[i, :] = 0
        self.mig_compute_used[i, :] = 0
        self.mig_compute_total[i, :] = 0
        self.shape_count[i, :] = 0
        for g in mig_gpus:
            self.mig_enabled[i, g] = True
            self.mig_compute_total[i, g] = mig_compute_slices
            self.free_milli[i, g] = 0  # MIG GPUs offer slices, not milli-GPU
        self.row_version[i] += 1
        return i

    def remove_node(self, name: str) -> None:
        i = self.index.pop(name)
        self.active[i] = False
        self.free_milli[i, :] = -1
        self.cpu_free[i] = 0
        self.mem_free[i] = 0
        self.row_version[i] += 1

    @staticmethod
    def shape_column(req: ResourceRequest) -> int:
        """Column of ``shape_count`` for a request: 0 shared, k for k whole GPUs, -1 none."""
        if req.mig_profile is not None or req.num_gpu == 0:
            return -1
        return 0 if req.is_shared else req.num_gpu

    def _apply(self, req: ResourceRequest, bind: Bind, sign: int) -> int:
        i = self.index[bind.node]
        self.cpu_free[i] -= sign * req.cpu_milli
        self.mem_free[i] -= sign * req.memory_mib
        for g in bind.gpus:
            self.free_milli[i, g] -= sign * bind.milli_per_gpu
            self.gpu_mem_free[i, g] -= sign * req.gpu_memory_mib
        col = self.shape_column(req)
        if 0 <= col < self.shape_count.shape[1] and bind.gpus:
            self.shape_count[i, col] += sign
        self.row_version[i] += 1
        return i

    def allocate(
        self, req: ResourceRequest, bind: Bind, mig_masks: Iterable[tuple[int, int, int]] = ()
    ) -> None:
        """Apply a Bind; ``mig_masks`` = (gpu, slice_mask, compute) per MIG slot."""
        masks = list(mig_masks)
        row = self.index[bind.node]
        for g, mask, _ in masks:
            if self.mig_used[row, g] & mask:
                raise ValueError(f"MIG slices {mask:#x} already used on {bind.node} GPU {g}")
        i = self._apply(req, bind, +1)
        over_gpu = any(self.free_milli[i, g] < 0 for g in bind.gpus)
        if self.cpu_free[i] < 0 or self.mem_free[i] < 0 or over_gpu:
            self._apply(req, bind, -1)
            raise ValueError(f"bind of {bind.job_id} overcommits node {bind.node}")
        for g, mask, compute in masks:
            self.mig_used[i, g] |= mask
            self.mig_compute_used[i, g] += compute

    def release(
        self, req: ResourceRequest, bind: Bind, mig_masks: Iterable[tuple[int, int, int]] = ()
    ) -> None:
        if bind.node not in self.index:
            return  # node already gone (reclaimed); nothing to give back
        i = self._apply(req, bind, -1)
        for g, mask, compute in mig_masks:
            self.mig_used[i, g] &= ~mask
            self.mig_compute_used[i, g] -= compute

    # -- read helpers ------------------------------------------------------------------------
    def rows(self) -> np.ndarray:
        """Indices of live nodes."""
        return np.flatnonzero(self.active[: self.n])

    def gpu_capacity_milli(self) -> int:
        live = self.active[: self.n]
        return int(self.num_gpus[: self.n][live].sum()) * GPU_MILLI

    def gpu_allocated_milli(self) -> int:
        """Allocated milli-GPU; a MIG GPU counts its used compute slices as a share of 1000."""
        live = self.active[: self.n]
        fm = self.free_milli[: self.n][live]
        mig = self.mig_enabled[: self.n][live]
        used = np.where((fm >= 0) & ~mig, GPU_MILLI - fm, 0)
        total = self.mig_compute_total[: self.n][live].astype(np.int64)
        mig_used = self.mig_compute_used[: self.n][live].astype(np.int64) * GPU_MILLI
        mig_milli = np.floor_divide(mig_used, np.maximum(total, 1))
        return int(used.sum() + np.where(mig, mig_milli, 0).sum())

    def gpu_free_milli_total(self) -> int:
        """Idle milli-GPU over the live fleet (the denominator of the fragmentation ratio)."""
        return self.gpu_capacity_milli() - self.gpu_allocated_milli()
