"""A policy: filters, weighted scorers, tie-breakers and a GPU picker — the scheduling cycle.

One ``place`` call is one kube-scheduler cycle for one pod: Filter (every plugin must pass), Score
(weighted sum), select the best node (exact ties go to the tie-break scorers in order, then to a
uniformly random node drawn from the injected RNG — kube-scheduler's ``selectHost``), Reserve
(pick GPUs / MIG slice). It reads the state and returns data; the caller applies it.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from gpufleet.catalog.gpus import GpuCatalog, default_gpu_catalog
from gpufleet.placement.filters import DEFAULT_FILTERS, Filter
from gpufleet.placement.gpu_select import GpuPicker, best_fit_gpu
from gpufleet.placement.mig import choose_mig
from gpufleet.placement.result import PlacementResult, Status, Unschedulable
from gpufleet.placement.scorers.base import Scorer
from gpufleet.placement.view import PodView, capacity_view, pod_view
from gpufleet.state import GPU_MILLI, FleetState, ResourceRequest


def tie_rank(rows: np.ndarray, seed: int) -> np.ndarray:
    """A seeded random permutation of node rows, stable across calls (splitmix64 of row, seed).

    Breaking ties by a fixed order, rather than a fresh draw per pod, keeps sending equally good
    pods to the same nodes — first-fit among equals — as the packing protocol specifies.
    """
    with np.errstate(over="ignore"):
        z = rows.astype(np.uint64) + np.uint64(seed & 0xFFFFFFFF) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


@dataclass(frozen=True)
class Policy:
    name: str
    scorers: tuple[tuple[Scorer, float], ...]
    picker: GpuPicker = best_fit_gpu
    tiebreak: tuple[Scorer, ...] = ()
    filters: tuple[Filter, ...] = DEFAULT_FILTERS
    description: str = ""
    tie_seed: int | None = None
    catalog: GpuCatalog = field(default_factory=default_gpu_catalog, repr=False)

    def feasible(self, view: PodView) -> tuple[np.ndarray, list[np.ndarray | None]]:
        """The rows every filter passes, and each filter's mask (None: the filter does not
        apply to this request — ``Filter.applies`` — and so passed every row)."""
        mask = view.active.copy()
        masks: list[np.ndarray | None] = []
        for f in self.filters:
            if not f.applies(view.req):
                masks.append(None)
                continue
            m = f(view)
            masks.append(m)
            mask &= m
        return np.flatnonzero(mask), masks

    def scores(self, view: PodView, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        total = np.zeros(len(rows))
        for scorer, weight in self.scorers:
            total += weight * scorer.score(view, rows, rng)
        return total

    def set_typical_tasks(self, typical_tasks: Sequence[tuple[ResourceRequest, float]]) -> None:
        """Hand a new typical-task mix (learned online) to every scorer that measures against
        one (FGD, stranding); the others ignore it."""
        for scorer in (*(s for s, _ in self.scorers), *self.tiebreak):
            update = getattr(scorer, "set_typical_tasks", None)
            if update is not None:
                update(typical_tasks)

    def select(self, view: PodView, rows: np.ndarray, rng: np.random.Generator) -> int:
        total = self.scores(view, rows, rng)
        cand = rows[total == total.max()]
        for scorer in self.tiebreak:
            if len(cand) == 1:
                break
            s = scorer.score(view, cand, rng)
            cand = cand[s == s.max()]
        if len(cand) == 1:
            return int(cand[0])
        if self.tie_seed is not None:
            return int(cand[np.argmin(tie_rank(cand, self.tie_seed))])
        return int(cand[rng.integers(len(cand))])

    def place(
        self, state: FleetState, req: ResourceRequest, rng: np.random.Generator
    ) -> PlacementResult | Unschedulable:
        view = pod_view(state, req, self.catalog)
        rows, masks = self.feasible(view)
        if len(rows) == 0:
            return self._refuse(view, masks)
        row = self.select(view, rows, rng)
        if req.mig_profile is not None:
            slot = choose_mig(view, row)
            if slot is None:  # filters and choose_mig disagree: a bug, not an input
                raise RuntimeError(f"MIG filter passed row {row} but no slot was found")
            return PlacementResult(row=row, gpus=(slot.gpu,), milli_per_gpu=0, mig=(slot,))
        gpus = self.picker(view, row, rng)
        milli = 0 if req.num_gpu == 0 else (req.gpu_milli if req.is_shared else GPU_MILLI)
        return PlacementResult(row=row, gpus=gpus, milli_per_gpu=milli)

    def _refuse(self, view: PodView, masks: Sequence[np.ndarray | None]) -> Unschedulable:
        """Why no node fits, and whether one could even if the fleet were empty (``never``),
        both worked out only when read (``Unschedulable``): the simulator reads neither.
        Both keep the rows as they are now: a caller may read them after it restored another
        mask (``control.cycle`` narrows the active rows to a unit's eligible ones)."""
        active = view.active.copy()
        known: list[bool] = []

        def never() -> bool:
            if not known:
                known.append(self._never(replace(view, active=active)))
            return known[0]

        def status() -> Status:
            return Status.UNSCHEDULABLE_AND_UNRESOLVABLE if never() else Status.UNSCHEDULABLE

        def reason() -> str:
            alive = active.copy()
            parts = []
            for f, m in zip(self.filters, masks, strict=True):
                if m is None:  # did not apply: rejected nothing
                    continue
                k = int((alive & ~m).sum())
                if k:
                    parts.append(f"{k} {f.reason}")
                alive &= m
            text = f"0/{int(active.sum())} nodes are available: " + (
                ", ".join(parts) or "no nodes")
            return text + " (no node fits even when empty)" if never() else text

        return Unschedulable(reason, status)

    def _never(self, view: PodView) -> bool:
        """Whether no node fits the pod even when empty: the filters on ``capacity_view``.

        An empty node is the node's fixed attributes only (totals, GPUs, model, MIG mode,
        driver, taints, zone), which change only when a node joins or leaves, plus ``active``
        (which ``control.placing.only_eligible`` narrows for a while). Within one ``FleetState``
        the pair (rows ever added, rows live) names the join/leave history exactly — adding
        raises the first, and at a fixed first leaving only lowers the second — so the answer
        is kept per (request, that pair, the active mask) and recomputed when any moves."""
        s = view.state
        key = (self.filters, self.catalog, view.req, view.n, len(s.index),
               view.active.tobytes())
        known = _NEVER.get(s)
        if known is None:
            known = _NEVER[s] = {}
        hit = known.get(key)
        if hit is not None:
            return hit
        empty = capacity_view(view)
        ever = empty.active.copy()
        for f in self.filters:
            if not f.applies(view.req):
                continue
            ever &= f(empty)
            if not ever.any():
                break
        never = not ever.any()
        if len(known) >= _NEVER_MAX:
            known.clear()
        known[key] = never
        return never


# ``Policy._never``'s answers per fleet snapshot (weak: a compacted or dropped snapshot takes
# its answers with it)
_NEVER: weakref.WeakKeyDictionary[FleetState, dict[tuple[object, ...], bool]] = (
    weakref.WeakKeyDictionary())
_NEVER_MAX = 4096
