"""The reference deadline policies of the protocol: on-demand only, Greedy, Uniform Progress.

Each is a :class:`~gpufleet.market.deadline.BatchRule` (n jobs per call), wrapped by the shared
safety net. Example sequences (main setting):

* Greedy: spot up → spot; spot lost at 10 h → idle, waiting, until T2 ≥ R near t = 12 h →
  on-demand, and on-demand to the end (T2 ≥ R keeps it there).
* UP: spot lost at 10 h with done = 7.9 h < 10·48/60 = 8 h (behind the line) → on-demand; spot
  back at 10.5 h with done = 8.3 h ≤ (10.5 + 0.4)·0.8 = 8.72 h → stays on-demand until it is
  2d ahead of the line, then spot again.
"""

from __future__ import annotations

import numpy as np

from gpufleet.market.deadline.controller import BatchRule, Choice, DeadlineJob, safety_net
from gpufleet.market.deadline.registry import register

IDLE, SPOT, OD = np.int8(Choice.IDLE), np.int8(Choice.SPOT), np.int8(Choice.ON_DEMAND)


class OnDemandRule:
    """On-demand every tick: the cost ceiling every other policy is measured against."""

    def __init__(self, job: DeadlineJob, n: int) -> None:
        self.job = job

    def decide(self, t_s: float, done_s: np.ndarray, holding: np.ndarray,
               overhead_left_s: np.ndarray, avail: np.ndarray) -> np.ndarray:
        return np.full(done_s.shape, OD, dtype=np.int8)


class GreedyRule:
    """Spot whenever it is up, wait otherwise, until the safety net forces on-demand."""

    def __init__(self, job: DeadlineJob, n: int) -> None:
        self.job = job

    def decide(self, t_s: float, done_s: np.ndarray, holding: np.ndarray,
               overhead_left_s: np.ndarray, avail: np.ndarray) -> np.ndarray:
        proposal = np.where(avail, SPOT, IDLE).astype(np.int8)
        return safety_net(proposal, job=self.job, t_s=t_s, done_s=done_s, holding=holding,
                          overhead_left_s=overhead_left_s)


class UniformProgressRule:
    """Uniform Progress (Wu et al., NSDI'24): keep done ≥ t·C/D, paying on-demand when behind.

    On on-demand it stays while spot is down or until it is 2d ahead of the line (the
    hysteresis that pays for the switch back), then the safety net.
    """

    def __init__(self, job: DeadlineJob, n: int) -> None:
        self.job = job

    def decide(self, t_s: float, done_s: np.ndarray, holding: np.ndarray,
               overhead_left_s: np.ndarray, avail: np.ndarray) -> np.ndarray:
        job = self.job
        c, dl, d = job.task_s, job.deadline_s, job.overhead_s
        proposal = np.where(avail, SPOT, IDLE).astype(np.int8)
        behind = done_s < t_s * c / dl
        proposal = np.where(behind, np.where(avail, SPOT, OD), proposal)
        stay = (holding == OD) & (~avail | (done_s <= (t_s + 2 * d) * c / dl))
        proposal = np.where(stay, OD, proposal).astype(np.int8)
        return safety_net(proposal, job=job, t_s=t_s, done_s=done_s, holding=holding,
                          overhead_left_s=overhead_left_s)


def _on_demand(job: DeadlineJob, n: int) -> BatchRule:
    return OnDemandRule(job, n)


def _greedy(job: DeadlineJob, n: int) -> BatchRule:
    return GreedyRule(job, n)


def _up(job: DeadlineJob, n: int) -> BatchRule:
    return UniformProgressRule(job, n)


register("on_demand", "on-demand only")(_on_demand)
register("greedy", "spot when up, else wait; safety net")(_greedy)
register("up", "Uniform Progress (NSDI'24)")(_up)
