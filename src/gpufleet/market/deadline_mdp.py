"""Our deadline policy ``smdp``: least expected cost-to-go under availability learned online.

Each job counts the spot up- and down-periods it has seen (prior: one period of
``PRIOR_TICKS`` each) and models availability as an alternating renewal process: up- and
down-periods with those means and a heavy-tailed (Lomax, shape α) duration law, so the chance
that a period ends falls with its age — on the six AWS zones the median period is ~0.3 of the
mean, which is what α = 1.5 gives (a geometric law, α = ∞, gives 0.7). Under that model a
backward DP over (ticks left τ, slack σ, type held, spot up now, age of the current period)
gives the action of least expected cost; the job reads its action from the table each tick,
then the shared safety net, which alone guarantees the deadline, has the last word.

Slack σ = τ·gap − work left − overhead still to pay: an idle tick costs gap of it, a launch or
switch costs d (the overhead is priced explicitly), a held tick costs nothing; the job is done
once σ ≥ τ·gap. σ lives on a grid of gap/``SLACK_STEPS_PER_TICK``, d rounded to it. States
from which on-demand could no longer finish (σ < d when not on on-demand) are infeasible.
Ages live in doubling buckets (0, 1, 2–3, 4–7, …, 256+), moved on with probability 1/width.

Tables are cached per (job shape, model): mean durations snap to a doubling grid, so a few
dozen solves (~0.3 s each) serve every job of a benchmark setting; a job "refits" simply by
moving to another grid cell as its counts change.
"""

from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np

from gpufleet.market.deadline import BatchRule, Choice, DeadlineJob, register, safety_net

SLACK_STEPS_PER_TICK = 2  # σ grid: gap / 2
TAU_STRIDE = 2  # tables kept for every 2nd τ (the policy moves slowly in τ)
PRIOR_TICKS = 20.0  # prior: one up-period and one down-period of this many ticks
SHAPE = 1.5  # Lomax shape α of period durations; math.inf: geometric (a Markov chain)
AGE_BUCKETS = 10  # doubling buckets: 0, 1, 2-3, ..., 256+
RESERVE_BETA: float | None = None
RESERVE_MODE = (1.0, True)
COMBINE = ""
BIG = 1e9  # cost of an infeasible state (finite so expectations stay defined)
CACHE_SIZE = 96

_CACHE: OrderedDict[tuple[float, ...], np.ndarray] = OrderedDict()


