"""Dollar budgets per team: the period a spend counts in, and what happens as it runs out.

A team may have a budget per ``day``, ``week`` (ISO, from Monday) or ``month`` (calendar), in UTC.
Spend is integer micro-dollars (the ledger's unit; floats only in reports). The budget is *about
to run out* when what is spent plus the current spend rate over the **look-ahead** (default one
hour) reaches it: acting then, not at zero, is what bounds the overspend to about one look-ahead
of spend when running work is left to finish. The team's action then applies to **new** work:

* ``spot-only``: new work may run only on spot capacity (the cheaper rate keeps it going);
* ``hold``: new work waits until the next period; running work finishes;
* ``hold-and-drain``: as ``hold``, and once the budget is **spent** the team's running work is
  evicted too (checkpointing jobs save and requeue, then wait for the period to renew) — Kueue's
  ``stopPolicy: HoldAndDrain``. ``hold`` cannot bound the overspend: a multi-day job started
  before the look-ahead keeps spending until it ends; draining bounds it to the look-ahead's
  new work plus the eviction grace (the checkpoint write);
* ``notify``: nothing is held; metrics and events say so.

Pure: the caller passes the clock, the spend so far in the period and the current rate.
:func:`exhaustion_s` says when the current rate would spend the budget, so that a driver with
no clock tick of its own (the simulator) can look again then.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

Period = Literal["day", "week", "month"]
Action = Literal["spot-only", "hold", "hold-and-drain", "notify"]
# the actions that keep a team's new work pending
HOLDING: frozenset[str] = frozenset({"hold", "hold-and-drain"})
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


@dataclass(frozen=True, slots=True)
class BudgetVerdict:
    """One team's budget now: its state, the action that applies to its new work (None: none),
    and the numbers behind it (for the pending reason, metrics and the queue's status)."""

    team: str
    state: BudgetState
    action: Action | None
    spent_micro: int
    amount_micro: int
    rate_micro_per_s: float
    period_end_s: float

    @property
    def left_micro(self) -> int:
        return max(0, self.amount_micro - self.spent_micro)

    @property
    def draining(self) -> bool:
        """Whether the team's running work must leave now (``hold-and-drain``, spent)."""
        return self.action == "hold-and-drain" and self.state is BudgetState.EXHAUSTED

    @property
    def reason(self) -> str:
        """Why the team's new work is restricted ("" when it is not)."""
        if self.action is None:
            return ""
        spent, amount = self.spent_micro / MICRO, self.amount_micro / MICRO
        how = "spent" if self.state is BudgetState.EXHAUSTED else (
            f"will run out within the look-ahead at ${self.rate_micro_per_s * 3600 / MICRO:,.2f}"
            "/h")
        what = {"hold": "new work waits until the period renews",
                "hold-and-drain": "new work waits until the period renews"
                + ("; running work is evicted" if self.draining else ""),
                "spot-only": "new work runs on spot only",
                "notify": "notified only"}[self.action]
        return (f"team {self.team}: budget ${spent:,.2f} of ${amount:,.2f} {how}; {what}")


def budget_verdicts(budgets: Mapping[str, Budget], spent_micro: Mapping[str, int],
                    rate_micro_per_s: Mapping[str, float], now_s: float
                    ) -> dict[str, BudgetVerdict]:
    """Every budgeted team's verdict now — the one call both drivers make.

    ``spent_micro``: what each team has spent so far in its budget's current period (the
    simulator integrates it with :class:`~gpufleet.queueing.teams.spend.SpendLedger`; the live
    driver sums its cost records from ``period_window(now_s, budget.period)[0]``);
    ``rate_micro_per_s``: its spend rate now (:func:`~gpufleet.queueing.teams.spend.node_rates`
    summed over its nodes). A team missing from either counts 0."""
    out: dict[str, BudgetVerdict] = {}
    for team, b in budgets.items():
        spent = int(spent_micro.get(team, 0))
        rate = float(rate_micro_per_s.get(team, 0.0))
        st = budget_state(b, spent, rate, now_s)
        out[team] = BudgetVerdict(team, st, restriction(b, st), spent, b.amount_micro, rate,
                                  period_window(now_s, b.period)[1])
    return out


def restrictions(verdicts: Mapping[str, BudgetVerdict]) -> dict[str, BudgetVerdict]:
    """The verdicts that change what a team's new work (or, draining, its running work) may do
    (``hold``, ``hold-and-drain``, ``spot-only``); ``notify`` is for metrics and events only,
    so the scheduling pass never sees it."""
    return {t: v for t, v in verdicts.items()
            if v.action in ("hold", "hold-and-drain", "spot-only")}


def exhaustion_s(budget: Budget, spent_micro: int, rate_micro_per_s: float,
                 now_s: float) -> float | None:
    """When the budget is spent if the rate stays as it is: the first whole second at which
    ``spent + rate × (t − now)`` reaches the amount; ``now_s`` when it is spent already; None
    when nothing is spent (rate 0) or the period renews first.

    Example: $10 budget, $9 spent, $3.6/h (1,000 micro-$/s), now 0 → 1,000 s."""
    left = budget.amount_micro - spent_micro
    if left <= 0:
        return now_s
    if rate_micro_per_s <= 0:
        return None
    at = now_s + math.ceil(left / rate_micro_per_s)
    return at if at < period_window(now_s, budget.period)[1] else None
