"""Budget periods in UTC and the state a spend puts a team in, worked by hand."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpufleet.queueing.teams.budget import (
    MICRO,
    Budget,
    BudgetState,
    budget_state,
    budget_verdicts,
    exhaustion_s,
    period_window,
    restriction,
    restrictions,
)


def ts(*a: int) -> float:
    return datetime(*a, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("now", "period", "start", "end"),
    [
        (ts(2026, 12, 3, 22, 51), "day", ts(2026, 12, 3), ts(2026, 12, 4)),
        # 2026-12-03 is a Thursday: the ISO week began Monday 2026-11-30
        (ts(2026, 12, 3, 22, 51), "week", ts(2026, 11, 30), ts(2026, 12, 7)),
        (ts(2026, 12, 3, 22, 51), "month", ts(2026, 12, 1), ts(2027, 1, 1)),
        (ts(2028, 2, 29, 12), "month", ts(2028, 2, 1), ts(2028, 3, 1)),  # leap February
    ],
)
def test_period_window(now: float, period: str, start: float, end: float) -> None:
    assert period_window(now, period) == (start, end)  # type: ignore[arg-type]


B = Budget(amount_micro=1000 * MICRO, period="day", action="spot-only")  # $1,000 a day


@pytest.mark.parametrize(
    ("spent", "rate_per_h", "now", "state"),
    [
        (500, 100, ts(2026, 12, 3, 12), BudgetState.OK),  # 500 + 100 < 1000
        (950, 100, ts(2026, 12, 3, 12), BudgetState.LOW),  # 950 + 100 ≥ 1000 within the hour
        (1000, 0, ts(2026, 12, 3, 12), BudgetState.EXHAUSTED),
        # 23:30: only half an hour is left in the day, 950 + 50 = 1000 → still low
        (950, 100, ts(2026, 12, 3, 23, 30), BudgetState.LOW),
        # 23:45: 15 min left, 950 + 25 < 1000 → the budget renews first
        (950, 100, ts(2026, 12, 3, 23, 45), BudgetState.OK),
    ],
)
def test_budget_state(spent: int, rate_per_h: float, now: float, state: BudgetState) -> None:
    got = budget_state(B, spent * MICRO, rate_per_h * MICRO / 3600, now)
    assert got is state
    assert restriction(B, got) == (None if state is BudgetState.OK else "spot-only")


def test_bad_budget_is_refused() -> None:
    with pytest.raises(ValueError, match="positive amount"):
        Budget(amount_micro=0)
    with pytest.raises(ValueError, match="unknown budget period 'year'"):
        period_window(0.0, "year")  # type: ignore[arg-type]


def test_budget_verdicts_per_team() -> None:
    """Three teams on one clock (2026-12-03 12:00): ``s`` spot-only $1,000/day at $950 and
    $100/h → low, spot-only; ``h`` hold $200/day at $250 → exhausted, hold; ``n`` notify
    $1,000/day at $10 and $1/h → ok. A team with no spend entry counts 0."""
    budgets = {"s": B, "h": Budget(200 * MICRO, "day", "hold"),
               "n": Budget(1000 * MICRO, "day", "notify"), "z": Budget(5 * MICRO, "day", "hold")}
    now = ts(2026, 12, 3, 12)
    got = budget_verdicts(budgets, {"s": 950 * MICRO, "h": 250 * MICRO, "n": 10 * MICRO},
                          {"s": 100 * MICRO / 3600, "n": MICRO / 3600}, now)
    assert {t: (v.state, v.action) for t, v in got.items()} == {
        "s": (BudgetState.LOW, "spot-only"), "h": (BudgetState.EXHAUSTED, "hold"),
        "n": (BudgetState.OK, None), "z": (BudgetState.OK, None)}
    assert got["h"].left_micro == 0 and got["s"].left_micro == 50 * MICRO
    assert got["s"].period_end_s == ts(2026, 12, 4)
    assert got["h"].reason == ("team h: budget $250.00 of $200.00 spent; new work waits until "
                               "the period renews")
    assert got["s"].reason == ("team s: budget $950.00 of $1,000.00 will run out within the "
                               "look-ahead at $100.00/h; new work runs on spot only")
    assert got["n"].reason == ""
    assert set(restrictions(got)) == {"s", "h"}
    # notify restricts nothing even when exhausted
    ex = budget_verdicts({"n": budgets["n"]}, {"n": 2000 * MICRO}, {}, now)
    assert ex["n"].action == "notify" and restrictions(ex) == {}


@pytest.mark.parametrize(
    ("spent", "rate_per_h", "now", "at"),
    [
        # $1,000/day, $900 spent at $100/h from 12:00 → spent at 13:00
        (900, 100, ts(2026, 12, 3, 12), ts(2026, 12, 3, 13)),
        # $1 left at $7/h: 514.28… s → the next whole second, 515 s
        (999, 7, ts(2026, 12, 3, 12), ts(2026, 12, 3, 12) + 515),
        (1000, 0, ts(2026, 12, 3, 12), ts(2026, 12, 3, 12)),  # spent already: now
        (1200, 50, ts(2026, 12, 3, 12), ts(2026, 12, 3, 12)),
        (900, 0, ts(2026, 12, 3, 12), None),  # nothing running: never
        # $100 left at $10/h would take 10 h, but the day renews at midnight (2 h away)
        (900, 10, ts(2026, 12, 3, 22), None),
    ],
)
def test_exhaustion_s(spent: int, rate_per_h: float, now: float, at: float | None) -> None:
    assert exhaustion_s(B, spent * MICRO, rate_per_h * MICRO / 3600, now) == at


@pytest.mark.parametrize(
    ("spent", "rate_per_h", "state", "action", "draining", "why"),
    [
        (1200, 0, BudgetState.EXHAUSTED, "hold-and-drain", True,
         "team d: budget $1,200.00 of $1,000.00 spent; new work waits until the period renews;"
         " running work is evicted"),
        # low, not spent: new work is held, running work stays
        (950, 100, BudgetState.LOW, "hold-and-drain", False,
         "team d: budget $950.00 of $1,000.00 will run out within the look-ahead at $100.00/h;"
         " new work waits until the period renews"),
        (1200, 0, BudgetState.EXHAUSTED, "hold", False,
         "team d: budget $1,200.00 of $1,000.00 spent; new work waits until the period renews"),
        (500, 100, BudgetState.OK, None, False, ""),
    ],
)
def test_hold_and_drain_verdict(spent: int, rate_per_h: float, state: BudgetState,
                                action: str | None, draining: bool, why: str) -> None:
    """``hold-and-drain`` holds new work from the look-ahead on, as ``hold`` does, and drains
    running work only once the budget is spent; a plain ``hold`` never drains."""
    kind = "hold" if action == "hold" else "hold-and-drain"
    b = Budget(1000 * MICRO, "day", kind)  # type: ignore[arg-type]
    now = ts(2026, 12, 3, 12)
    v = budget_verdicts({"d": b}, {"d": spent * MICRO}, {"d": rate_per_h * MICRO / 3600},
                        now)["d"]
    assert (v.state, v.action, v.draining, v.reason) == (state, action, draining, why)
    assert set(restrictions({"d": v})) == (set() if action is None else {"d"})
