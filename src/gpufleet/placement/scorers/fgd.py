"""Fragmentation Gradient Descent (Weng et al., USENIX ATC'23): place where F grows least.

The score of a node is how much its fragmentation F (see :mod:`..fragmentation`) drops when the
pod lands there — usually negative, a rise. For a shared pod every fitting GPU is a candidate and
the best one also decides which GPU the pod gets.

``quantize=True`` reproduces the paper's simulator, which scores ``int(100·sigmoid(ΔF/1000))``:
the truncation turns ΔF within ~40 milli into ties broken at random. ``quantize=False`` keeps ΔF
itself (measured worse on openb: the bands' ties are what consolidates, see docs/placement.md).

Speed: a node's F and its per-threshold GPU terms depend only on that node, so they are memoised
per row and recomputed only for rows whose free milli, CPU or model changed since the last call
(one or two per placement; ``FleetState.row_version`` says which rows to look at). The node scores
are memoised too, per request shape, and rescored only for rows that changed since that shape was
last scored. Shared-pod candidates are deduplicated per node by free value, since
GPUs with equal idle milli are interchangeable for F.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gpufleet.catalog.gpus import GpuCatalog
from gpufleet.placement.fragmentation import CpuTasks, TaskTable
from gpufleet.placement.scorers.base import MAX_NODE_SCORE
from gpufleet.placement.view import PodView
from gpufleet.state import GPU_MILLI, FleetState, ResourceRequest


@dataclass
class _RowCache:
    free: np.ndarray
    cpu: np.ndarray
    model: np.ndarray
    cnt: np.ndarray
    above: np.ndarray
    idle: np.ndarray
    frag: np.ndarray
    n_models: int
    # FleetState.row_version seen per row: only rows whose version moved are compared in full.
    version: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    # ``stamp[row]`` changes whenever the row's F inputs change; ``memo`` holds, per request
    # shape, (stamp each row was scored at, node score, GPU) so a pod of a shape seen before
    # rescores only the rows that changed since (one or two per placement).
    stamp: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    clock: int = 0
    memo: dict[tuple[object, ...], tuple[np.ndarray, np.ndarray, np.ndarray]] = field(
        default_factory=dict
    )


def _sigmoid_score(delta: np.ndarray, levels: int = MAX_NODE_SCORE) -> np.ndarray:
    return np.trunc(levels / (1.0 + np.exp(-delta / 1000.0)))


class FgdScore:
    name = "fgd"

    def __init__(
        self,
        typical_tasks: Sequence[tuple[ResourceRequest, float]],
        *,
        quantize: bool = True,
        levels: int = MAX_NODE_SCORE,
        cpu_tasks: CpuTasks = "fragment",
    ) -> None:
        self.table = TaskTable.build(typical_tasks, cpu_tasks)
        self.cpu_tasks: CpuTasks = cpu_tasks
        self.quantize = quantize
        self.levels = levels
        # The node scores of the last call, so the GPU pick for the chosen node (same view, same
        # placement cycle) is a lookup, not a second pass. Keyed by the view object itself.
        self._last: tuple[PodView, np.ndarray, np.ndarray] | None = None
        self._caches: weakref.WeakKeyDictionary[FleetState, _RowCache] = weakref.WeakKeyDictionary()
        self._access: weakref.WeakKeyDictionary[FleetState, np.ndarray] = (
            weakref.WeakKeyDictionary()
        )

    def set_typical_tasks(self, typical_tasks: Sequence[tuple[ResourceRequest, float]]) -> None:
        """Measure fragmentation against a new task mix (learned online). Every memo depends on
        the mix — per-row F and threshold terms, per-shape node scores, the access table — so
        all are dropped and rebuilt on the next call."""
        self.table = TaskTable.build(typical_tasks, self.cpu_tasks)
        self._last = None
        self._caches = weakref.WeakKeyDictionary()
        self._access = weakref.WeakKeyDictionary()

    # -- per-node memo -----------------------------------------------------------------------
    def _acc(self, state: FleetState, catalog: GpuCatalog) -> np.ndarray:
        # Model names are only ever appended, so the table is stale exactly when it is short.
        acc = self._access.get(state)
        if acc is None or len(acc) != len(state.model_names) + 1:
            acc = self.table.access(state, catalog)
            self._access[state] = acc
        return acc

    def _rows(self, view: PodView) -> _RowCache:
        s, n = view.state, view.n
        free, cpu, model = view.free_milli, view.cpu_free, s.model_id[:n]
        cache = self._caches.get(s)
        if (
            cache is None
            or cache.free.shape[1] != free.shape[1]
            or cache.n_models != len(s.model_names)
        ):
            dirty = np.arange(n)
            u = len(self.table.q)
            cache = _RowCache(
                free=free.copy(),
                cpu=cpu.copy(),
                model=model.copy(),
                cnt=np.zeros((n, u), np.int64),
                above=np.zeros((n, u), np.int64),
                idle=np.zeros(n, np.int64),
                frag=np.zeros(n),
                n_models=len(s.model_names),
                version=s.row_version[:n].copy(),
                stamp=np.zeros(n, np.int64),
            )
            self._caches[s] = cache
        else:
            if len(cache.cpu) < n:
                cache = self._grow(s, cache, n)
            # FleetState bumps row_version on every change to a row; of the rows it flags, only
            # those whose F inputs really moved are recomputed (a memory-only change is not).
            moved = np.flatnonzero(cache.version[:n] != s.row_version[:n])
            cache.version[moved] = s.row_version[moved]
            dirty = moved[
                (cache.free[moved] != free[moved]).any(axis=1)
                | (cache.cpu[moved] != cpu[moved])
                | (cache.model[moved] != model[moved])
            ]
        if len(dirty):
            cnt, above, idle = self.table.gpu_terms(free[dirty])
            acc = self._acc(s, view.catalog)[model[dirty]]
            cache.frag[dirty] = self.table.frag(
                cnt, above, idle, self.table.cpu_weight(cpu[dirty]), acc
            )
            cache.cnt[dirty], cache.above[dirty], cache.idle[dirty] = cnt, above, idle
            cache.free[dirty], cache.cpu[dirty], cache.model[dirty] = (
                free[dirty],
                cpu[dirty],
                model[dirty],
            )
            cache.clock += 1
            cache.stamp[dirty] = cache.clock
        return cache

    def _grow(self, state: FleetState, cache: _RowCache, n: int) -> _RowCache:
        """Room for at least ``n`` rows, doubling: a growing fleet adds nodes one at a time,
        and growing by one row each time re-copied every array and dropped every shape's
        memo (so the next pod of each shape rescored every node) once per node added. Rows
        past ``n`` hold the sentinels until they are used."""
        extra = max(n, 2 * len(cache.cpu)) - len(cache.cpu)

        def pad(a: np.ndarray, fill: int | float) -> np.ndarray:
            return np.concatenate([a, np.full((extra, *a.shape[1:]), fill, dtype=a.dtype)])

        # Sentinels that never equal a real row, so the new rows come back dirty.
        grown = _RowCache(
            free=pad(cache.free, -7),
            cpu=pad(cache.cpu, -7),
            model=pad(cache.model, -7),
            cnt=pad(cache.cnt, 0),
            above=pad(cache.above, 0),
            idle=pad(cache.idle, 0),
            frag=pad(cache.frag, 0.0),
            n_models=cache.n_models,
            version=pad(cache.version, -7),
            stamp=pad(cache.stamp, 0),
            clock=cache.clock,
        )  # the memo is dropped: its arrays are sized for the old row count
        self._caches[state] = grown
        return grown

    # -- scoring -----------------------------------------------------------------------------
    def deltas(
        self, view: PodView, rows: np.ndarray, cache: _RowCache | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """ΔF = F_before − F_after per candidate: (candidate row index into ``rows``, GPU, ΔF).

        Whole-GPU, CPU-only and MIG pods have one candidate per node (GPU -1 = "the lowest
        idle ones"); a shared pod has one per distinct free value among its fitting GPUs.
        """
        t, req = self.table, view.req
        cache = cache if cache is not None else self._rows(view)
        acc = self._acc(view.state, view.catalog)[view.state.model_id[rows]]
        cpu_w = t.cpu_weight(view.cpu_free[rows] - req.cpu_milli)
        before = cache.frag[rows]
        cnt, above, idle = cache.cnt[rows], cache.above[rows], cache.idle[rows]
        if not req.is_shared:
            k = req.num_gpu if req.mig_profile is None else 0
            if k:
                cnt = cnt - k * (t.q > 0)[None, :]
                above = above - GPU_MILLI * k
                idle = idle - GPU_MILLI * k
            after = t.frag(cnt, above, idle, cpu_w, acc)
            return np.arange(len(rows)), np.full(len(rows), -1), before - after
        r = req.gpu_milli
        free = view.free_milli[rows]
        cand = view.gpu_ok[rows].copy()
        for g in range(1, free.shape[1]):
            cand[:, g] &= ~(free[:, :g] == free[:, g : g + 1]).any(axis=1)
        ci, cg = np.nonzero(cand)
        f = free[ci, cg].astype(np.int64)[:, None]
        q = t.q[None, :]
        was, now = f >= q, (f - r) >= q
        cnt_c = cnt[ci] - was + now
        above_c = above[ci] - f * was + (f - r) * now
        after = t.frag(cnt_c, above_c, idle[ci] - r, cpu_w[ci], acc[ci])
        return ci, cg, before[ci] - after

    def _node_scores(self, view: PodView, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        req = view.req
        if req.gpu_memory_mib:  # GPU memory decides which GPUs fit; the memo does not track it
            return self._fresh_scores(view, rows, self._rows(view))
        cache = self._rows(view)
        key = (
            req.cpu_milli,
            req.num_gpu,
            req.gpu_milli,
            req.gpu_models,
            req.mig_profile,
        )
        entry = cache.memo.get(key)
        if entry is None:
            n = len(cache.stamp)
            entry = (np.full(n, -1, np.int64), np.zeros(n), np.full(n, -1, np.int64))
            cache.memo[key] = entry
        seen, score, gpu = entry
        stale = rows[seen[rows] != cache.stamp[rows]]
        if len(stale):
            score[stale], gpu[stale] = self._fresh_scores(view, stale, cache)
            seen[stale] = cache.stamp[stale]
        return score[rows], gpu[rows]

    def _fresh_scores(
        self, view: PodView, rows: np.ndarray, cache: _RowCache
    ) -> tuple[np.ndarray, np.ndarray]:
        ci, cg, delta = self.deltas(view, rows, cache)
        s = _sigmoid_score(delta, self.levels) if self.quantize else delta
        if not view.req.is_shared:
            return s, cg
        best = np.full(len(rows), -np.inf)
        np.maximum.at(best, ci, s)
        # First candidate (lowest GPU index) reaching the node's best score.
        hit = s == best[ci]
        first = np.full(len(rows), -1)
        idx = np.flatnonzero(hit)[::-1]
        first[ci[idx]] = cg[idx]
        return best, first

    def score(self, view: PodView, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        best, first = self._node_scores(view, rows)
        self._last = (view, rows, first)
        return best

    def pick(self, view: PodView, row: int, rng: np.random.Generator) -> tuple[int, ...]:
        """GPU choice: the candidate with the best score (lowest index among equals)."""
        req = view.req
        if req.num_gpu == 0 or req.mig_profile is not None:
            return ()
        if not req.is_shared:
            ok = np.flatnonzero(view.gpu_ok[row])
            return tuple(int(g) for g in ok[: req.num_gpu])
        if self._last is not None and self._last[0] is view:
            _, rows, first = self._last
            hit = np.flatnonzero(rows == row)
            if len(hit):
                return (int(first[hit[0]]),)
        _, first = self._node_scores(view, np.array([row]))
        return (int(first[0]),)

    # -- scalar reference ----------------------------------------------------------------------
    def score_one(self, view: PodView, row: int) -> float:
        s, req, t = view.state, view.req, self.table
        n = int(s.num_gpus[row])
        frees = [int(f) for f in view.free_milli[row][:n]]
        cpu = int(view.cpu_free[row])
        model = s.model_names[s.model_id[row]] if s.model_id[row] >= 0 else None
        before = t.frag_one(frees, cpu, model, view.catalog)
        cpu_after = cpu - req.cpu_milli

        def value(after: float) -> float:
            delta = before - after
            if not self.quantize:
                return delta
            return float(int(self.levels / (1.0 + np.exp(-delta / 1000.0))))

        if req.is_shared:
            best = -np.inf
            for g in range(n):
                if view.gpu_ok[row, g]:
                    new = list(frees)
                    new[g] -= req.gpu_milli
                    best = max(best, value(t.frag_one(new, cpu_after, model, view.catalog)))
            return best
        new = list(frees)
        if req.num_gpu and req.mig_profile is None:
            for g in [g for g in range(n) if view.gpu_ok[row, g]][: req.num_gpu]:
                new[g] = 0
        return value(t.frag_one(new, cpu_after, model, view.catalog))
