"""Our deadline policy ``smdp`` (the default): least expected cost-to-go, availability learned.

Each job counts the spot up- and down-periods it has seen so far (prior: one period of
``PRIOR_TICKS`` each; never the future) and treats availability as an alternating renewal
process with those mean durations and a heavy-tailed Lomax law of shape α = ``SHAPE``, so the
chance that a period ends falls with its age: a fresh up-period is fragile, an old one is not;
a short outage is likely to end soon, a long one to go on. α = 1.5 puts the median period at
~0.3 of the mean, which is what the six AWS zones show; a geometric law (a Markov chain,
α = ∞) puts it at 0.7.

Under that model a backward DP over (ticks left τ, slack σ, type held, spot up now, age bucket
of the current period) gives the action of least expected cost. Slack σ = τ·gap − work left −
overhead still to pay: an idle tick costs gap of it, a launch or switch costs d (the overhead
is priced explicitly, as lost slack and as billed ticks), a held tick costs nothing; the job is
done once σ ≥ τ·gap. States from which on-demand could no longer finish (σ < d off on-demand)
are infeasible. σ lives on a grid of gap/``SLACK_STEPS_PER_TICK`` with d rounded to it; ages
live in doubling buckets (0, 1, 2–3, …, 256+), left with probability 1/width per tick.

The table answers the two real questions — idle with spot down: wait or pay on-demand; on
on-demand with spot back: switch (d now, and another d if it soon goes) or stay. The rest is
fixed: launch spot whenever it is up and the job is idle (the DP's own launch rule, which
distrusts fresh up-periods, did worse: main-setting mean 96.41 vs 96.03), keep spot while it
lasts, keep on-demand while spot is down. The shared safety net has the last word and alone
guarantees the deadline.

Tables are cached per (job shape, model): mean durations snap to a doubling grid, so ~50
solves of ~0.15 s serve a benchmark setting, and a job "refits" by moving to another grid
cell as its counts change. Jobs whose table would be huge (τ·σ > ``MAX_DP_CELLS``, e.g. weeks
at a one-minute tick) keep the ``markov`` reserve rule instead.

Example (main setting, t = 20 h, learned means: up 32 ticks, down 16; read off the table).
Idle with spot down: with 6 h of slack it waits while the outage is younger than 8 ticks
(young outages mostly end soon) and then pays on-demand (an old outage goes on, and the slack
is worth more kept for coming back to spot later); with 2–4 h it waits one tick only; with
1 h it pays at once; below ~0.5 h (≈ 2d, the net's threshold) it waits again — the job will
be locked on on-demand anyway. On on-demand with spot back it switches once the up-period has
survived 2 ticks with 6 h of slack, 8 ticks with 4 h, 64 ticks with 1 h: the hysteresis
adapts to slack, to the measured preemption rate and to the age of the period.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import NamedTuple

import numpy as np

from gpufleet.market.deadline.controller import BatchRule, Choice, DeadlineJob, safety_net
from gpufleet.market.deadline.ours import ReserveRule
from gpufleet.market.deadline.registry import register

IDLE, SPOT, OD = np.int8(Choice.IDLE), np.int8(Choice.SPOT), np.int8(Choice.ON_DEMAND)

READ_BACK, READ_WAIT = 0, 1  # the table's situations: on-demand & spot up, idle & spot down
SLACK_STEPS_PER_TICK = 2  # σ grid: gap / 2
TAU_STRIDE = 4  # tables kept for every 4th τ (the policy moves slowly in τ)
PRIOR_TICKS = 20.0  # prior: one up-period and one down-period of this many ticks
SHAPE = 1.5  # Lomax shape α of period durations; math.inf: geometric (a Markov chain)
AGE_BUCKETS = 10  # doubling buckets: 0, 1, 2-3, ..., 256+
BIG = 1e9  # cost of an infeasible state (finite so expectations stay defined)
DTYPE = np.float32
CACHE_SIZE = 64  # tables kept (LRU); one is ~2.5 MB in the main setting
MAX_DP_CELLS = 2_000_000  # τ × σ steps; larger jobs keep the reserve rule's return decision

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
    # discrete durations (≥ 1 tick) have mean ≈ β/(α − 1) + 1/2: scale β to the learned mean
    beta = max(mean - 0.5, 0.5) * (shape - 1.0)
    return 1.0 - ((beta + ages) / (beta + ages + 1.0)) ** shape


def bucket_of(age: np.ndarray, n: int | None = None) -> np.ndarray:
    n = AGE_BUCKETS if n is None else n
    b = np.floor(np.log2(np.maximum(age, 1))) + (age >= 1)
    return np.minimum(b, n - 1).astype(np.int64)


def price_ratio(job: DeadlineJob) -> float:
    """Spot/on-demand price ratio, to two decimals: the DP's argmin depends on nothing else."""
    return round(job.spot_price_per_hour / job.on_demand_price_per_hour, 2)


