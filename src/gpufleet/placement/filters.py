"""Filter plugins: which nodes could host the pod *now*. Each is one vectorised mask.

Like kube-scheduler's Filter extension point, every plugin is small and independent and a node
must pass all of them. Each is the vectorised form of one rule of ``placement.fit.fits`` (the
scalar reference they are tested against) and reports that rule's reason. A filter never
scores and never mutates; the policy counts how many nodes each filter rejected so an
Unschedulable carries kube's "0/N nodes are available: …" reason. ``applies(req)`` says
whether a filter has anything to check for a request (a request without a zone passes every
zone); the policy skips the ones that do not, which reject no node by construction.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from gpufleet.catalog.gpus import parse_version
from gpufleet.placement import fit
from gpufleet.placement.mig import mig_ok
from gpufleet.placement.view import PodView
from gpufleet.state import ResourceRequest


class Filter(Protocol):
    name: str
    reason: str

    def applies(self, req: ResourceRequest) -> bool:
        """False when the filter passes every node for ``req`` (it has nothing to check):
        the policy then skips it. Only a property of the request, never of the fleet."""
        ...

    def __call__(self, view: PodView) -> np.ndarray: ...


class CpuFit:
    name = "cpu"
    reason = fit.INSUFFICIENT_CPU

    def applies(self, req: ResourceRequest) -> bool:
        return True

    def __call__(self, view: PodView) -> np.ndarray:
        return view.cpu_free >= view.req.cpu_milli


class MemoryFit:
    name = "memory"
    reason = fit.INSUFFICIENT_MEMORY

    def applies(self, req: ResourceRequest) -> bool:
        return True

    def __call__(self, view: PodView) -> np.ndarray:
        return view.mem_free >= view.req.memory_mib


class GpuModelFit:
    """``gpu_models`` (openb's ``gpu_spec``) is a hard constraint for pods that use GPUs."""

    name = "gpu-model"
    reason = fit.MODEL_NOT_REQUESTED

    def applies(self, req: ResourceRequest) -> bool:
        return (req.num_gpu > 0 or req.mig_profile is not None) and bool(req.gpu_models)

    def __call__(self, view: PodView) -> np.ndarray:
        if view.req.num_gpu == 0 and view.req.mig_profile is None:
            return np.ones(view.n, dtype=bool)
        return view.model_ok


class GpuMemoryFit:
    """Enough GPUs with the requested free GPU memory each."""

    name = "gpu-memory"
    reason = fit.INSUFFICIENT_GPU_MEMORY

    def applies(self, req: ResourceRequest) -> bool:
        return bool(req.gpu_memory_mib) and req.mig_profile is None and req.num_gpu > 0

    def __call__(self, view: PodView) -> np.ndarray:
        req = view.req
        if not req.gpu_memory_mib or req.mig_profile is not None or req.num_gpu == 0:
            return np.ones(view.n, dtype=bool)
        enough: np.ndarray = (view.gpu_mem_free >= req.gpu_memory_mib).sum(axis=1) >= req.num_gpu
        return enough


class GpuCountFit:
    """Shared pods need one GPU with ``gpu_milli`` left; whole-GPU pods need fully idle GPUs."""

    name = "gpu"
    reason = fit.INSUFFICIENT_GPU

    def applies(self, req: ResourceRequest) -> bool:
        return req.mig_profile is None and req.num_gpu > 0

    def __call__(self, view: PodView) -> np.ndarray:
        req = view.req
        if req.mig_profile is not None or req.num_gpu == 0:
            return np.ones(view.n, dtype=bool)
        enough: np.ndarray = view.fit_count >= req.num_gpu
        return enough


class CudaFit:
    """The node's driver must support the CUDA the pod was built for, and so must the GPU.

    A driver upgrade cannot rescue a Kepler K80: CUDA 12 dropped compute capability 3.x, which
    the catalog records as the model's ``max_cuda``.
    """

    name = "cuda"
    reason = fit.CUDA_UNSUPPORTED

    def applies(self, req: ResourceRequest) -> bool:
        return bool(req.min_cuda)

    def __call__(self, view: PodView) -> np.ndarray:
        need = view.req.min_cuda
        if not need:
            return np.ones(view.n, dtype=bool)
        s = view.state
        ok: np.ndarray = s.cuda_driver[: view.n] >= need
        limits = np.full(len(s.model_names) + 1, np.iinfo(np.int32).max, dtype=np.int64)
        for mid, name in enumerate(s.model_names):
            if name in view.catalog:
                cap = view.catalog[name].max_cuda
                if cap:
                    limits[mid] = parse_version(cap)
        ok &= limits[s.model_id[: view.n]] >= need
        return ok


class TaintToleration:
    """Every taint on the node must be tolerated (NoSchedule semantics)."""

    name = "taints"
    reason = fit.UNTOLERATED_TAINT

    def applies(self, req: ResourceRequest) -> bool:
        return True

    def __call__(self, view: PodView) -> np.ndarray:
        tol = view.state.toleration_mask(view.req.tolerations)
        tolerated: np.ndarray = (view.state.taint_bits[: view.n] & ~np.int64(tol)) == 0
        return tolerated


class ZoneFit:
    """A pod pinned to a zone (``ResourceRequest.zone``) only fits nodes of that zone."""

    name = "zone"
    reason = fit.OTHER_ZONE

    def applies(self, req: ResourceRequest) -> bool:
        return req.zone is not None

    def __call__(self, view: PodView) -> np.ndarray:
        zone = view.req.zone
        if zone is None:
            return np.ones(view.n, dtype=bool)
        in_zone: np.ndarray = view.state.zone_id[: view.n] == view.state.zone_index(zone)
        return in_zone


class MigFit:
    name = "mig"
    reason = fit.NO_MIG_SLOT

    def applies(self, req: ResourceRequest) -> bool:
        return req.mig_profile is not None

    def __call__(self, view: PodView) -> np.ndarray:
        if view.req.mig_profile is None:
            return np.ones(view.n, dtype=bool)
        has_slot: np.ndarray = np.asarray(mig_ok(view).any(axis=1))  # (n,): axis=1 keeps an array
        return has_slot


DEFAULT_FILTERS: tuple[Filter, ...] = (
    ZoneFit(),
    TaintToleration(),
    GpuModelFit(),
    CudaFit(),
    CpuFit(),
    MemoryFit(),
    GpuMemoryFit(),
    GpuCountFit(),
    MigFit(),
)
