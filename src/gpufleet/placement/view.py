"""The per-pod view every filter and scorer reads: the fleet's arrays plus the request.

One object per placement call, built once, so each plugin is a vectorised expression over the same
arrays (no per-node Python). ``capacity_view`` builds the same view over an *empty* fleet — run
through the same filters it answers "could this pod ever fit here?", which is how a policy tells
unschedulable-now from never-schedulable without a second set of rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

from gpufleet.catalog.gpus import GpuCatalog, default_gpu_catalog
from gpufleet.state import GPU_MILLI, FleetState, ResourceRequest


@dataclass(frozen=True)
class PodView:
    state: FleetState
    req: ResourceRequest
    n: int
    active: np.ndarray
    cpu_free: np.ndarray
    mem_free: np.ndarray
    free_milli: np.ndarray  # (n, G); -1 = no GPU in that slot
    gpu_mem_free: np.ndarray
    mig_used: np.ndarray
    mig_compute_used: np.ndarray
    catalog: GpuCatalog

    @property
    def milli(self) -> int:
        """Milli-GPU the request takes on each GPU it uses (1000 for whole GPUs)."""
        r = self.req
        return r.gpu_milli if r.is_shared else GPU_MILLI

    @property
    def gpu_total(self) -> int:
        return self.req.total_gpu_milli

    @cached_property
    def gpu_ok(self) -> np.ndarray:
        """(n, G): GPUs this pod could use now (enough milli and GPU memory, not MIG)."""
        if self.req.num_gpu == 0 or self.req.mig_profile is not None:
            return np.zeros_like(self.free_milli, dtype=bool)
        ok: np.ndarray = self.free_milli >= self.milli
        if self.req.gpu_memory_mib:
            ok &= self.gpu_mem_free >= self.req.gpu_memory_mib
        ok &= ~self.state.mig_enabled[: self.n]
        return ok

    @cached_property
    def fit_count(self) -> np.ndarray:
        counts: np.ndarray = self.gpu_ok.sum(axis=1)
        return counts

    @cached_property
    def gpu_left(self) -> np.ndarray:
        """(n,) idle milli-GPU per node (MIG GPUs and empty slots count 0)."""
        left: np.ndarray = np.where(self.free_milli > 0, self.free_milli, 0).sum(axis=1)
        return left

    @cached_property
    def model_ok(self) -> np.ndarray:
        """(n,) nodes whose GPU model satisfies the request's model constraint."""
        models = self.req.gpu_models
        if not models:
            return np.ones(self.n, dtype=bool)
        lut = allowed_models(self.catalog, models, tuple(self.state.model_names))
        ok: np.ndarray = lut[self.state.model_id[: self.n]]
        return ok


@lru_cache(maxsize=4096)
def allowed_models(catalog: GpuCatalog, models: frozenset[str], names: tuple[str, ...]
                   ) -> np.ndarray:
    """A lookup table over the fleet's model ids: True where the model satisfies ``models``
    (both sides resolved through the catalog's aliases). One extra False entry at the end is
    what id -1 (a node without GPUs) indexes. The few (request models, fleet models) pairs
    recur on every placement call, so the table is built once per pair instead of an
    ``np.isin`` and a catalog lookup per model per call."""
    wanted = {catalog.resolve(m) or m for m in models}
    lut = np.zeros(len(names) + 1, dtype=bool)
    for i, name in enumerate(names):
        lut[i] = (catalog.resolve(name) or name) in wanted
    lut.flags.writeable = False
    return lut


def pod_view(state: FleetState, req: ResourceRequest, catalog: GpuCatalog | None = None) -> PodView:
    n = state.n
    return PodView(
        state=state,
        req=req,
        n=n,
        active=state.active[:n],
        cpu_free=state.cpu_free[:n],
        mem_free=state.mem_free[:n],
        free_milli=state.free_milli[:n],
        gpu_mem_free=state.gpu_mem_free[:n],
        mig_used=state.mig_used[:n],
        mig_compute_used=state.mig_compute_used[:n],
        catalog=catalog or default_gpu_catalog(),
    )


def capacity_view(view: PodView) -> PodView:
    """The same request against the same nodes, all empty (the view's ``active`` rows: a
    refusal read later keeps the rows it was refused on)."""
    s, n = view.state, view.n
    slots = np.arange(s.max_gpus)[None, :] < s.num_gpus[:n, None]
    mig = s.mig_enabled[:n]
    free = np.where(slots, np.where(mig, 0, GPU_MILLI), -1).astype(np.int32)
    return PodView(
        state=s,
        req=view.req,
        n=n,
        active=view.active,
        cpu_free=s.cpu_total[:n],
        mem_free=s.mem_total[:n],
        free_milli=free,
        gpu_mem_free=s.gpu_mem_total[:n],
        mig_used=np.zeros_like(s.mig_used[:n]),
        mig_compute_used=np.zeros_like(s.mig_compute_used[:n]),
        catalog=view.catalog,
    )
