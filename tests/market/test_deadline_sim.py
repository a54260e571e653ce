"""The benchmark's vectorised driver against the contract's per-job controller, on real traces."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from gpufleet.market.deadline import DeadlineJob, get_deadline_policy
from gpufleet.market.deadline.bench.ticksim import run_batch, run_controller, start_indices, windows
from gpufleet.traces.spot_availability import load_availability

TRACES = "spot-traces/availability/1-node/aws-02-15-2023"


@pytest.mark.parametrize("policy", ["on_demand", "greedy", "up", "markov", "smdp"])
@pytest.mark.parametrize(("zone", "deadline_h", "overhead_h"),
                         [("us-east-1c_v100_1", 60, 0.2), ("us-east-2a_v100_1", 52, 0.05)])
def test_batch_equals_controller(shared_data: Path, policy: str, zone: str, deadline_h: float,
                                 overhead_h: float) -> None:
    tr = load_availability(shared_data / TRACES / f"{zone}.json")
    job = DeadlineJob(task_s=48 * 3600, deadline_s=deadline_h * 3600,
                      overhead_s=overhead_h * 3600, gap_s=tr.gap_seconds)
    length = math.ceil(80 * 3600 / tr.gap_seconds) + 2
    win = windows(tr.data, length, 300)[::37]  # 9 of the protocol's starts
    pol = get_deadline_policy(policy)
    batch = run_batch(job, pol.batch(job, len(win)), win)
    for i, w in enumerate(win):
        one = run_controller(job, pol.start(job), w)
        assert (one.cost, one.end_s, one.met) == (batch.cost[i], batch.end_s[i], batch.met[i])
        assert (one.spot_ticks, one.on_demand_ticks) == (batch.spot_ticks[i],
                                                         batch.on_demand_ticks[i])


def test_start_points_follow_protocol() -> None:
    idx = start_indices(20158, 1479, 300)
    assert idx[0] == 0 and idx[-1] == 20158 - 1479 and len(idx) == 300
    assert idx[1] == round(18679 / 299)  # 62.47 → 62
    assert np.all(np.diff(idx) > 0)


def test_unfinished_run_is_a_miss() -> None:
    job = DeadlineJob(task_s=1000, deadline_s=2000, overhead_s=200, gap_s=100)
    res = run_controller(job, get_deadline_policy("greedy").start(job),
                         np.ones(5, dtype=np.int8))  # window ends before the work does
    assert not res.met and res.end_s == float("inf")
