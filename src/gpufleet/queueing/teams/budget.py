"""Dollar budgets per team: the period a spend counts in, and what happens as it runs out.

A team may have a budget per ``day``, ``week`` (ISO, from Monday) or ``month`` (calendar), in UTC.
Spend is integer micro-dollars (the ledger's unit; floats only in reports). The budget is *about
to run out* when what is spent plus the current spend rate over the **look-ahead** (default one
hour) reaches it: acting then, not at zero, is what bounds the overspend to about one look-ahead
of spend when running work is left to finish. The team's action then applies to **new** work:

* ``spot-only``: new work may run only on spot capacity (the cheaper rate keeps it going);
* ``hold``: new work waits until the next period; running work finishes;
* ``notify``: nothing is held; metrics and events say so.

Pure: the caller passes the clock, the spend so far in the period and the current rate.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

Period = Literal["day", "week", "month"]
Action = Literal["spot-only", "hold", "notify"]
MICRO = 1_000_000
DEFAULT_LOOKAHEAD_S = 3600.0


class BudgetState(enum.Enum):
    OK = "ok"
    LOW = "low"  # will run out within the look-ahead at the current rate
    EXHAUSTED = "exhausted"


@dataclass(frozen=True, slots=True)
class Budget:
    amount_micro: int
    period: Period = "month"
    action: Action = "notify"
    lookahead_s: float = DEFAULT_LOOKAHEAD_S

    def __post_init__(self) -> None:
        if self.amount_micro <= 0:
            raise ValueError("a budget must be a positive amount")
        if self.lookahead_s < 0:
            raise ValueError("lookahead_s must be ≥ 0")


def period_window(now_s: float, period: Period) -> tuple[float, float]:
    """[start, end) in epoch seconds of the UTC ``period`` containing ``now_s``."""
    now = datetime.fromtimestamp(now_s, UTC)
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        start, end = day, day + timedelta(days=1)
    elif period == "week":
        start = day - timedelta(days=now.weekday())
        end = start + timedelta(days=7)
    elif period == "month":
        start = day.replace(day=1)
        end = (start + timedelta(days=32)).replace(day=1)
    else:
        raise ValueError(f"unknown budget period {period!r}; expected day, week or month")
    return start.timestamp(), end.timestamp()


def budget_state(budget: Budget, spent_micro: int, rate_micro_per_s: float,
                 now_s: float) -> BudgetState:
    """Where the team stands; the look-ahead never reaches past the period's end (a budget that
    renews before it would run out is not low)."""
    if spent_micro >= budget.amount_micro:
        return BudgetState.EXHAUSTED
    _, end = period_window(now_s, budget.period)
    horizon = min(budget.lookahead_s, max(0.0, end - now_s))
    if spent_micro + rate_micro_per_s * horizon >= budget.amount_micro:
        return BudgetState.LOW
    return BudgetState.OK


def restriction(budget: Budget, state: BudgetState) -> Action | None:
    """The action that applies to the team's new work now, or None."""
    return None if state is BudgetState.OK else budget.action
