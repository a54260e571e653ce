"""GPU stranding: idle GPUs left without the CPU cores their future pods will ask for.

On openb every node is a GPU node and the cores are nearly as scarce as the GPUs: at 100% GPU load
the trace has asked for ~80% of the fleet's CPU, a whole-GPU pod wants ~11 cores (a G2 node has 12
per GPU), and 13% of the pods are CPU-only. An idle GPU on a node whose cores are spent is as lost
as a fragmented one, yet FGD's ΔF barely sees it (it moves only when some typical task's CPU
threshold is crossed). Used as a tie-break among FGD's equals, this scorer prefers the node that
strands the fewest GPUs:

* CPU-only pod: minus the node's idle GPU milli — a node whose GPUs are all taken absorbs CPU-only
  work first, since those cores can no longer serve any GPU.
* Whole-GPU pod: minus the idle GPUs left over that the node's remaining cores cannot feed, at
  ``cpu_per_gpu`` cores each (the probability-weighted median CPU per GPU of the typical whole-GPU
  tasks: a GPU counts as usable when a median whole-GPU pod would still get its cores).
* Shared and MIG pods: 0 (neutral). Shared pods ask few cores (~3 on openb) and FGD's own GPU
  choice matters more for them; scoring them by stranding made results worse.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpufleet.placement.view import PodView
from gpufleet.state import GPU_MILLI, ResourceRequest


def median_cpu_per_gpu(tasks: Sequence[tuple[ResourceRequest, float]]) -> float | None:
    """Probability-weighted median of cpu_milli / num_gpu over whole-GPU tasks (None: no such)."""
    per = sorted(
        (r.cpu_milli / r.num_gpu, p)
        for r, p in tasks
        if r.num_gpu and not r.is_shared and r.mig_profile is None
    )
    total = sum(p for _, p in per)
    seen = 0.0
    for cpu, p in per:
        seen += p
        if seen >= total / 2:
            return cpu
    return None


class StrandingScore:
    name = "stranding"

    def __init__(self, typical_tasks: Sequence[tuple[ResourceRequest, float]]) -> None:
        self.cpu_per_gpu = median_cpu_per_gpu(typical_tasks)

    def set_typical_tasks(self, typical_tasks: Sequence[tuple[ResourceRequest, float]]) -> None:
        """Follow a new task mix (learned online): the median CPU per GPU moves with it."""
        self.cpu_per_gpu = median_cpu_per_gpu(typical_tasks)

    def _kind(self, req: ResourceRequest) -> str:
        if req.mig_profile is not None or req.is_shared:
            return "neutral"
        return "cpu" if req.num_gpu == 0 else "whole"

    def score(self, view: PodView, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        req, kind = view.req, self._kind(view.req)
        if kind == "neutral" or (kind == "whole" and not self.cpu_per_gpu):
            return np.zeros(len(rows))
        free = view.free_milli[rows]
        if kind == "cpu":
            idle_milli: np.ndarray = np.where(free > 0, free, 0).sum(axis=1)
            return -idle_milli.astype(np.float64)
        idle: np.ndarray = (free == GPU_MILLI).sum(axis=1) - req.num_gpu
        fed = (view.cpu_free[rows] - req.cpu_milli) // self.cpu_per_gpu
        stranded: np.ndarray = np.maximum(idle - fed, 0)
        return -stranded.astype(np.float64)

    def score_one(self, view: PodView, row: int) -> float:
        req, kind = view.req, self._kind(view.req)
        frees = [int(f) for f in view.free_milli[row]]
        if kind == "cpu":
            return -float(sum(f for f in frees if f > 0))
        if kind == "neutral" or not self.cpu_per_gpu:
            return 0.0
        idle = sum(1 for f in frees if f == GPU_MILLI) - req.num_gpu
        fed = (int(view.cpu_free[row]) - req.cpu_milli) // self.cpu_per_gpu
        return -float(max(idle - fed, 0))
