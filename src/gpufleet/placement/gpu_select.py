"""Which GPUs of the chosen node a pod gets (the Reserve step of the framework).

The published baselines differ here as much as in node scoring: FGD's simulator gives a shared pod
the GPU with the least idle milli that fits ("best"), Random a random one, FGD the one whose use
fragments the node least. Whole-GPU pods take the lowest-indexed idle GPUs unless topology matters.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from gpufleet.placement.view import PodView


class GpuPicker(Protocol):
    def __call__(self, view: PodView, row: int, rng: np.random.Generator) -> tuple[int, ...]: ...


def _first_idle(view: PodView, row: int) -> tuple[int, ...]:
    ok = np.flatnonzero(view.gpu_ok[row])
    return tuple(int(g) for g in ok[: view.req.num_gpu])


def best_fit_gpu(view: PodView, row: int, rng: np.random.Generator) -> tuple[int, ...]:
    """Shared pod: the fitting GPU with the least idle milli (lowest index on ties)."""
    if view.req.num_gpu == 0:
        return ()
    if not view.req.is_shared:
        return _first_idle(view, row)
    ok = view.gpu_ok[row]
    free = np.where(ok, view.free_milli[row], np.iinfo(np.int32).max)
    return (int(np.argmin(free)),)


def worst_fit_gpu(view: PodView, row: int, rng: np.random.Generator) -> tuple[int, ...]:
    """Shared pod: the fitting GPU with the most idle milli — spreading, for the spread policy."""
    if view.req.num_gpu == 0:
        return ()
    if not view.req.is_shared:
        return _first_idle(view, row)
    free = np.where(view.gpu_ok[row], view.free_milli[row], -2)
    return (int(np.argmax(free)),)


def random_gpu(view: PodView, row: int, rng: np.random.Generator) -> tuple[int, ...]:
    if view.req.num_gpu == 0:
        return ()
    if not view.req.is_shared:
        return _first_idle(view, row)
    ok = np.flatnonzero(view.gpu_ok[row])
    return (int(ok[rng.integers(len(ok))]),)


def nvlink_gpu(view: PodView, row: int, rng: np.random.Generator) -> tuple[int, ...]:
    """Multi-GPU pod: idle GPUs from the NVLink domain that fits it most tightly.

    Taking the smallest domain that still holds the whole pod keeps larger domains free for
    larger pods; without any domain that fits, it falls back to the lowest-indexed idle GPUs.
    """
    k = view.req.num_gpu
    if k <= 1 or view.req.is_shared:
        return best_fit_gpu(view, row, rng)
    ok = view.gpu_ok[row]
    dom = view.state.nvlink_domain[row, : ok.shape[0]]
    best: tuple[int, int] | None = None
    for d in np.unique(dom[dom >= 0]):
        n_free = int((ok & (dom == d)).sum())
        if n_free >= k and (best is None or n_free < best[0]):
            best = (n_free, int(d))
    if best is None:
        return _first_idle(view, row)
    gpus = np.flatnonzero(ok & (dom == best[1]))[:k]
    return tuple(int(g) for g in gpus)
