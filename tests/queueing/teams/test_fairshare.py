"""Decayed usage and dominant share, with the exponentials worked by hand."""

from __future__ import annotations

import math

import pytest

from gpufleet.queueing.teams.fairshare import (
    UsageHistory,
    carried,
    decay,
    dominant_share,
    fair_order,
)

H = 3600.0  # one-hour half-life keeps the numbers readable


def test_constant_use_integrates_exactly() -> None:
    h = UsageHistory(half_life_s=H)
    h.advance(0.0, {})
    h.advance(H, {"a": {"gpu": 2.0}})
    # ∫₀^H 2·e^{-k(H-s)} ds = 2(1 - ½)/k with k = ln2/H → H/ln2
    assert h.decayed["a"]["gpu"] == pytest.approx(H / math.log(2))


def test_one_half_life_halves_history() -> None:
    h = UsageHistory(half_life_s=H)
    h.advance(H, {"a": {"gpu": 2.0}})
    before = h.decayed["a"]["gpu"]
    h.advance(2 * H, {})
    assert h.decayed["a"]["gpu"] == pytest.approx(before / 2)


def test_steps_compose_like_one_step() -> None:
    one, two = UsageHistory(half_life_s=H), UsageHistory(half_life_s=H)
    one.advance(1800.0, {"a": {"gpu": 1.0}})
    two.advance(600.0, {"a": {"gpu": 1.0}})
    two.advance(1800.0, {"a": {"gpu": 1.0}})
    assert two.decayed["a"]["gpu"] == pytest.approx(one.decayed["a"]["gpu"])


@pytest.mark.parametrize(
    ("usage", "weights", "order"),
    [
        # gpu shares 0.5 vs 0.25: b first
        ({"a": {"gpu": 4.0}, "b": {"gpu": 2.0}}, {}, ["b", "a"]),
        # a weighs 4: 0.5/4 = 0.125 < 0.25: a first
        ({"a": {"gpu": 4.0}, "b": {"gpu": 2.0}}, {"a": 4.0}, ["a", "b"]),
        # dominant resource: b's CPU share 0.9 beats its GPU share 0.1 → a (0.5) first
        ({"a": {"gpu": 4.0, "cpu": 10.0}, "b": {"gpu": 0.8, "cpu": 90.0}}, {}, ["a", "b"]),
        # a team never seen has share 0 and goes first; ties by name
        ({"a": {"gpu": 1.0}}, {}, ["b", "c", "a"]),
    ],
)
def test_fair_order(usage: dict[str, dict[str, float]], weights: dict[str, float],
                    order: list[str]) -> None:
    h = UsageHistory(half_life_s=H)
    h.advance(H, usage)
    gain = H / 2 / math.log(2)  # per unit in use over one half-life
    cap = {"gpu": 8.0 * gain, "cpu": 100.0 * gain}
    assert fair_order(["c", "b", "a"] if len(order) == 3 else ["a", "b"], h, cap,
                      weights) == order
    assert dominant_share(h, "zzz", cap) == 0.0


def test_time_cannot_go_backwards() -> None:
    h = UsageHistory(half_life_s=H)
    h.advance(10.0, {})
    with pytest.raises(ValueError, match="time went backwards"):
        h.advance(5.0, {})


@pytest.mark.parametrize(("saved", "dt", "usage", "want"), [
    (1000.0, 0.0, 5.0, 1000.0),  # no time passed: as saved
    (1000.0, 7 * 86400.0, 0.0, 500.0),  # one half-life, nothing running: halved
    (0.0, 7 * 86400.0, 1.0, 7 * 86400.0 / 2 / math.log(2)),  # a rate of 1 over one half-life
    (1000.0, -5.0, 3.0, 1000.0),  # a clock behind the saved asOf: nothing decays or adds
])
def test_carried_over_an_outage(saved: float, dt: float, usage: float, want: float) -> None:
    assert carried(saved, 100.0, 100.0 + dt, usage, 7 * 86400.0) == pytest.approx(want)


def test_carried_is_what_advance_would_have_added() -> None:
    """A restart that finds the same usage running as before it ends where an uninterrupted
    history would have."""
    h = UsageHistory(3600.0, last_s=0.0)
    h.advance(100.0, {"a": {"gpu": 2.0}})
    saved = h.decayed["a"]["gpu"]
    h.advance(700.0, {"a": {"gpu": 2.0}})
    assert carried(saved, 100.0, 700.0, 2.0, 3600.0) == pytest.approx(h.decayed["a"]["gpu"])
    assert decay(3600.0, 3600.0)[0] == pytest.approx(0.5)
