"""The fast ``smdp`` solver equals the plain full-width induction bit for bit.

``mdp._solve`` computes only the states that are not yet done (σ < τ·q) and expects idle and
on-demand in one batch; ``mdp_reference.solve_reference`` is the induction as first written.
Hand cases pin the edges (one tick; a launch overhead longer than a tick, so d > q; σ grids
narrower and wider than τ·q; the geometric model with one age bucket; a free spot price), the
random cases the rest; every table must be equal, element for element.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from mdp_reference import solve_reference

from gpufleet.market.deadline import DeadlineJob, mdp


def _job(gap_s: float, overhead_s: float, spot: float) -> DeadlineJob:
    return DeadlineJob(task_s=gap_s, deadline_s=2 * gap_s, overhead_s=overhead_s, gap_s=gap_s,
                       spot_price_per_hour=spot, on_demand_price_per_hour=1.0)


HAND = [
    # (gap, overhead, spot price, mean up, mean down, shape, k, s)
    (100.0, 200.0, 0.3, 8.0, 16.0, mdp.SHAPE, 20, 17),  # the small job of test_deadline_mdp
    (100.0, 200.0, 0.3, 8.0, 16.0, mdp.SHAPE, 1, 1),  # one tick, one σ step
    (300.0, 120.0, 0.22, 16.0, 16.0, mdp.SHAPE, 57, 54),  # d < one σ step apart: ds = 1
    (300.0, 900.0, 0.25, 32.0, 8.0, mdp.SHAPE, 40, 200),  # d = 6 steps > q; s ≫ τ·q
    (300.0, 120.0, 0.19, 8.0, 16.0, mdp.SHAPE, 300, 30),  # s ≪ τ·q: all but the first 15 τ
    (100.0, 200.0, 0.3, 1.0, 16.0, math.inf, 20, 17),  # geometric, one age bucket
    (100.0, 200.0, 0.0, 1024.0, 16.0, mdp.SHAPE, 23, 40),  # free spot; k not a stride multiple
]


@pytest.mark.parametrize("case", HAND)
def test_fast_solver_equals_reference_on_hand_cases(case: tuple) -> None:
    gap, overhead, spot, up, down, shape, k, s = case
    job = _job(gap, overhead, spot)
    fast = mdp._solve(job, up, down, shape, k, s)
    ref = solve_reference(job, up, down, shape, k, s)
    assert fast.shape == ref.shape
    assert np.array_equal(fast, ref)


def test_fast_solver_equals_reference_on_random_cases() -> None:
    rng = np.random.default_rng(19)
    for _ in range(40):
        gap = float(rng.choice([60.0, 100.0, 300.0, 900.0]))
        job = _job(gap, float(rng.uniform(0.0, 4.0) * gap), float(rng.uniform(0.05, 1.0)))
        up, down = 2.0 ** rng.integers(0, 9, size=2)
        shape = float(rng.choice([mdp.SHAPE, 3.0, math.inf]))
        k, s = int(rng.integers(1, 160)), int(rng.integers(1, 400))
        fast = mdp._solve(job, float(up), float(down), shape, k, s)
        ref = solve_reference(job, float(up), float(down), shape, k, s)
        assert np.array_equal(fast, ref), (gap, job.overhead_s, up, down, shape, k, s)
        assert (ref != 0).any() or k * s < 4  # the case decides something: not all IDLE
