"""GPU-sharing heuristics from the FGD paper's baselines: GpuPacking and GpuClustering.

Both reproduce the simulator's integer score bands exactly, because the bands decide ties and ties
are broken at random: a faithful band structure is what makes the baseline numbers comparable.
"""

from __future__ import annotations

import numpy as np

from gpufleet.placement.scorers.base import MAX_NODE_SCORE, MAX_SPEC_GPU
from gpufleet.placement.view import PodView
from gpufleet.state import GPU_MILLI

_BIG = np.iinfo(np.int32).max


class GpuPackingScore:
    """Prefer a partly used GPU (100..50), then idle GPUs on a used node (50..33), then an empty
    node (33..0); within a band, the tighter fit scores higher."""

    name = "gpupacking"

    def score(self, view: PodView, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        req = view.req
        if req.num_gpu == 0 or req.mig_profile is not None:
            return np.zeros(len(rows))
        free = view.free_milli[rows]
        n_gpus = view.state.num_gpus[rows]
        fully = (free == GPU_MILLI).sum(axis=1)
        chosen = np.where(view.gpu_ok[rows], free, _BIG).min(axis=1)
        if req.is_shared:
            uses_idle = chosen == GPU_MILLI
            ratio = (chosen * 100) // GPU_MILLI
            shared = np.maximum(MAX_NODE_SCORE - ratio // 10, MAX_NODE_SCORE // 2)
            used_node = np.where(
                uses_idle, max(MAX_NODE_SCORE // 2 - 1, MAX_NODE_SCORE // 3), shared
            )
        else:
            used_node = np.full(
                len(rows), max(MAX_NODE_SCORE // 2 - req.num_gpu, MAX_NODE_SCORE // 3)
            )
        empty = np.maximum(MAX_NODE_SCORE // 3 - fully, fully)
        return np.where(fully == n_gpus, empty, used_node).astype(np.float64)

    def score_one(self, view: PodView, row: int) -> float:
        req = view.req
        if req.num_gpu == 0 or req.mig_profile is not None:
            return 0.0
        n = int(view.state.num_gpus[row])
        frees = [int(f) for f in view.free_milli[row][:n]]
        fully = sum(1 for f in frees if f == GPU_MILLI)
        if fully == n:
            return float(max(MAX_NODE_SCORE // 3 - fully, fully))
        order = sorted(range(n), key=lambda g: frees[g])  # least idle first (stable)
        need, picked = req.num_gpu, []
        for g in order:
            if need and view.gpu_ok[row, g]:
                picked.append(g)
                need -= 1
        idle_used = sum(1 for g in picked if frees[g] == GPU_MILLI)
        if idle_used:
            return float(max(MAX_NODE_SCORE // 2 - idle_used, MAX_NODE_SCORE // 3))
        ratio = sum(frees[g] * 100 // GPU_MILLI for g in picked)
        return float(max(MAX_NODE_SCORE - ratio // 10, MAX_NODE_SCORE // 2))


class GpuClusteringScore:
    """Prefer nodes already running only pods of the same GPU shape, then mixed nodes holding it,
    then empty nodes, then nodes of other shapes; within a band, fuller nodes first."""

    name = "gpuclustering"

    def score(self, view: PodView, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        req = view.req
        col = view.state.shape_column(req)
        if col < 0:
            return np.zeros(len(rows))
        counts = view.state.shape_count[rows]
        same = counts[:, col] > 0 if col < counts.shape[1] else np.zeros(len(rows), bool)
        kinds = (counts > 0).sum(axis=1)
        quarter = MAX_NODE_SCORE // 4
        base = np.trunc(quarter * (MAX_SPEC_GPU - view.gpu_left[rows]) / MAX_SPEC_GPU)
        band = np.where(same, np.where(kinds == 1, 3, 2), np.where(kinds == 0, 1, 0))
        score: np.ndarray = base + band * quarter
        return score

    def score_one(self, view: PodView, row: int) -> float:
        col = view.state.shape_column(view.req)
        if col < 0:
            return 0.0
        counts = view.state.shape_count[row]
        kinds = int((counts > 0).sum())
        same = col < len(counts) and counts[col] > 0
        quarter = MAX_NODE_SCORE // 4
        base = int(quarter * (MAX_SPEC_GPU - int(view.gpu_left[row])) / MAX_SPEC_GPU)
        bands = {(True, True): 3, (True, False): 2, (False, True): 1, (False, False): 0}
        band = bands[(bool(same), kinds == (1 if same else 0))]
        return float(base + band * quarter)
