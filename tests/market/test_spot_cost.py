"""The spot cost rule and the online reclaim hazard, worked by hand (``market.spot_cost``)."""

from __future__ import annotations

import math

import pytest

from gpufleet.market.spot_cost import (
    INF,
    ReclaimHazard,
    SpotRisk,
    interval_s,
    reclaim_loss_s,
    spot_cost_per_work_hour,
)

TEN_H = SpotRisk(remaining_s=36_000.0, checkpoint_cost_s=30.0, restart_overhead_s=120.0,
                 checkpoints=True)


@pytest.mark.parametrize(
    ("hazard", "risk", "expected"),
    [
        # λ 0.5/h: τ = sqrt(2·30·7200) = 657.27 s; 0.918·(1 + 30/657.27) = 0.95990;
        # 0.5 · (328.63 + 120 + 180)/3600 · 3.06 = 0.26717 → 1.22707 < 3.06: spot
        (0.5, TEN_H, 1.22707),
        # λ 20/h (a reclaim every 3 min): τ = sqrt(2·30·180) = 103.92 s;
        # 0.918·(1 + 30/103.92) = 1.18301; 20 · (51.96 + 300)/3600 · 3.06 = 5.98333 → 7.16634
        (20.0, TEN_H, 7.16634),
        # 2 min of work left caps τ at 120 s: 0.918·(1 + 30/120) = 1.1475;
        # 0.5 · (60 + 300)/3600 · 3.06 = 0.153 → 1.3005
        (0.5, SpotRisk(120.0, 30.0, 120.0, True), 1.3005),
        # no checkpoints: ruled out whatever the hazard
        (0.01, SpotRisk(36_000.0, 30.0, 120.0, False), INF),
        # a deadline whose slack (600 s) is below one reclaim's loss (628.6 s): ruled out
        (0.5, SpotRisk(36_000.0, 30.0, 120.0, True, slack_s=600.0), INF),
        # ... and with 700 s of slack it is the first case again
        (0.5, SpotRisk(36_000.0, 30.0, 120.0, True, slack_s=700.0), 1.22707),
        # no reclaims at all: the spot price alone (τ = the work left: 30/36000 writing)
        (0.0, TEN_H, 0.918 * (1 + 30 / 36_000)),
    ],
)
def test_spot_cost_per_work_hour(hazard: float, risk: SpotRisk, expected: float) -> None:
    got = spot_cost_per_work_hour(0.918, 3.06, hazard, risk, 180.0)
    if math.isinf(expected):
        assert math.isinf(got)
    else:
        assert got == pytest.approx(expected, abs=5e-5)


def _v(v: float, sensitive: bool = False) -> SpotRisk:
    return SpotRisk(36_000.0, 30.0, 120.0, True, value_of_time=v, latency_sensitive=sensitive)


@pytest.mark.parametrize(
    ("hazard", "risk", "expected", "choice"),
    [
        # the same inputs as above, the reclaim's loss priced at od + v (3.06 + v $/GPU-h).
        # λ 0.5, v 0: 0.95990 + 0.5 · 628.63/3600 · 3.06 = 1.22707 < 3.06: spot
        (0.5, _v(0.0), 1.22707, "spot"),
        # λ 0.5, v 10: 0.95990 + 0.5 · 628.63/3600 · 13.06 = 0.95990 + 1.14027 = 2.10017 < 3.06:
        # still spot (a zone reclaiming every 2 h costs little delay)
        (0.5, _v(10.0), 2.10017, "spot"),
        # λ 2 (τ = sqrt(2·30·1800) = 328.63 s, loss 164.32 + 300 = 464.32 s), v 0:
        # 0.918 · (1 + 30/328.63) = 1.00180; 2 · 464.32/3600 · 3.06 = 0.78934 → 1.79114: spot
        (2.0, _v(0.0), 1.79114, "spot"),
        # ... v 10: 1.00180 + 2 · 464.32/3600 · 13.06 = 1.00180 + 3.36888 = 4.37068 > 3.06:
        # on-demand — the delay flips the choice
        (2.0, _v(10.0), 4.37068, "on-demand"),
        # latency-sensitive without a value of time: never spot, whatever the hazard
        (0.0, _v(0.0, sensitive=True), INF, "on-demand"),
        # latency-sensitive with v 10: the rule with its v decides (the second row)
        (0.5, _v(10.0, sensitive=True), 2.10017, "spot"),
        (2.0, _v(10.0, sensitive=True), 4.37068, "on-demand"),
    ],
)
def test_value_of_time_prices_the_reclaim_loss_at_od_plus_v(
        hazard: float, risk: SpotRisk, expected: float, choice: str) -> None:
    got = spot_cost_per_work_hour(0.918, 3.06, hazard, risk, 180.0)
    if math.isinf(expected):
        assert math.isinf(got)
    else:
        assert got == pytest.approx(expected, abs=5e-5)
    assert ("spot" if got < 3.06 else "on-demand") == choice