def _buckets(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(first age, width) of each doubling bucket; the last one is open."""
    lo = np.array([0] + [2**i for i in range(n - 1)], dtype=np.float64)
    width = np.diff(np.append(lo, np.inf))
    return lo, width


def hazard(mean: float, shape: float, ages: np.ndarray) -> np.ndarray:
    """P(a period of age x ends before the next tick) for the duration law with that mean."""
    if math.isinf(shape):
        return np.full(ages.shape, min(1.0 / mean, 1.0))
    beta = mean * (shape - 1.0)
    return 1.0 - ((beta + ages) / (beta + ages + 1.0)) ** shape


def bucket_of(age: np.ndarray, n: int = AGE_BUCKETS) -> np.ndarray:
    b = np.floor(np.log2(np.maximum(age, 1))) + (age >= 1)
    return np.minimum(b, n - 1).astype(np.int64)


def action_table(job: DeadlineJob, up_level: int, down_level: int,
                 shape: float = SHAPE) -> np.ndarray:
    """int8 actions [τ // stride, held, spot up, age bucket, σ step] (cached, LRU)."""
    key = (job.gap_s, job.overhead_s, job.task_s, job.deadline_s, up_level, down_level, shape)
    table = _CACHE.get(key)
    if table is None:
        table = _solve(job, 2.0**up_level, 2.0**down_level, shape)
        _CACHE[key] = table
        if len(_CACHE) > CACHE_SIZE:
            _CACHE.popitem(last=False)
    else:
        _CACHE.move_to_end(key)
    return table


def _solve(job: DeadlineJob, mean_up: float, mean_down: float, shape: float) -> np.ndarray:
    q = SLACK_STEPS_PER_TICK
    v = job.gap_s / q
    ds = round(job.overhead_s / v)
    k = job.deadline_ticks
    s = max(math.floor((k * job.gap_s - job.task_s) / v) + 1, 1)
    pad = q + ds + 1
    cs, co = job.tick_cost(Choice.SPOT), job.tick_cost(Choice.ON_DEMAND)
    nb = AGE_BUCKETS if not math.isinf(shape) else 1
    lo, width = _buckets(nb)
    mid = lo + np.where(np.isinf(width), 0.0, (width - 1) / 2)
    hz = np.stack([hazard(mean_down, shape, mid), hazard(mean_up, shape, mid)])[:, :, None]
    adv = np.where(np.isinf(width), 0.0, 1.0 / width)[None, :, None]  # (1, nb, 1)
    nxt_b = np.minimum(np.arange(nb) + 1, nb - 1)
    val = np.full((3, 2, nb, pad + s), BIG)  # [held, a (0 down, 1 up), bucket, pad + σ]
    val[..., pad:] = 0.0  # τ = 0: done wherever σ ≥ 0
    act = np.zeros(((k + TAU_STRIDE) // TAU_STRIDE + 1, 3, 2, nb, s), dtype=np.int8)
    new = np.empty_like(val)
    ih, sh, oh = int(Choice.IDLE), int(Choice.SPOT), int(Choice.ON_DEMAND)

    def expect(cont: np.ndarray, flip: np.ndarray) -> np.ndarray:
        """E[V next | a, bucket]: cont[a, b] if the period goes on, flip[a] if it ends."""
        stay = cont + adv * (cont[:, nxt_b] - cont)
        return stay + hz * (flip[:, None, :] - stay)

    for tau in range(1, k + 1):
        e_i = expect(val[ih], val[ih, ::-1, 0])
        e_o = expect(val[oh], val[oh, ::-1, 0])
        # held spot, up now: it goes on (spot, up) or is preempted (idle, down)
        e_s = expect(val[sh, 1:], val[ih, 0:1, 0])[0]  # (nb, N)
        idle = e_i[..., pad - q : pad - q + s]
        od_keep = co + e_o[..., pad : pad + s]
        od_new = co + e_o[..., pad - ds : pad - ds + s]
        sp_keep = cs + e_s[:, pad : pad + s]
        sp_new = cs + e_s[:, pad - ds : pad - ds + s]
        new[..., :pad] = BIG
        rec = tau % TAU_STRIDE == 0 or tau == k
        row = (tau + TAU_STRIDE - 1) // TAU_STRIDE
        for h, od, sp in ((ih, od_new, sp_new), (sh, od_new, sp_keep), (oh, od_keep, sp_new)):
            out = new[h, ..., pad:]
            np.minimum(idle, od, out=out)
            if rec:
                a = act[row, h]
                a[...] = np.where(od < idle, np.int8(oh), np.int8(ih))
                a[1][sp < out[1]] = sh
            np.minimum(out[1], sp, out=out[1])
        new[sh, 0] = new[ih, 0]  # holding spot while it is down means idle
        new[:2, ..., pad : pad + ds] = BIG  # not on on-demand: must keep d to launch it
        first_done = min(tau * q, s)
        new[..., pad + first_done :] = 0.0
        val, new = new, val
    return act


class SmdpRule:
    """The batch form: n jobs, each with its own period counts and current period age."""

    def __init__(self, job: DeadlineJob, n: int, shape: float = SHAPE,
                 prior_ticks: float = PRIOR_TICKS) -> None:
        self.job = job
        self.shape = shape
        self.reserve_beta = RESERVE_BETA
        from gpufleet.market.deadline_ours import ReserveRule
        self._markov = ReserveRule(job, n)
        self._prev = np.full(n, -1, dtype=np.int8)
        self._age = np.zeros(n)
        self._ticks = np.full((2, n), prior_ticks)  # [down, up]
        self._periods = np.ones((2, n))

    def decide(self, t_s: float, done_s: np.ndarray, holding: np.ndarray,
               overhead_left_s: np.ndarray, avail: np.ndarray) -> np.ndarray:
        job = self.job
        cur = avail.astype(np.int8)
        rows = np.arange(len(cur))
        new_period = cur != self._prev
        self._periods[cur, rows] += new_period
        self._ticks[cur, rows] += 1
        self._age = np.where(new_period, 0.0, self._age + 1)
        self._prev = cur
        mean = self._ticks / self._periods  # the period in progress counts as one
        lv = np.round(np.log2(np.maximum(mean, 1.0))).astype(np.int64)
        k = job.deadline_ticks
        tau = max(k - round(t_s / job.gap_s), 0)
        row = (tau + TAU_STRIDE - 1) // TAU_STRIDE
        v = job.gap_s / SLACK_STEPS_PER_TICK
        sigma = tau * job.gap_s - (job.task_s - done_s) - overhead_left_s
        bucket = bucket_of(self._age) if not math.isinf(self.shape) else np.zeros_like(rows)
        hold = holding.astype(np.int64)
        keys = lv[1] * 1000 + lv[0]
        proposal = np.empty(len(cur), dtype=np.int8)
        for key in np.unique(keys):
            sel = keys == key
            table = action_table(job, int(key // 1000), int(key % 1000), self.shape)
            idx = np.clip(np.floor(sigma[sel] / v), 0, table.shape[-1] - 1).astype(np.int64)
            proposal[sel] = table[row, hold[sel], cur[sel], bucket[sel], idx]
        proposal = np.where((proposal == Choice.SPOT) & ~avail, np.int8(Choice.IDLE), proposal)
        if COMBINE:
            mk = self._markov.decide(t_s, done_s, holding, overhead_left_s, avail)
            idle_down = (holding != Choice.ON_DEMAND) & ~avail
            od_up = (holding == Choice.ON_DEMAND) & avail
            use_dp = (idle_down if "wait" in COMBINE else False) | (od_up if "return" in COMBINE
                                                                    else False)
            proposal = np.where(use_dp, proposal, mk)
        if self.reserve_beta is not None:
            r_left = np.floor((job.deadline_s - t_s) / job.gap_s) * job.gap_s
            t1 = np.ceil((job.task_s - done_s + job.overhead_s) / job.gap_s) * job.gap_s
            slack = r_left - t1
            theta = (job.deadline_s - job.task_s - job.overhead_s) * (
                max(job.deadline_s - t_s, 0.0) / job.deadline_s) ** self.reserve_beta
            low = slack <= theta * RESERVE_MODE[0]
            proposal = np.where((proposal == Choice.IDLE) & low & (holding != Choice.SPOT) & ~avail,
                                np.int8(Choice.ON_DEMAND), proposal)
            if RESERVE_MODE[1]:
                proposal = np.where((proposal == Choice.SPOT) & (holding == Choice.ON_DEMAND)
                                    & (slack < theta), np.int8(Choice.ON_DEMAND), proposal)
        return safety_net(proposal.astype(np.int8), job=job, t_s=t_s, done_s=done_s,
                          holding=holding, overhead_left_s=overhead_left_s)


def _smdp(job: DeadlineJob, n: int) -> BatchRule:
    return SmdpRule(job, n)


def _mdp_geometric(job: DeadlineJob, n: int) -> BatchRule:
    return SmdpRule(job, n, shape=math.inf)


register("smdp", "expected cost-to-go DP, heavy-tailed availability periods learned online")(
    _smdp
)
register("mdp", "expected cost-to-go DP, Markov (geometric) availability learned online")(
    _mdp_geometric
)
