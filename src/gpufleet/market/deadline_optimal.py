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
from gpufleet.market.deadline import Choice, DeadlineJob


def lattice_unit(job: DeadlineJob) -> int:
    """u = gcd(gap, d, C) in whole seconds; the DP is exact on multiples of u."""
    vals = []
    for name in ("gap_s", "overhead_s", "task_s"):
        v = getattr(job, name)
        if abs(v - round(v)) > 1e-9:
            raise InputError(f"got {v!r} s; the exact optimum needs whole seconds", field=name)
        vals.append(round(v))
    return math.gcd(*vals)


def optimal_costs(job: DeadlineJob, avail: np.ndarray, dtype: type = np.float64) -> np.ndarray:
    """Minimum cost of each window in ``avail`` (shape (n, L)); inf where none meets the deadline.

    The windows must cover the deadline (L ≥ K ticks); ticks past it are never used.
    """
    n = avail.shape[0]
    k = job.deadline_ticks
    if avail.shape[1] < k:
        raise InputError(f"window of {avail.shape[1]} ticks is shorter than the deadline's {k}")
    u = lattice_unit(job)
    g, dd, cu = round(job.gap_s) // u, round(job.overhead_s) // u, round(job.task_s) // u
    width = g * k - cu + 1
    if width <= 0:
        return np.full(n, np.inf)
    cs = dtype(job.tick_cost(Choice.SPOT))
    co = dtype(job.tick_cost(Choice.ON_DEMAND))
    inf = dtype(np.inf)
    up = avail[:, :k].astype(bool)

    def lo(t: int) -> int:
        return max(0, cu - g * t)

    # Double-buffered rows per type: [g columns r < lo (r <= 0 there: done, 0) | band | inf pad].
    cols = g + width + dd + 1
    band = slice(g, g + width)

    def fresh() -> list[np.ndarray]:
        bufs = [np.full((n, cols), inf, dtype=dtype) for _ in range(3)]
        for b in bufs:
            b[:, :g] = 0.0
        return bufs

    cur, nxt = fresh(), fresh()  # index by Choice: IDLE, SPOT, ON_DEMAND
    for b in nxt:  # V_K: finished (r <= 0) costs nothing, anything else missed the deadline
        b[:, g] = 0.0
    tmp = np.empty((n, width), dtype=dtype)
    best_new = np.empty((n, width), dtype=dtype)
    s_new = np.empty((n, width), dtype=dtype)
    for t in range(k - 1, -1, -1):
        lo_t, lo_next = lo(t), lo(t + 1)
        n_i, n_s, n_o = nxt
        if t + 1 < k:  # spot held during tick t but gone at t+1: the job is idle there
            lost = ~up[:, t + 1]
            n_s[lost] = n_i[lost]
        base = lo_t - lo_next + g  # column of r = lo_t in the t+1 buffers

        def at(buf: np.ndarray, shift: int, base: int = base) -> np.ndarray:
            return buf[:, base + shift : base + shift + width]

        idle = at(n_i, 0)
        np.add(at(n_o, dd - g), co, out=tmp)
        np.minimum(idle, tmp, out=best_new)  # idle, or a fresh on-demand launch
        np.add(at(n_s, dd - g), cs, out=s_new)  # a fresh spot launch...
        s_new[~up[:, t]] = inf  # ...only where spot is up
        c_i, c_s, c_o = cur[0][:, band], cur[1][:, band], cur[2][:, band]
        np.minimum(best_new, s_new, out=c_i)
        np.add(at(n_s, -g), cs, out=tmp)
        np.minimum(best_new, tmp, out=c_s)
        np.add(at(n_o, -g), co, out=tmp)
        np.minimum(idle, s_new, out=c_o)
        np.minimum(c_o, tmp, out=c_o)
        if lo_t == 0:
            c_i[:, 0] = c_s[:, 0] = c_o[:, 0] = 0.0
        cur, nxt = nxt, cur
    return nxt[0][:, g].astype(np.float64)