def action_table(job: DeadlineJob, up_level: int, down_level: int,
                 shape: float = SHAPE) -> np.ndarray:
    """int8 actions [⌈τ / stride⌉, situation READ_*, age bucket, σ step] (LRU cache).

    In (τ, σ) coordinates nothing depends on the task or the deadline — they only fix where a
    job starts (τ = K, σ = K·gap − C) — so one table serves every job with the same tick,
    overhead, price ratio and model; it is solved for the largest (τ, σ) asked so far.
    """
    key = (job.gap_s, job.overhead_s, price_ratio(job), up_level, down_level, shape,
           SLACK_STEPS_PER_TICK, TAU_STRIDE, AGE_BUCKETS)
    k, s = job.deadline_ticks, slack_steps(job)
    table = _CACHE.get(key)
    if table is None or table.shape[0] < _rows(k) or table.shape[-1] < s:
        if table is not None:
            k = max(k, (table.shape[0] - 2) * TAU_STRIDE)
            s = max(s, table.shape[-1])
        table = _solve(job, 2.0**up_level, 2.0**down_level, shape, k, s)
        _CACHE[key] = table
        if len(_CACHE) > CACHE_SIZE:
            _CACHE.popitem(last=False)
    _CACHE.move_to_end(key)
    return table


def _rows(k: int) -> int:
    return (k + TAU_STRIDE) // TAU_STRIDE + 1


def slack_steps(job: DeadlineJob) -> int:
    """Size of the σ grid: slack from 0 to the job's initial slack."""
    v = job.gap_s / SLACK_STEPS_PER_TICK
    return max(math.floor((job.deadline_ticks * job.gap_s - job.task_s) / v) + 1, 1)


class DpInputs(NamedTuple):
    """What the induction is built from (``_solve`` and its reference oracle share it)."""

    q: int  # σ steps per tick
    ds: int  # the overhead d in σ steps
    pad: int  # σ columns below 0 (infeasible), enough for the farthest read
    cs: np.float32  # spot's cost per tick, in on-demand ticks
    co: np.float32  # on-demand's: 1
    nb: int  # age buckets (1 under the geometric model)
    hz: np.ndarray  # [a (0 down, 1 up), bucket, 1]: P(the period ends this tick)
    adv: np.ndarray  # [1, bucket, 1]: P(the age moves on to the next bucket)


def dp_inputs(job: DeadlineJob, mean_up: float, mean_down: float, shape: float) -> DpInputs:
    q = SLACK_STEPS_PER_TICK
    ds = round(job.overhead_s / (job.gap_s / q))
    nb = AGE_BUCKETS if not math.isinf(shape) else 1
    lo, width = _buckets(nb)
    mid = lo + np.where(np.isinf(width), 0.0, (width - 1) / 2)
    hz = np.stack([hazard(mean_down, shape, mid), hazard(mean_up, shape, mid)])[:, :, None]
    adv = np.where(np.isinf(width), 0.0, 1.0 / width)[None, :, None].astype(DTYPE)
    return DpInputs(q, ds, q + ds + 1, DTYPE(price_ratio(job)), DTYPE(1.0), nb,
                    hz.astype(DTYPE), adv)


