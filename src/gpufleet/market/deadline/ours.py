"""Our deadline policy, ``markov`` (alias ``ours``): spend the slack on a shrinking reserve.

Slack s = R − T1 is the time the job may still lose (idle or to overheads) and finish on
on-demand by the deadline; the safety net acts at s ≤ 0. Uniform Progress spends it evenly over
the job; Greedy spends it all first and then rides on-demand to the end, even through hours of
cheap spot. We keep a reserve θ(t) = (D − C − d)·((D − t)/D)^β that shrinks faster than linearly
(β = 1.25), and:

* spot up → spot (from idle always; from on-demand only while s ≥ θ(t) and the learned mean
  spot up-period covers the two switches the trip costs, 2d — the hysteresis adapts to the
  measured preemption rate);
* spot down, idle → wait while s > θ(t), else on-demand;
* spot down, on-demand → stay (dropping to idle and relaunching would cost another d);
* then the shared safety net, which alone guarantees the deadline.

The preemption rate is learned online from the availability ticks the job has seen (up-ticks
per observed up→down transition, with a prior of one 20-tick up-period), nothing else.

Example (main setting, slack0 = 60 − 48 − 0.2 = 11.8 h): spot lost at t = 6 h with 5.6 h done:
s ≈ 54 − 42.6 = 11.4 h, θ(6 h) = 11.8·0.9^1.25 ≈ 10.3 h → wait. Each idle hour costs an hour of
slack while θ shrinks by only ~0.24 h, so it waits until t ≈ 7.4 h (s ≈ θ ≈ 10.0 h) and then
launches on-demand. On on-demand the slack stays put while θ keeps shrinking, so when spot
returns it switches back — if the up-periods seen so far average at least 2d = 0.4 h.
"""

from __future__ import annotations

import numpy as np

from gpufleet.market.deadline.controller import BatchRule, Choice, DeadlineJob, safety_net
from gpufleet.market.deadline.registry import register

IDLE, SPOT, OD = np.int8(Choice.IDLE), np.int8(Choice.SPOT), np.int8(Choice.ON_DEMAND)

RESERVE_EXPONENT = 1.25  # β: tuned on the six aws-02-15-2023 traces (see docs/spot-deadline.md)
RETURN_UP_PERIODS_OF_D = 2.0  # return from on-demand when mean up-period ≥ this many d
PRIOR_UP_TICKS = 20.0  # prior: one observed up-period of this many ticks


class ReserveRule:
    """The batch form of the policy: n jobs, each with its own learned preemption rate."""

    def __init__(self, job: DeadlineJob, n: int, beta: float = RESERVE_EXPONENT) -> None:
        self.job = job
        self.beta = beta
        self.slack0 = job.deadline_s - job.task_s - job.overhead_s
        self._prev_up = np.zeros(n, dtype=bool)
        self._up_ticks = np.full(n, PRIOR_UP_TICKS)
        self._up_periods = np.ones(n)

    def reserve(self, t_s: float) -> float:
        """θ(t): slack to keep in hand for the outages still to come."""
        left = max(self.job.deadline_s - t_s, 0.0) / self.job.deadline_s
        return self.slack0 * left**self.beta

    def mean_up_s(self) -> np.ndarray:
        """Learned mean spot up-period (seconds) per job."""
        return self._up_ticks / self._up_periods * self.job.gap_s

    def decide(self, t_s: float, done_s: np.ndarray, holding: np.ndarray,
               overhead_left_s: np.ndarray, avail: np.ndarray) -> np.ndarray:
        job = self.job
        gap, d = job.gap_s, job.overhead_s
        self._up_periods += self._prev_up & ~avail
        self._up_ticks += avail
        self._prev_up = avail.copy()
        r_left = np.floor((job.deadline_s - t_s) / gap) * gap
        t1 = np.ceil((job.task_s - done_s + d) / gap) * gap
        slack = r_left - t1
        wait = slack > self.reserve(t_s)
        proposal = np.where(avail, SPOT, np.where(wait, IDLE, OD))
        on_od = holding == Choice.ON_DEMAND
        worth_return = self.mean_up_s() >= RETURN_UP_PERIODS_OF_D * d
        back = worth_return & (slack >= self.reserve(t_s))
        proposal = np.where(on_od & ~(avail & back), OD, proposal).astype(np.int8)
        return safety_net(proposal, job=job, t_s=t_s, done_s=done_s, holding=holding,
                          overhead_left_s=overhead_left_s)


def _reserve(job: DeadlineJob, n: int) -> BatchRule:
    return ReserveRule(job, n)


register("markov", "shrinking slack reserve; learned preemption rate gates returns to spot")(
    _reserve
)
