"""Our deadline policy ``mdp``: expected cost-to-go under an availability model learned online.

Each job counts the spot up- and down-periods it has seen (with a prior of one period of
``PRIOR_TICKS`` each) and models availability as a two-state Markov chain with those mean
durations. Under that model a backward DP over (ticks left τ, slack σ, type held, spot up now)
gives the action of least expected cost; the job reads its action from the table each tick,
then the shared safety net, which alone guarantees the deadline, has the last word.

Slack σ = τ·gap − work left − overhead still to pay: an idle tick costs gap of it, a launch or
switch costs d, a held tick costs nothing; the job is done once σ ≥ τ·gap. σ lives on a grid
of gap/``SLACK_STEPS_PER_TICK``; d is rounded to it (the net corrects the rounding). States
from which on-demand could no longer finish (σ < d when not on on-demand) are infeasible.

Tables are cached per (job shape, quantised model): the mean durations are snapped to a
factor-``MODEL_GRID_RATIO`` log grid, so a few dozen solves (~0.1 s each) serve every job of a
benchmark setting; a job "refits" simply by moving to another grid cell as its counts change.

Example: in a zone whose spot periods are short and rare (mean up 2 ticks, down 40), the value
of waiting is low and the table sends an idle job to on-demand while much slack is left; where
up-periods are long (mean up 60 ticks, down 10) the table waits through an outage.
"""

from __future__ import annotations

import math

import numpy as np

from gpufleet.market.deadline import BatchRule, Choice, DeadlineJob, register, safety_net

SLACK_STEPS_PER_TICK = 2  # σ grid: gap / 2
PRIOR_TICKS = 20.0  # prior: one up-period and one down-period of this many ticks
MODEL_GRID_RATIO = 1.5  # mean durations snapped to powers of this
BIG = 1e9  # cost of an infeasible state (finite so expectations stay defined)

_CACHE: dict[tuple[float, float, float, float, int, int], np.ndarray] = {}


def _level_mean(level: int) -> float:
    return max(MODEL_GRID_RATIO**level, 1.0)


def action_table(job: DeadlineJob, up_level: int, down_level: int) -> np.ndarray:
    """int8 actions, shape (K + 1, 6, S): [τ, 2·held + spot_up, σ step] (cached)."""
    key = (job.gap_s, job.overhead_s, job.task_s, job.deadline_s, up_level, down_level)
    table = _CACHE.get(key)
    if table is None:
        table = _solve(job, _level_mean(up_level), _level_mean(down_level))
        _CACHE[key] = table
    return table


def _solve(job: DeadlineJob, mean_up: float, mean_down: float) -> np.ndarray:
    q = SLACK_STEPS_PER_TICK
    v = job.gap_s / q
    ds = round(job.overhead_s / v)
    k = job.deadline_ticks
    s = max(math.floor((k * job.gap_s - job.task_s) / v) + 1, 1)
    pad = q + ds + 1
    cs, co = job.tick_cost(Choice.SPOT), job.tick_cost(Choice.ON_DEMAND)
    p_ud, p_du = min(1.0 / mean_up, 1.0), min(1.0 / mean_down, 1.0)
    # trans[a, a']: a = 0 down, 1 up
    trans = np.array([[1 - p_du, p_du], [p_ud, 1 - p_ud]])
    sig = np.arange(s)
    # V[h, a, pad + σ]; τ = 0: done wherever σ ≥ 0, anything below the grid is infeasible
    val = np.full((3, 2, pad + s), BIG)
    val[:, :, pad:] = 0.0
    act = np.zeros((k + 1, 6, s), dtype=np.int8)
    new = np.empty_like(val)
    for tau in range(1, k + 1):
        wi = trans @ val[0]
        wo = trans @ val[2]
        ws = trans[:, 1:2] * val[1, 1] + trans[:, 0:1] * val[0, 0]  # preempted → idle
        idle = wi[:, pad - q : pad - q + s]
        od_keep = co + wo[:, pad : pad + s]
        od_new = co + wo[:, pad - ds : pad - ds + s]
        sp_keep = cs + ws[1, pad : pad + s]
        sp_new = cs + ws[1, pad - ds : pad - ds + s]
        for h in range(3):
            for a in range(2):
                opts = np.stack([
                    idle[a],
                    (sp_keep if h == Choice.SPOT else sp_new) if a == 1 else np.full(s, BIG),
                    od_keep[a] if h == Choice.ON_DEMAND else od_new[a],
                ])
                best = opts.argmin(axis=0)
                act[tau, 2 * h + a] = best
                new[h, a, pad:] = opts[best, sig]
        new[1, 0, pad:] = new[0, 0, pad:]  # holding spot while it is down means idle
        new[:2, :, pad : pad + ds] = np.maximum(new[:2, :, pad : pad + ds], BIG)
        done = sig >= tau * q
        new[:, :, pad:][:, :, done] = 0.0
        new[:, :, :pad] = BIG
        val, new = new, val
    return act


class MdpRule:
    """The batch form: n jobs, each with its own counts of up/down periods seen."""

    def __init__(self, job: DeadlineJob, n: int, prior_ticks: float = PRIOR_TICKS) -> None:
        self.job = job
        self._prev = np.full(n, -1, dtype=np.int8)
        self._ticks = np.full((2, n), prior_ticks)  # [down, up]
        self._periods = np.ones((2, n))

    def decide(self, t_s: float, done_s: np.ndarray, holding: np.ndarray,
               overhead_left_s: np.ndarray, avail: np.ndarray) -> np.ndarray:
        job = self.job
        cur = avail.astype(np.int8)
        self._periods[cur, np.arange(len(cur))] += cur != self._prev
        self._ticks[cur, np.arange(len(cur))] += 1
        self._prev = cur
        mean = self._ticks / self._periods  # the period in progress counts as one
        up_lv = np.round(np.log(np.maximum(mean[1], 1.0)) / math.log(MODEL_GRID_RATIO))
        dn_lv = np.round(np.log(np.maximum(mean[0], 1.0)) / math.log(MODEL_GRID_RATIO))
        k = job.deadline_ticks
        tau = max(k - round(t_s / job.gap_s), 0)
        v = job.gap_s / SLACK_STEPS_PER_TICK
        sigma = tau * job.gap_s - (job.task_s - done_s) - overhead_left_s
        combo = 2 * holding.astype(np.int64) + cur
        proposal = np.empty(len(cur), dtype=np.int8)
        keys = up_lv.astype(np.int64) * 1000 + dn_lv.astype(np.int64)
        for key in np.unique(keys):
            sel = keys == key
            table = action_table(job, int(key // 1000), int(key % 1000))
            idx = np.clip(np.floor(sigma[sel] / v), 0, table.shape[2] - 1).astype(np.int64)
            proposal[sel] = table[tau, combo[sel], idx]
        proposal = np.where((proposal == Choice.SPOT) & ~avail, np.int8(Choice.IDLE), proposal)
        return safety_net(proposal.astype(np.int8), job=job, t_s=t_s, done_s=done_s,
                          holding=holding, overhead_left_s=overhead_left_s)


def _mdp(job: DeadlineJob, n: int) -> BatchRule:
    return MdpRule(job, n)


register("mdp", "expected cost-to-go DP under a Markov availability model learned online")(_mdp)
