"""Adversaries that react to the policy: spot vanishes the moment the job commits to it.

The adversary writes tick i+1's availability after seeing the choice at tick i, through the
same driver the simulator uses, so the policy under test never sees the future either.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from gpufleet.market.deadline import Choice, DeadlineController, DeadlineJob, get_deadline_policy
from gpufleet.market.deadline.bench.ticksim import run_controller

Adversary = Callable[[Choice, np.random.Generator, int], int]


def preempt_on_commit(choice: Choice, rng: np.random.Generator, i: int) -> int:
    """Spot is up whenever the job is not on it, and gone the tick after it launches."""
    return 0 if choice == Choice.SPOT else 1


def tempt_then_drop(choice: Choice, rng: np.random.Generator, i: int) -> int:
    """Spot appears while the job pays on-demand, vanishes on commit, random when idle."""
    if choice == Choice.ON_DEMAND:
        return 1
    if choice == Choice.SPOT:
        return 0
    return int(rng.random() < 0.5)


def long_tease(choice: Choice, rng: np.random.Generator, i: int) -> int:
    """Lets spot run a few ticks (past the overhead), then drops it; up while idle."""
    if choice == Choice.SPOT:
        return int(rng.random() < 0.7)
    return 1


class Reacting:
    """Wraps a controller; after each decision the adversary fixes the next tick's spot."""

    def __init__(self, inner: DeadlineController, avail: np.ndarray, adversary: Adversary,
                 seed: int) -> None:
        self.inner, self.avail, self.adversary = inner, avail, adversary
        self.rng = np.random.default_rng(seed)

    def decide(self, **obs: object) -> Choice:
        choice = self.inner.decide(**obs)  # type: ignore[arg-type]
        i = len(obs["history"]) - 1  # type: ignore[arg-type]
        effective = choice if (choice != Choice.SPOT or obs["spot_available"]) else Choice.IDLE
        if i + 1 < len(self.avail):
            self.avail[i + 1] = self.adversary(effective, self.rng, i)
        return choice


JOBS = [
    DeadlineJob(task_s=48 * 3600, deadline_s=52 * 3600, overhead_s=0.2 * 3600, gap_s=195),
    DeadlineJob(task_s=48 * 3600, deadline_s=60 * 3600, overhead_s=0.2 * 3600, gap_s=195),
    DeadlineJob(task_s=10 * 3600, deadline_s=10.5 * 3600, overhead_s=0.05 * 3600, gap_s=195),
    DeadlineJob(task_s=1000, deadline_s=1300, overhead_s=150, gap_s=100),  # d not a tick multiple
    DeadlineJob(task_s=1000, deadline_s=2000, overhead_s=350, gap_s=100),  # d > 3 ticks
]


@pytest.mark.parametrize("adversary", [preempt_on_commit, tempt_then_drop, long_tease])
@pytest.mark.parametrize("job", JOBS, ids=lambda j: f"C{j.task_s:g}-D{j.deadline_s:g}")
@pytest.mark.parametrize("policy", ["smdp", "markov", "greedy", "up"])
def test_no_miss_against_reacting_adversary(policy: str, job: DeadlineJob,
                                            adversary: Adversary) -> None:
    for seed in range(3):
        length = job.deadline_ticks + 4
        avail = np.ones(length, dtype=np.int8)
        ctl = Reacting(get_deadline_policy(policy).start(job), avail, adversary, seed)
        res = run_controller(job, ctl, avail)
        assert res.met, (policy, seed, res)


def test_adversary_really_bites() -> None:
    """Sanity: without the net, chasing spot against preempt_on_commit never finishes."""

    class Chaser:
        def decide(self, *, spot_available: bool, **_: object) -> Choice:
            return Choice.SPOT

    job = JOBS[1]
    avail = np.ones(job.deadline_ticks + 4, dtype=np.int8)
    res = run_controller(job, Reacting(Chaser(), avail, preempt_on_commit, 0), avail)
    assert not res.met
