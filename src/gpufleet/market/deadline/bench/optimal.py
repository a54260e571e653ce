"""The omniscient optimum: the cheapest schedule that knows the whole availability window.

A backward dynamic programme over (tick, type held, work left), exact in the protocol's tick
model and vectorised over all starts of a trace at once.

Why work left needs no overhead-phase dimension: a segment of n held ticks of one type makes
max(n·gap − d, 0) progress, so "every held tick adds gap, every launch or switch subtracts d" is
exact for segments longer than the overhead and only pessimistic for shorter ones — which an
optimal schedule never holds (dropping one saves money and loses no progress). Work left
therefore moves on the lattice r = C − gap·H + d·m, which in units of u = gcd(gap, d, C) seconds
is a plain integer, and the DP over (tick, type, r) is exact.

Size: at tick t only r ∈ [C − gap·t, gap·(K − t)] matters (less is unreachable, more cannot
finish by the deadline), a band of (gap·K − C)/u + 1 values — 2 872 in the main setting.
"""

from __future__ import annotations

import math

import numpy as np

from gpufleet.errors import InputError
from gpufleet.market.deadline.controller import Choice, DeadlineJob


def lattice_unit(job: DeadlineJob) -> int:
    """u = gcd(gap, d, C) in whole seconds; the DP is exact on multiples of u."""
    vals = []
    for name in ("gap_s", "overhead_s", "task_s"):
        v = getattr(job, name)
        if abs(v - round(v)) > 1e-9:
            raise InputError(f"got {v!r} s; the exact optimum needs whole seconds", field=name)
        vals.append(round(v))
    return math.gcd(*vals)


def optimal_costs(job: DeadlineJob, avail: np.ndarray, dtype: type = np.float64,
                  block: int = 16) -> np.ndarray:
    """Minimum cost of each window in ``avail`` (shape (n, L)); inf where none meets the deadline.

    The windows must cover the deadline (L ≥ K ticks); ticks past it are never used. Starts are
    solved ``block`` rows at a time so a block's buffers stay in the L2 cache (the DP is memory
    bound: this, the per-tick band and the fused spot masks make it ~3× faster than one pass
    over all rows).
    """
    n = avail.shape[0]
    k = job.deadline_ticks
    if avail.shape[1] < k:
        raise InputError(f"window of {avail.shape[1]} ticks is shorter than the deadline's {k}")
    u = lattice_unit(job)
    g, dd, cu = round(job.gap_s) // u, round(job.overhead_s) // u, round(job.task_s) // u
    if g * k < cu:
        return np.full(n, np.inf)
    out = np.empty(n)
    for b0 in range(0, n, block):
        out[b0 : b0 + block] = _solve_block(job, avail[b0 : b0 + block, :k], g, dd, cu, dtype)
    return out


def _solve_block(job: DeadlineJob, avail: np.ndarray, g: int, dd: int, cu: int,
                 dtype: type) -> np.ndarray:
    """The DP for a few starts; column j of a buffer holds work left r = j − g (r < 0: done).

    At tick t only r ∈ [lo_t, hi_t] matters: lo_t = C − gap·t (less is unreachable), hi_t =
    min(C + d, gap·(K − t)) (more is unreachable — a launch adds at most d above C before the
    first held tick — or cannot finish). Columns above the band stay inf, columns r < 0 stay 0.
    Spot held during tick t but gone at t + 1 leaves the job idle there, so the buffer for
    "holding spot at t" stores the idle value on rows where spot is down at t; with the inf
    mask of the launch this folds into one per-row addend.
    """
    n, k = avail.shape
    cs = dtype(job.tick_cost(Choice.SPOT))
    co = dtype(job.tick_cost(Choice.ON_DEMAND))
    inf = dtype(np.inf)
    up = avail.astype(bool)
    # per-row addend for a spot tick at t: its price where spot is up, inf where it is down
    spot_add = np.where(up, cs, inf).astype(dtype)
    cols = g + cu + 2 * dd + 1  # reads reach d above the band

    def fresh() -> list[np.ndarray]:
        bufs: list[np.ndarray] = [np.full((n, cols), inf, dtype=dtype) for _ in range(3)]
        for buf in bufs:
            buf[:, : g + 1] = 0.0  # r <= 0: done
        return bufs

    cur, nxt = fresh(), fresh()  # index by Choice: IDLE, SPOT, ON_DEMAND; nxt is V_K
    width_max = cu + dd + 1
    tmp: np.ndarray = np.empty((n, width_max), dtype=dtype)
    best_new: np.ndarray = np.empty((n, width_max), dtype=dtype)
    s_new: np.ndarray = np.empty((n, width_max), dtype=dtype)
    for t in range(k - 1, -1, -1):
        lo_t = max(0, cu - g * t)
        hi_t = min(cu + dd, g * (k - t))
        w = hi_t - lo_t + 1
        a = g + lo_t  # column of r = lo_t
        n_i, n_s, n_o = nxt
        sa = spot_add[:, t : t + 1]
        tm, bn, sn = tmp[:, :w], best_new[:, :w], s_new[:, :w]
        idle = n_i[:, a : a + w]
        np.add(n_o[:, a + dd - g : a + dd - g + w], co, out=tm)
        np.minimum(idle, tm, out=bn)  # idle, or a fresh on-demand launch
        np.add(n_s[:, a + dd - g : a + dd - g + w], sa, out=sn)  # a fresh spot launch (if up)
        c_i, c_s, c_o = cur[0][:, a : a + w], cur[1][:, a : a + w], cur[2][:, a : a + w]
        np.minimum(bn, sn, out=c_i)
        np.add(n_s[:, a - g : a - g + w], sa, out=tm)  # keep spot (down: preempted → idle)
        np.minimum(bn, tm, out=c_s)
        np.add(n_o[:, a - g : a - g + w], co, out=tm)
        np.minimum(idle, sn, out=c_o)
        np.minimum(c_o, tm, out=c_o)
        cur, nxt = nxt, cur
    return nxt[0][:, g + cu].astype(np.float64)
