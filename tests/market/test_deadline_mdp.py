"""The cost-to-go DP behind ``smdp``: the duration model, the age buckets, known table answers.

Small job as in test_deadline.py: gap 100 s, C = 1000 s, d = 200 s, D = 2000 s (K = 20
ticks); the σ grid has steps of 50 s, so d is 4 steps and the initial slack 800 s is step 16.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpufleet.market.deadline import (
    DEFAULT_DEADLINE_POLICY,
    Choice,
    DeadlineJob,
    get_deadline_policy,
    mdp,
)
from gpufleet.market.deadline.bench.ticksim import run_batch

JOB = DeadlineJob(task_s=1000, deadline_s=2000, overhead_s=200, gap_s=100)


def test_default_is_smdp_and_markov_stays() -> None:
    assert DEFAULT_DEADLINE_POLICY == "smdp"
    assert get_deadline_policy("ours").name == "smdp"
    assert get_deadline_policy("markov").name == "markov"


@pytest.mark.parametrize("mean", [2.0, 8.0, 40.0])
def test_lomax_hazard_has_the_learned_mean_and_falls_with_age(mean: float) -> None:
    ages = np.arange(200_000, dtype=float)
    h = mdp.hazard(mean, 3.0, ages)  # shape 3: a tail light enough to sum numerically
    survival = np.cumprod(1.0 - h)  # P(duration > x + 1)
    assert 1.0 + survival.sum() == pytest.approx(mean, rel=0.05)  # E[D] = Σ P(D > x)
    assert np.all(np.diff(mdp.hazard(mean, 1.5, ages[:100])) < 0)  # heavy tail: decreasing
    assert np.all(mdp.hazard(mean, math.inf, ages[:5]) == pytest.approx(1.0 / mean))


def test_lomax_shape_matches_the_median_to_mean_ratio() -> None:
    """α = 1.5 puts the median at ~0.3 of the mean (the AWS zones: 0.2-0.4); geometric ~0.7."""
    ages = np.arange(100_000, dtype=float)
    for shape, ratio in ((1.5, 0.29), (math.inf, 0.69)):
        mean = 100.0
        survival = np.cumprod(1.0 - mdp.hazard(mean, shape, ages))
        median = 1 + int(np.argmax(survival <= 0.5))
        assert median / mean == pytest.approx(ratio, abs=0.03), shape


@pytest.mark.parametrize(("age", "bucket"),
                         [(0, 0), (1, 1), (2, 2), (3, 2), (4, 3), (7, 3), (8, 4), (255, 8),
                          (256, 9), (10_000, 9)])
def test_age_buckets_double(age: int, bucket: int) -> None:
    assert int(mdp.bucket_of(np.array([float(age)]))[0]) == bucket


def test_table_never_switches_to_a_spot_that_cannot_last() -> None:
    """Geometric up-periods of mean 1 tick end after every tick: a switch costs d (2 ticks)
    and makes no progress, so on-demand with spot up never goes to spot."""
    table = mdp.action_table(JOB, 0, 4, math.inf)[:, mdp.READ_BACK]
    assert not (table == Choice.SPOT).any()


def test_table_switches_to_lasting_spot_when_slack_allows() -> None:
    """Up-periods of mean 1024 ticks outlast the job: switch whenever the slack covers the
    switch and one more launch back to on-demand (σ ≥ 2d = 8 steps), never below d."""
    table = mdp.action_table(JOB, 10, 4, math.inf)
    tau = 14  # t = 600 s: 14 ticks left, up to 1400 s of work can remain
    row = table[(tau + mdp.TAU_STRIDE - 1) // mdp.TAU_STRIDE, mdp.READ_BACK, 0]
    assert (row[8:] == Choice.SPOT).all()
    assert (row[:4] != Choice.SPOT).all()


def test_fresh_heavy_tailed_period_is_distrusted() -> None:
    """Same learned mean (8 ticks), same state: the geometric model switches at once, the
    Lomax model (hazard 28 % at age 0, falling with age) waits for the period to age."""
    row = (14 + mdp.TAU_STRIDE - 1) // mdp.TAU_STRIDE
    geometric = mdp.action_table(JOB, 3, 4, math.inf)[row, mdp.READ_BACK, 0, 16]
    lomax = mdp.action_table(JOB, 3, 4, 1.5)[row, mdp.READ_BACK]
    assert geometric == Choice.SPOT
    assert (lomax[:3, 16] == Choice.ON_DEMAND).all()


@pytest.mark.parametrize(("down_level", "shape"), [(0, math.inf), (4, 1.5), (10, math.inf)])
def test_wait_table_known_answers(down_level: int, shape: float) -> None:
    """Idle, spot down, 14 ticks left. With 800 s of slack (step 16) waiting is free in
    expectation — on-demand later costs what it costs now, and spot may come — so it waits,
    even when outages outlast the job (a tie, broken towards waiting). With less than d + gap
    (steps 4, 5) one idle tick would leave too little for the launch: on-demand now."""
    row = (14 + mdp.TAU_STRIDE - 1) // mdp.TAU_STRIDE
    wait = mdp.action_table(JOB, 3, down_level, shape)[row, mdp.READ_WAIT, 0]
    assert wait[16] == Choice.IDLE
    assert (wait[4:6] == Choice.ON_DEMAND).all()


def test_big_jobs_keep_the_reserve_rule() -> None:
    """A job whose table would be huge (here 1000 h at a 60 s tick) falls back to markov's
    return decision instead of solving for minutes: same choices as markov."""
    job = DeadlineJob(task_s=500 * 3600, deadline_s=1000 * 3600, overhead_s=600, gap_s=60)
    period = np.array([1] * 30 + [0] * 10, dtype=np.int8)
    avail = np.tile(period, (2, 1600))[:, : job.deadline_ticks]
    a = run_batch(job, get_deadline_policy("smdp").batch(job, 2), avail)
    b = run_batch(job, get_deadline_policy("markov").batch(job, 2), avail)
    assert np.array_equal(a.cost, b.cost) and a.met.all()
