"""GPU stranding by CPU-only pods: put them where they take CPU away from no idle GPU.

On openb every node is a GPU node and the CPU is nearly as scarce as the GPUs (the trace asks for
~80% of the fleet's cores at 100% GPU load; 1-GPU pods ask ~11 cores each). A CPU-only pod that
lands on a node with idle GPUs eats the cores those GPUs' future pods need — the GPUs are stranded
without a single milli of them being used. FGD's ΔF barely sees this (it only moves when a typical
task's CPU threshold is crossed), so among FGD's equals we send CPU-only pods to the node with the
least idle GPU milli: a GPU-full node first. GPU pods score 0 (the scorer is neutral for them).
"""

from __future__ import annotations

import numpy as np

from gpufleet.placement.view import PodView


def _cpu_only(view: PodView) -> bool:
    return view.req.num_gpu == 0 and view.req.mig_profile is None


class CpuOnlyStrandingScore:
    name = "cpu-only-stranding"

    def score(self, view: PodView, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        if not _cpu_only(view):
            return np.zeros(len(rows))
        return -view.gpu_left[rows].astype(np.float64)

    def score_one(self, view: PodView, row: int) -> float:
        if not _cpu_only(view):
            return 0.0
        return -float(sum(int(f) for f in view.free_milli[row] if f > 0))
