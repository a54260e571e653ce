"""Spend attribution (``queueing.teams.spend``): a node's price split pro rata of the
GPU-equivalents each team holds there, idle room included, and the ledger's integral, by hand."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpufleet.queueing.teams.spend import SpendLedger, node_rates


@pytest.mark.parametrize(
    ("usd_per_hour", "milli", "rates"),
    [
        # $3.60/h = 1,000 µ$/s; a alone with 2 of 8 GPUs busy pays for all 8 (idle included)
        (3.6, {"a": 2000}, {"a": 1000.0}),
        # 2 and 6 GPUs: 1/4 and 3/4 of the price
        (3.6, {"a": 2000, "b": 6000}, {"a": 250.0, "b": 750.0}),
        # a fraction (250 milli) and a 3g MIG instance (429 milli) against a whole GPU (1000)
        (16.74, {"f": 250, "m": 429, "w": 1000},
         {"f": 4650 * 250 / 1679, "m": 4650 * 429 / 1679, "w": 4650 * 1000 / 1679}),
        # nobody holds a GPU (booting, empty, CPU-only work): charged to no team
        (3.6, {}, {}),
        (3.6, {"a": 0}, {}),
        (0.0, {"a": 1000}, {}),  # a free node costs nothing
    ],
)
def test_node_rates(usd_per_hour: float, milli: dict[str, int], rates: dict[str, float]) -> None:
    got = node_rates(usd_per_hour, milli)
    assert got == pytest.approx(rates)
    if got:  # the split adds up to the node's price exactly
        assert sum(got.values()) == pytest.approx(usd_per_hour * 1e6 / 3600)


def ts(*a: int) -> float:
    return datetime(*a, tzinfo=UTC).timestamp()


def test_ledger_integrates_splits_and_renews_periods() -> None:
    """Team a has a daily budget, b none. From 2026-12-03 22:00: node n1 ($3.60/h = 1,000
    µ$/s) held by a alone; at 23:00 b joins n1 with as much as a (500 µ$/s each); at 00:30
    the next day n1 empties.

    a: 3,600 s × 1,000 + 3,600 s × 500 = 5.4 $ on Dec 3 (22:00–24:00), then 1,800 s × 500 =
    0.9 $ on Dec 4; b: 5,400 s × 500 = 2.7 $ in all (no period)."""
    t0 = ts(2026, 12, 3, 22)
    led = SpendLedger({"a": "day"}, start_s=t0)
    led.set_node("n1", node_rates(3.6, {"a": 1000}))
    led.advance(t0 + 3600)
    assert led.spent_micro() == {"a": 3_600_000}
    led.set_node("n1", node_rates(3.6, {"a": 1000, "b": 1000}))
    assert led.rates == pytest.approx({"a": 500.0, "b": 500.0})
    led.advance(t0 + 9000)  # 00:30, across midnight
    assert led.spent_micro() == {"a": 900_000}
    assert led.periods_spent("a") == [(ts(2026, 12, 4), pytest.approx(5_400_000)),
                                      (ts(2026, 12, 5), pytest.approx(900_000))]
    led.set_node("n1", {})
    assert led.rates == {"a": 0.0, "b": 0.0}
    led.advance(t0 + 20000)
    assert led.total == pytest.approx({"a": 6_300_000, "b": 2_700_000})
    assert led.spent_micro() == {"a": 900_000}


def test_ledger_closes_every_period_an_interval_crosses() -> None:
    """1 µ$/s held from 2026-12-03 00:00 for three days with no event in between: three closed
    days of 86,400 µ$ each, nothing yet in the fourth."""
    t0 = ts(2026, 12, 3)
    led = SpendLedger({"a": "day"}, start_s=t0)
    led.set_node("n", {"a": 1.0})
    led.advance(t0 + 3 * 86400)
    assert [s for _, s in led.periods_spent("a")] == pytest.approx([86400.0] * 3 + [0.0])


def test_ledger_refuses_time_going_back() -> None:
    led = SpendLedger({}, start_s=10.0)
    with pytest.raises(ValueError, match="backwards"):
        led.advance(5.0)