def _solve(job: DeadlineJob, mean_up: float, mean_down: float, shape: float, k: int,
           s: int) -> np.ndarray:
    """Backward induction from τ = 0 to k over σ steps 0..s − 1 (costs in on-demand ticks).

    Only the σ steps a job can still need are computed: at τ every state with σ ≥ τ·q (q =
    ``SLACK_STEPS_PER_TICK``) is done — value 0, action IDLE (0, the table's fill) — and a step
    reads only lower σ (waiting costs q steps, a launch d), so the work per τ is the ``m`` =
    min(τ·q, s) steps below that line, a third less on a long job. The same elementwise float32
    operations, in the same order, run on every state that is computed, so the table is equal to
    the plain full-width induction (``tests/support/mdp_reference.py``, compared in
    ``tests/market/test_deadline_mdp_fast.py``) bit for bit.
    """
    q, ds, pad, cs, co, nb, hz, adv = dp_inputs(job, mean_up, mean_down, shape)
    hz_up = hz[1:]
    # val[held, a (0 down, 1 up), age bucket, pad + σ]; τ = 0: done wherever σ ≥ 0. Both
    # buffers start so: a step writes only σ < m, and the rest must read as done (0).
    val = np.full((3, 2, nb, pad + s), BIG, dtype=DTYPE)
    val[..., pad:] = 0.0
    new = val.copy()
    act = np.zeros((_rows(k), 2, nb, s), dtype=np.int8)
    ih, sh, oh = int(Choice.IDLE), int(Choice.SPOT), int(Choice.ON_DEMAND)
    io = slice(ih, oh + 1, oh - ih)  # idle and on-demand, expected together
    assert (ih, sh, oh) == (0, 1, 2)
    base = pad - max(q, ds)  # the lowest padded column a computed step reads

    def expect(cont: np.ndarray, flip: np.ndarray, hz: np.ndarray) -> np.ndarray:
        """E[V next | a, bucket]: cont[..., a, b] if the period goes on, flip[..., a] if it
        ends — the reference's ``stay = cont + adv·(cont[next b] − cont)`` and ``stay +
        hz·(flip − stay)``, the same roundings in place (two buffers, not six temporaries)."""
        # bucket b moves on to b + 1 with probability adv[b]; the last bucket is open (adv 0:
        # cont + 0·(cont − cont) is cont itself), so only the others are computed, from
        # shifted views instead of a gathered copy
        stay = cont.copy()
        head = stay[..., :-1, :]
        np.subtract(cont[..., 1:, :], cont[..., :-1, :], out=head)
        head *= adv[:, :-1]
        head += cont[..., :-1, :]
        out = np.subtract(flip[..., None, :], stay)
        out *= hz
        out += stay
        return out

    for tau in range(1, k + 1):
        m = min(tau * q, s)  # σ steps below the done line
        w = pad + m
        cur = val[..., base:w]  # padded columns base..w-1, shifted by ``base``
        e_io = expect(cur[io], cur[io, ::-1, 0], hz)
        e_i, e_o = e_io[0], e_io[1]
        # held spot, up now: it goes on (spot, up) or is preempted (idle, down)
        e_s = expect(cur[sh, 1:], cur[ih, 0:1, 0], hz_up)[0]  # (nb, w - base)
        p0 = pad - base
        idle = e_i[..., p0 - q : p0 - q + m]
        od_keep = co + e_o[..., p0 : p0 + m]
        od_new = co + e_o[..., p0 - ds : p0 - ds + m]
        sp_keep = cs + e_s[:, p0 : p0 + m]
        sp_new = cs + e_s[:, p0 - ds : p0 - ds + m]
        new[..., :pad] = BIG
        rec = tau % TAU_STRIDE == 0 or tau == k
        row = (tau + TAU_STRIDE - 1) // TAU_STRIDE
        for h, od, sp in ((ih, od_new, sp_new), (sh, od_new, sp_keep), (oh, od_keep, sp_new)):
            out = new[h, ..., pad:w]
            np.minimum(idle, od, out=out)
            if rec and h == oh:
                a = act[row, READ_BACK, ..., :m]
                a[...] = np.where(od[1] < idle[1], np.int8(oh), np.int8(ih))
                a[sp < out[1]] = sh
            elif rec and h == ih:
                act[row, READ_WAIT, ..., :m] = np.where(od[0] < idle[0], np.int8(oh),
                                                        np.int8(ih))
            np.minimum(out[1], sp, out=out[1])
        new[sh, 0, :, : w] = new[ih, 0, :, : w]  # holding spot while it is down means idle
        new[:2, ..., pad : pad + min(ds, m)] = BIG  # not on on-demand: must keep d to launch it
        val, new = new, val
    return act