@pytest.mark.parametrize("hazard", [0.0, 0.5, 2.0, 20.0])
def test_value_of_time_zero_is_the_rule_without_it_bit_for_bit(hazard: float) -> None:
    """The delay term is added, never folded in: with v = 0 the figure is the same float."""
    spot, od, lam, p = 0.918, 3.06, hazard, 180.0
    loss = reclaim_loss_s(TEN_H, lam, p)
    tau = interval_s(TEN_H, lam)
    before = spot * (1.0 + 30.0 / tau) + lam * loss / 3600.0 * od
    assert spot_cost_per_work_hour(spot, od, lam, _v(0.0), p) == before


def test_reclaim_loss_is_half_an_interval_plus_restart_and_provisioning() -> None:
    assert interval_s(TEN_H, 0.5) == pytest.approx(657.267, abs=1e-3)
    assert reclaim_loss_s(TEN_H, 0.5, 180.0) == pytest.approx(328.634 + 300, abs=1e-3)
    # without checkpoints the rework is half the run
    no_ckpt = SpotRisk(1000.0, 30.0, 120.0, False)
    assert reclaim_loss_s(no_ckpt, 0.5, 180.0) == 500 + 300


def test_hazard_is_the_gamma_poisson_posterior_mean_per_type_and_zone() -> None:
    h = ReclaimHazard()  # prior: 1 reclaim in 6 node-hours
    assert h.rate_per_h("p3.2xlarge", "us-east-1a", 0.0) == pytest.approx(1 / 6)
    h.node_ready("p3.2xlarge", "us-east-1a", 0.0)
    h.node_ready("p3.2xlarge", "us-east-1a", 3600.0)
    # at 2 h: 2 + 1 node-hours exposed, no reclaim: 1 / (6 + 3)
    assert h.rate_per_h("p3.2xlarge", "us-east-1a", 7200.0) == pytest.approx(1 / 9)
    h.node_gone("p3.2xlarge", "us-east-1a", 0.0, 7200.0, reclaimed=True)
    # the reclaimed node closed at 2 h; the other is still up: at 3 h 2 + 2 node-hours
    assert h.reclaims("p3.2xlarge", "us-east-1a") == 1
    assert h.rate_per_h("p3.2xlarge", "us-east-1a", 10_800.0) == pytest.approx(2 / 10)
    h.node_gone("p3.2xlarge", "us-east-1a", 3600.0, 10_800.0, reclaimed=False)
    # nothing up any more: the rate stops moving
    assert h.rate_per_h("p3.2xlarge", "us-east-1a", 99_999.0) == pytest.approx(2 / 10)
    # other zones and types keep the prior
    assert h.rate_per_h("p3.2xlarge", "us-east-1b", 10_800.0) == pytest.approx(1 / 6)
    assert h.rate_per_h("p3.8xlarge", "us-east-1a", 10_800.0) == pytest.approx(1 / 6)
