"""Checkpoint-interval choice per job start, hand-worked (Young/Daly, tau = sqrt(2 C M))."""

from __future__ import annotations

import math

import pytest

from gpufleet.recovery import IntervalPolicy, SpotExposure, checkpoint_interval

POLICY = IntervalPolicy()


def _tau(**kw: object) -> float:
    args: dict = dict(checkpoints=True, fixed_interval_s=None, checkpoint_cost_s=30.0,
                      node_gpus=8, gpu_mtbf_s=None, on_spot=False, reclaims=0,
                      spot_exposure_s=0.0)
    args.update(kw)
    return checkpoint_interval(POLICY, **args)


def test_no_checkpoints_or_nothing_to_insure_against_means_never() -> None:
    assert _tau(checkpoints=False, on_spot=True) == math.inf
    assert _tau() == math.inf  # on-demand, no failure rate configured


def test_fixed_interval_wins() -> None:
    assert _tau(fixed_interval_s=900.0, on_spot=True) == 900.0


def test_hardware_failures_on_demand() -> None:
    # 8 GPUs at a GPU MTBF of 3.6e6 s: node MTBF 450,000 s; sqrt(2·30·450000) = 5196.2 s
    assert _tau(gpu_mtbf_s=3.6e6) == pytest.approx(math.sqrt(2 * 30 * 450_000))


def test_spot_rate_from_the_fleets_exposure_adds_to_the_failure_rate() -> None:
    # prior: 6 h MTBF weighing 6 h; 2 reclaims over 18 h of exposure → (18+6) h / 3 = 8 h
    spot = _tau(on_spot=True, reclaims=2, spot_exposure_s=18 * 3600.0)
    assert spot == pytest.approx(math.sqrt(2 * 30 * 8 * 3600.0))
    both = _tau(on_spot=True, reclaims=2, spot_exposure_s=18 * 3600.0, gpu_mtbf_s=3.6e6)
    mtbf = 1.0 / (1.0 / (8 * 3600.0) + 8 / 3.6e6)
    assert both == pytest.approx(math.sqrt(2 * 30 * mtbf)) and both < spot


def test_exposure_counts_ready_nodes_until_they_leave() -> None:
    e = SpotExposure()
    e.node_ready(100.0)
    e.node_ready(200.0)
    assert e.at(300.0) == pytest.approx(200.0 + 100.0)
    e.node_gone(100.0)
    e.close(400.0 - 100.0)
    assert e.at(500.0) == pytest.approx(300.0 + 300.0)
