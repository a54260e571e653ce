"""Node fragmentation F against a typical-task mix, vectorised and as a scalar reference.

For typical task m with probability p_m, a node's fragment f_m is the idle GPU milli that m could
not use: if m fits the node (CPU, enough GPUs with ≥ m's milli, model), the idle milli of the GPUs
with less than m's milli; otherwise all idle milli. F = Σ p_m f_m.

Rewritten as F = idle·P − Σ_m p_m·fits_m·above_m (above = idle milli on GPUs with ≥ m's milli),
the sum depends on m only through its milli threshold q, its GPU count k, its model set and its CPU
threshold. Tasks sharing (q, k, models) form a group whose CPU dependence is a step function, so a
whole fleet's F is a handful of (nodes × groups) array operations.

CPU-only tasks: the FGD simulator counts all idle GPU milli of a node as fragment for them
(``cpu_tasks="fragment"``, used by the FGD scorer so the baseline matches its paper); the packing
protocol's metric counts them as fitting when the CPU does (``cpu_tasks="fit"``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from gpufleet.catalog.gpus import GpuCatalog
from gpufleet.state import GPU_MILLI, FleetState, ResourceRequest

CpuTasks = Literal["fragment", "fit"]

# Task probabilities are held as integer multiples of 2**-20. Every product and sum in F is then
# an integer below 2**53 and the final scaling is a power of two, so float64 arithmetic is exact:
# two nodes in the same state get bit-identical F whatever the batch or summation order, and an
# unchanged node has ΔF exactly 0 (a noisy -1e-13 would truncate FGD's score from 50 to 49).
WEIGHT_SCALE = 2**20


@dataclass(frozen=True)
class TaskTable:
    """Typical tasks compiled into arrays (see module docstring for the algebra)."""

    total_p: float
    q: np.ndarray  # (U,) distinct milli thresholds
    group_u: np.ndarray  # (H,) index into q
    group_k: np.ndarray  # (H,) GPUs needed
    group_models: tuple[frozenset[str] | None, ...]
    task_cpu: np.ndarray  # (M,) CPU thresholds of the tasks that enter the sum
    task_weight: np.ndarray  # (M, H) p_m·2**20 (integral) in the column of m's group
    tasks: tuple[tuple[ResourceRequest, float], ...]
    task_p: tuple[int, ...]  # p·2**20 per entry of ``tasks``
    cpu_tasks: CpuTasks

    @classmethod
    def build(
        cls, tasks: Sequence[tuple[ResourceRequest, float]], cpu_tasks: CpuTasks = "fragment"
    ) -> TaskTable:
        groups: dict[tuple[int, int, frozenset[str] | None], int] = {}
        members: list[tuple[int, int, int]] = []  # (cpu, group, p·2**20)
        total = 0
        task_p = tuple(round(p * WEIGHT_SCALE) for _, p in tasks)
        for (req, _), p in zip(tasks, task_p, strict=True):
            total += p
            if req.num_gpu == 0 or req.mig_profile is not None:
                if cpu_tasks == "fragment":
                    continue
                key: tuple[int, int, frozenset[str] | None] = (0, 0, None)
            else:
                milli = req.gpu_milli if req.is_shared else GPU_MILLI
                key = (milli, req.num_gpu, req.gpu_models or None)
            h = groups.setdefault(key, len(groups))
            members.append((req.cpu_milli, h, p))
        qs = sorted({k[0] for k in groups})
        weight = np.zeros((len(members), len(groups)))
        for i, (_, h, p) in enumerate(members):
            weight[i, h] = p
        ordered = sorted(groups.items(), key=lambda kv: kv[1])
        return cls(
            total_p=float(total),
            q=np.array(qs, dtype=np.int64),
            group_u=np.array([qs.index(k[0]) for k, _ in ordered], dtype=np.int64),
            group_k=np.array([k[1] for k, _ in ordered], dtype=np.int64),
            group_models=tuple(k[2] for k, _ in ordered),
            task_cpu=np.array([m[0] for m in members], dtype=np.int64),
            task_weight=weight,
            tasks=tuple(tasks),
            task_p=task_p,
            cpu_tasks=cpu_tasks,
        )

    # -- vectorised pieces -------------------------------------------------------------------
    def gpu_terms(self, free: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per node: (count of GPUs with ≥ q, idle milli on them) per threshold, and idle milli."""
        f = np.where(free > 0, free, 0).astype(np.int64)
        ge = f[:, :, None] >= self.q[None, None, :]
        ge &= (free >= 0)[:, :, None]
        cnt = ge.sum(axis=1)
        above = (f[:, :, None] * ge).sum(axis=1)
        return cnt, above, f.sum(axis=1)

    def cpu_weight(self, cpu: np.ndarray) -> np.ndarray:
        """(len(cpu), H): probability mass of each group's tasks whose CPU fits in ``cpu``."""
        fits = (cpu[:, None] >= self.task_cpu[None, :]).astype(np.float64)
        weight: np.ndarray = fits @ self.task_weight
        return weight

    def access(self, state: FleetState, catalog: GpuCatalog) -> np.ndarray:
        """(models + 1, H): may a group's tasks use a node of model id i (last row: no GPU)."""
        out = np.ones((len(state.model_names) + 1, len(self.group_models)), dtype=bool)
        for h, models in enumerate(self.group_models):
            if models is None:
                continue
            wanted = {catalog.resolve(m) or m for m in models}
            for i, name in enumerate(state.model_names):
                out[i, h] = (catalog.resolve(name) or name) in wanted
        return out

    def frag(
        self,
        cnt: np.ndarray,
        above: np.ndarray,
        idle: np.ndarray,
        cpu_w: np.ndarray,
        acc: np.ndarray,
    ) -> np.ndarray:
        """F per node (or candidate) from its terms; arrays share the leading axis."""
        fits = acc & (cnt[:, self.group_u] >= self.group_k[None, :])
        useful = (fits * above[:, self.group_u] * cpu_w).sum(axis=1)
        f: np.ndarray = (idle * self.total_p - useful) / WEIGHT_SCALE
        return f

    def fleet_frag(
        self, state: FleetState, catalog: GpuCatalog, rows: np.ndarray | None = None
    ) -> np.ndarray:
        """F of every live node (or of ``rows``), from scratch."""
        if rows is None:
            rows = state.rows()
        cnt, above, idle = self.gpu_terms(state.free_milli[rows])
        acc = self.access(state, catalog)[state.model_id[rows]]
        return self.frag(cnt, above, idle, self.cpu_weight(state.cpu_free[rows]), acc)

    # -- scalar reference ---------------------------------------------------------------------
    def frag_one(
        self, frees: Sequence[int], cpu: int, model: str | None, catalog: GpuCatalog
    ) -> float:
        """F of one node written straight from the definition."""
        idle = sum(f for f in frees if f > 0)
        total = 0
        for (req, _), p in zip(self.tasks, self.task_p, strict=True):
            if req.num_gpu == 0 or req.mig_profile is not None:
                fits = self.cpu_tasks == "fit" and cpu >= req.cpu_milli
                total += p * (0 if fits else idle)
                continue
            milli = req.gpu_milli if req.is_shared else GPU_MILLI
            access = not req.gpu_models or (
                model is not None
                and (catalog.resolve(model) or model)
                in {catalog.resolve(m) or m for m in req.gpu_models}
            )
            enough = sum(1 for f in frees if f >= milli) >= req.num_gpu
            if access and enough and cpu >= req.cpu_milli:
                total += p * sum(f for f in frees if 0 <= f < milli)
            else:
                total += p * idle
        return total / WEIGHT_SCALE