class SmdpRule:
    """The batch form: n jobs, each with its own period counts and current period age."""

    def __init__(self, job: DeadlineJob, n: int, shape: float | None = None,
                 prior_ticks: float = PRIOR_TICKS) -> None:
        self.job = job
        self.shape = SHAPE if shape is None else shape
        self._reserve = ReserveRule(job, n)
        self._use_dp = job.deadline_ticks * slack_steps(job) <= MAX_DP_CELLS
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
        if not self._use_dp:
            return self._reserve.decide(t_s, done_s, holding, overhead_left_s, avail)
        # Fixed moves: spot up → an idle job launches it and a job on it keeps it; spot down →
        # a job on on-demand stays (dropping to idle and relaunching costs another d). The
        # table decides the two real questions: wait or pay when idle with spot down, and go
        # back to spot or stay when on on-demand with spot up.
        proposal = np.where(avail, SPOT, np.where(holding == Choice.ON_DEMAND, OD, IDLE))
        on_od = holding == Choice.ON_DEMAND
        situation = np.where(on_od, READ_BACK, READ_WAIT)
        ask = np.flatnonzero(np.where(on_od, avail, ~avail) & (holding != Choice.SPOT))
        if ask.size:
            proposal[ask] = self._table_actions(t_s, done_s[ask], overhead_left_s[ask], ask,
                                                situation[ask])
        proposal = np.where((proposal == Choice.SPOT) & ~avail, IDLE, proposal)
        return safety_net(proposal.astype(np.int8), job=job, t_s=t_s, done_s=done_s,
                          holding=holding, overhead_left_s=overhead_left_s)

    def _table_actions(self, t_s: float, done_s: np.ndarray, overhead_left_s: np.ndarray,
                       rows: np.ndarray, situation: np.ndarray) -> np.ndarray:
        """The DP's action for jobs ``rows`` in their situation (READ_*)."""
        job = self.job
        mean = self._ticks[:, rows] / self._periods[:, rows]  # the period in progress counts
        lv = np.round(np.log2(np.maximum(mean, 1.0))).astype(np.int64)
        tau = max(job.deadline_ticks - round(t_s / job.gap_s), 0)
        row = (tau + TAU_STRIDE - 1) // TAU_STRIDE
        sigma = tau * job.gap_s - (job.task_s - done_s) - overhead_left_s
        step = np.floor(sigma / (job.gap_s / SLACK_STEPS_PER_TICK))
        bucket = bucket_of(self._age[rows]) if not math.isinf(self.shape) else 0 * rows
        keys = lv[1] * 1000 + lv[0]
        out = np.empty(len(rows), dtype=np.int8)
        for key in np.unique(keys):
            sel = keys == key
            table = action_table(job, int(key // 1000), int(key % 1000), self.shape)
            idx = np.clip(step[sel], 0, table.shape[-1] - 1).astype(np.int64)
            out[sel] = table[row, situation[sel], bucket[sel], idx]
        return out


def _smdp(job: DeadlineJob, n: int) -> BatchRule:
    return SmdpRule(job, n)


register("smdp", "markov's reserve for waiting; return to spot by a learned semi-Markov DP",
         aliases=("ours",))(_smdp)
