from __future__ import annotations

import math

import pytest

from gpufleet.errors import InputError
from gpufleet.recovery import (
    IntervalPolicy,
    NoticeView,
    get_recovery_strategy,
    list_recovery_strategies,
    young_daly,
)


@pytest.mark.parametrize(
    ("cost", "mtbf", "expected"),
    [(30, 21600, 1138.42), (60, 3600, 657.27), (0, 3600, 0.0), (120, 7200, 1314.53)],
)
def test_young_daly_hand_worked(cost: float, mtbf: float, expected: float) -> None:
    assert young_daly(cost, mtbf) == pytest.approx(expected, abs=0.01)


def test_interval_uses_observed_rate_with_prior() -> None:
    pol = IntervalPolicy(prior_mtbf_s=6 * 3600, prior_exposure_s=6 * 3600)
    # no data: the prior MTBF (6 h)
    assert pol.mtbf(0, 0) == pytest.approx(21600)
    # 10 interruptions over 20 node-hours: (72000 + 21600) / (10 + 1) = 8509 s
    assert pol.mtbf(10, 72000) == pytest.approx(93600 / 11)
    assert pol.interval(30, 10, 72000) == pytest.approx(math.sqrt(2 * 30 * 93600 / 11))
    # more interruptions → shorter interval, clamped at the minimum
    assert pol.interval(30, 1000, 3600) == pol.min_interval_s


def view(**kw: object) -> NoticeView:
    base: dict = dict(
        job_id="j", checkpointable=True, work_done_s=3400.0, last_checkpoint_s=3000.0,
        checkpoint_cost_s=30.0, notice_s=120.0, interruptions=1,
    )
    base.update(kw)
    return NoticeView(**base)


@pytest.mark.parametrize(
    ("name", "kw", "resume", "ckpt_now", "ahead", "pinned"),
    [
        ("checkpoint-requeue", {}, 3400.0, True, True, False),  # 30 s fits in 120 s notice
        ("checkpoint-requeue", {"checkpoint_cost_s": 300.0}, 3000.0, False, True, False),
        ("checkpoint-requeue", {"checkpointable": False}, 0.0, False, True, False),
        ("restart-from-zero", {}, 0.0, False, False, False),
        ("failover-on-demand", {"interruptions": 1}, 3400.0, True, True, False),
        ("failover-on-demand", {"interruptions": 2}, 3400.0, True, True, True),
        ("failover-on-demand", {"interruptions": 2, "on_spot": False}, 3400.0, True, True, False),
    ],
)
def test_strategies_example_sequences(
    name: str, kw: dict, resume: float, ckpt_now: bool, ahead: bool, pinned: bool
) -> None:
    plan = get_recovery_strategy(name).on_notice(view(**kw))
    assert plan.resume_work_s == resume
    assert plan.checkpoint_now is ckpt_now
    assert plan.ahead_of_new_work is ahead
    assert plan.on_demand_only is pinned
    assert plan.job_id == "j"
    assert plan.from_checkpoint is (resume > 0)


def test_unknown_strategy_lists_valid_ones() -> None:
    with pytest.raises(InputError) as exc:
        get_recovery_strategy("nope")
    for name in list_recovery_strategies():
        assert name in str(exc.value)
