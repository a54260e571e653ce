"""Keep a multi-GPU pod inside one NVLink domain.

Gradients of a data-parallel job cross between its GPUs every step; over PCIe (or across the two
quads of a p3.16xlarge) that all-reduce is several times slower than over NVLink, so a node where
the pod's GPUs share a domain is worth more than one where they would not. Score: the share of the
pod's GPUs the best domain can hold (100 = the whole pod on one domain).
"""

from __future__ import annotations

import numpy as np

from gpufleet.placement.scorers.base import MAX_NODE_SCORE
from gpufleet.placement.view import PodView


class NvlinkTopologyScore:
    name = "topology"

    def score(self, view: PodView, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        k = view.req.num_gpu
        if k <= 1 or view.req.is_shared or view.req.mig_profile is not None:
            return np.zeros(len(rows))
        dom = view.state.nvlink_domain[rows]
        ok = view.gpu_ok[rows]
        best = np.zeros(len(rows), dtype=np.int64)
        for d in range(dom.shape[1]):
            best = np.maximum(best, (ok & (dom == d)).sum(axis=1))
        return MAX_NODE_SCORE * np.minimum(best, k) / k

    def score_one(self, view: PodView, row: int) -> float:
        k = view.req.num_gpu
        if k <= 1 or view.req.is_shared or view.req.mig_profile is not None:
            return 0.0
        per_domain: dict[int, int] = {}
        for g, d in enumerate(view.state.nvlink_domain[row]):
            if d >= 0 and view.gpu_ok[row, g]:
                per_domain[int(d)] = per_domain.get(int(d), 0) + 1
        return MAX_NODE_SCORE * min(max(per_domain.values(), default=0), k) / k
