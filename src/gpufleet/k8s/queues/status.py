"""A ``GpuQueue``'s status, as the controller renders it and writes it.

Written by the leading replica only, and only when something a reader sees changed (usage,
borrowed, the Valid condition, the budget state) — a change of the spend in cents or of the
spend rate alone at most every ``spend_interval_s``, so a large fleet whose spend moves every
second is not one write a second per queue — plus the ledger (``ledger``) at least every
``ledger_interval_s`` while the queue spends. Every write is a JSON merge patch carrying the
``resourceVersion`` the controller read, so a write made on a stale read is refused (409) and
the next cycle re-reads; nothing else of the object is touched (the ``status`` subresource).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gpufleet.k8s.queues.ledger import Saved, Spend
from gpufleet.k8s.queues.spec import Parsed
from gpufleet.k8s.translate.pods import parse_time
from gpufleet.queueing.teams.budget import MICRO, BudgetState, budget_state
from gpufleet.queueing.teams.quota import QuotaBook
from gpufleet.queueing.teams.settings import QueueSettings

VALID = "Valid"


def iso(ts: float, micro: bool = False) -> str:
    """RFC 3339; ``micro``: to the microsecond (the ledger's ``asOf``, which the restore
    formula multiplies by the running pods' rates: whole seconds would miscount up to a
    second of them)."""
    return datetime.fromtimestamp(ts, UTC).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


def dollars(micro: float) -> str:
    return f"{micro / MICRO:.2f}"


@dataclass(frozen=True, slots=True)
class QueueView:
    """What the controller knows of one queue this cycle (status and metrics read it)."""

    name: str
    parsed: Parsed
    settings: QueueSettings | None  # the spec in force (the last valid one), None: none
    nominal_milli: int
    cohort: str
    usage_milli: int
    borrowed_milli: int
    pending: int
    spend: Spend | None
    budget_micro: int | None
    budget_state: BudgetState | None


def view_of(p: Parsed, s: QueueSettings | None, book: QuotaBook, pending: int,
            spend: Spend | None, now_s: float) -> QueueView:
    budget = s.budget.build() if s is not None and s.budget is not None else None
    state = None
    if budget is not None and spend is not None:
        state = budget_state(budget, spend.spent_micro, spend.rate_micro_per_s, now_s)
    t = book.teams.get(p.name)
    return QueueView(
        p.name, p, s, t.nominal_milli if t else 0, (t.cohort or "") if t else "",
        book.usage.get(p.name, 0), book.borrowed(p.name), pending, spend,
        None if budget is None else budget.amount_micro, state)


def saved_ledger(obj: Mapping[str, Any]) -> Saved | None:
    led = (obj.get("status") or {}).get("ledger") or {}
    try:
        return Saved(parse_time(led["periodStart"]), parse_time(led["asOf"]),
                     int(led["spentMicro"]), float(led["rateMicroPerS"]))
    except (KeyError, TypeError, ValueError):
        return None


def condition(obj: Mapping[str, Any], v: QueueView, now_s: float) -> dict[str, Any]:
    """The Valid condition; its transition time moves only when its status does."""
    p = v.parsed
    ok = p.error is None
    cond = {"type": VALID, "status": "True" if ok else "False",
            "reason": "Accepted" if ok else "InvalidSpec",
            "message": "" if ok else p.error, "observedGeneration": p.generation}
    old = next((c for c in (obj.get("status") or {}).get("conditions") or ()
                if c.get("type") == VALID), None)
    same = old is not None and old.get("status") == cond["status"]
    cond["lastTransitionTime"] = old.get("lastTransitionTime") if same and old else iso(now_s)
    return cond


def render(obj: Mapping[str, Any], v: QueueView, now_s: float) -> dict[str, Any]:
    """The status to show, without the ledger (see :func:`ledger`)."""
    out: dict[str, Any] = {"observedGeneration": v.parsed.generation,
                           "conditions": [condition(obj, v, now_s)]}
    if v.settings is None:
        return out
    out["usage"] = v.usage_milli / 1000
    out["borrowed"] = v.borrowed_milli / 1000
    if v.spend is not None:
        out["spend"] = dollars(v.spend.spent_micro)
    if v.budget_micro is not None and v.spend is not None:
        out["budgetLeft"] = dollars(max(0, v.budget_micro - v.spend.spent_micro))
        out["budgetState"] = v.budget_state.value if v.budget_state else "ok"
    return out


def ledger(spend: Spend, now_s: float, fair_share: float | None = None) -> dict[str, Any]:
    """``status.ledger``: the spend integral and (``fair_share``) the queue's decayed usage
    history in milli-GPU·seconds, both as of ``asOf`` — what a restarted controller goes on
    from (``saved_ledger``, ``saved_fair_share``)."""
    out: dict[str, Any] = {"periodStart": iso(spend.period_start_s),
                           "asOf": iso(now_s, micro=True), "spentMicro": spend.spent_micro,
                           "rateMicroPerS": spend.rate_micro_per_s}
    if fair_share is not None:
        out["decayedGpuMilliSeconds"] = fair_share
    return out


def saved_fair_share(obj: Mapping[str, Any]) -> tuple[float, float] | None:
    """(decayed milli-GPU·seconds, as of) from ``status.ledger``; None when absent or bad."""
    led = (obj.get("status") or {}).get("ledger") or {}
    try:
        return float(led["decayedGpuMilliSeconds"]), parse_time(led["asOf"])
    except (KeyError, TypeError, ValueError):
        return None


def _without(status: Mapping[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in status.items() if k not in keys}


def needs_write(current: Mapping[str, Any], want: Mapping[str, Any], spend: Spend | None,
                now_s: float, last_write_s: float, spend_interval_s: float,
                ledger_interval_s: float) -> bool:
    """Whether to write ``want`` over ``current`` (module docstring)."""
    if _without(current, "ledger", "spend", "budgetLeft") != _without(want, "spend",
                                                                       "budgetLeft"):
        return True
    due = now_s - last_write_s
    led = current.get("ledger") or {}
    moved = (current.get("spend"), current.get("budgetLeft")) != (
        want.get("spend"), want.get("budgetLeft"))
    if spend is not None and led.get("rateMicroPerS") != spend.rate_micro_per_s:
        moved = True  # a pod started or stopped (or no ledger yet): what a restart goes on with
    if moved:
        return due >= spend_interval_s
    if spend is not None and spend.rate_micro_per_s > 0:
        return due >= ledger_interval_s
    return False
