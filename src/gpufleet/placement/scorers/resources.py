"""Resource-shape scorers: Random, LeastAllocated (spread), BestFit and DotProd (Tetris).

The three published baselines reproduce the FGD simulator (hkust-adsl/kubernetes-scheduler-
simulator) including its integer truncation to 0..100: the truncation creates ties that are then
broken at random, and that is part of what the published numbers measure.
"""

from __future__ import annotations

import numpy as np

from gpufleet.placement.scorers.base import MAX_NODE_SCORE, MAX_SPEC_CPU, MAX_SPEC_GPU
from gpufleet.placement.view import PodView


class RandomScore:
    """One uniformly random feasible node gets the top score (FGD's "Random" baseline)."""

    name = "random"

    def score(self, view: PodView, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        out = np.zeros(len(rows))
        out[rng.integers(len(rows))] = MAX_NODE_SCORE
        return out

    def score_one(self, view: PodView, row: int) -> float:
        return 0.0  # no per-node meaning: the draw is over the feasible set


class LeastAllocatedScore:
    """kube-scheduler's NodeResourcesLeastAllocated with GPU added: mean free share after binding.

    Spreading is what a cluster without fractional-GPU awareness does by default, so it is the
    baseline the simulator's static-exclusive configuration runs.
    """

    name = "spread"

    def score(self, view: PodView, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        s, req = view.state, view.req
        cpu_t = np.maximum(s.cpu_total[rows], 1)
        mem_t = np.maximum(s.mem_total[rows], 1)
        gpu_t = s.num_gpus[rows].astype(np.float64) * 1000
        cpu = (view.cpu_free[rows] - req.cpu_milli) / cpu_t
        mem = (view.mem_free[rows] - req.memory_mib) / mem_t
        has_gpu = gpu_t > 0
        gpu = np.where(has_gpu, (view.gpu_left[rows] - view.gpu_total) / np.maximum(gpu_t, 1), 0)
        score: np.ndarray = MAX_NODE_SCORE * (cpu + mem + gpu) / np.where(has_gpu, 3, 2)
        return score

    def score_one(self, view: PodView, row: int) -> float:
        s, req = view.state, view.req
        parts = [
            (view.cpu_free[row] - req.cpu_milli) / max(int(s.cpu_total[row]), 1),
            (view.mem_free[row] - req.memory_mib) / max(int(s.mem_total[row]), 1),
        ]
        if s.num_gpus[row]:
            parts.append((view.gpu_left[row] - view.gpu_total) / (int(s.num_gpus[row]) * 1000))
        return float(MAX_NODE_SCORE * sum(parts) / len(parts))


class BestFitScore:
    """Least (CPU, GPU) left over after binding, each normalised by the largest node spec."""

    name = "bestfit"

    def score(self, view: PodView, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        cpu = (view.cpu_free[rows] - view.req.cpu_milli) / MAX_SPEC_CPU
        gpu = (view.gpu_left[rows] - view.gpu_total) / MAX_SPEC_GPU
        score: np.ndarray = np.trunc((1.0 - (cpu * 0.5 + gpu * 0.5)) * MAX_NODE_SCORE)
        return score

    def score_one(self, view: PodView, row: int) -> float:
        cpu = (int(view.cpu_free[row]) - view.req.cpu_milli) / MAX_SPEC_CPU
        gpu = (int(view.gpu_left[row]) - view.gpu_total) / MAX_SPEC_GPU
        return float(int((1.0 - (cpu * 0.5 + gpu * 0.5)) * MAX_NODE_SCORE))


class DotProdScore:
    """Tetris: prefer the node whose free (CPU, GPU) vector is least aligned with the request."""

    name = "dotprod"

    def score(self, view: PodView, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        req = view.req
        dot = (view.cpu_free[rows] / MAX_SPEC_CPU) * (req.cpu_milli / MAX_SPEC_CPU)
        dot = dot + (view.gpu_left[rows] / MAX_SPEC_GPU) * (view.gpu_total / MAX_SPEC_GPU)
        score: np.ndarray = np.trunc(MAX_NODE_SCORE * (1.0 - dot / 2))
        return score

    def score_one(self, view: PodView, row: int) -> float:
        req = view.req
        node = (int(view.cpu_free[row]) / MAX_SPEC_CPU, int(view.gpu_left[row]) / MAX_SPEC_GPU)
        pod = (req.cpu_milli / MAX_SPEC_CPU, view.gpu_total / MAX_SPEC_GPU)
        dot = node[0] * pod[0] + node[1] * pod[1]
        return float(int(MAX_NODE_SCORE * (1.0 - dot / 2)))
