"""Each queue's spend this budget period, integrated cycle by cycle and kept in its status so
that a restarted controller goes on from it.

**What a queue pays** — the attribution rule of the teams model (``docs/teams.md``; the
simulator's ``queueing.teams.spend.node_rates``): a node costs its price per hour (the cloud's
offering for a spot node, the list price on demand); while pods hold GPU on it, the **whole**
price — idle GPUs included — is split pro rata of the GPU-equivalents each holds
(``queueing.teams.shares``: a fraction by its milli, a MIG instance by its compute share), and a
queue pays the part of its namespaces' pods. Pods no queue manages take their part too (charged
to no queue), so a queue never pays for another tenant's work; a node nobody holds GPU on is
charged to no one (``gpufleet_node_cost_dollars`` still counts it). :func:`queue_rates` in
``usage`` computes it from the snapshot.

**Integration.** Rates are read every cycle and held constant until the next (the error is one
cycle's change of rate); a queue's spend crosses into a new period at the period's UTC boundary
and starts again from 0 there.

**Restart.** The integral needs memory, so the controller writes it to the queue's status
(``status.ledger``: ``spentMicro`` and ``rateMicroPerS`` as of ``asOf``, in the period that
started at ``periodStart``). A new controller goes on from ``spentMicro + rateMicroPerS × (now −
asOf)`` — the spend up to the write, plus the rate then over the time no controller ran — so a
kill -9 costs at most (change of rate during the outage) × (outage); a write older than the
period starts the period at 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpufleet.queueing.teams.budget import Period, period_window


@dataclass(frozen=True, slots=True)
class Saved:
    """``status.ledger`` as the last controller wrote it."""

    period_start_s: float
    as_of_s: float
    spent_micro: int
    rate_micro_per_s: float


@dataclass(frozen=True, slots=True)
class Spend:
    """A queue's spend in its current budget period, and its rate now (micro-dollars)."""

    period_start_s: float
    period_end_s: float
    spent_micro: int
    rate_micro_per_s: float


def restored(saved: Saved | None, period_start_s: float, now_s: float) -> float:
    """Where a new controller's integral starts (module docstring); 0 in a new period."""
    if saved is None or saved.period_start_s != period_start_s:
        return 0.0
    return saved.spent_micro + saved.rate_micro_per_s * max(0.0, now_s - saved.as_of_s)


@dataclass(slots=True)
class _Book:
    period_start_s: float
    period_end_s: float
    spent: float
    rate: float
    last_s: float


class SpendLedger:
    """Each queue's integral in memory, seeded from ``status.ledger`` the first time the queue
    is seen."""

    def __init__(self) -> None:
        self._books: dict[str, _Book] = {}

    def observe(self, now_s: float, periods: Mapping[str, Period], rates: Mapping[str, float],
                saved: Mapping[str, Saved | None]) -> dict[str, Spend]:
        """Each queue of ``periods`` (name → its budget period) at ``now_s``, its rate from now
        on ``rates[queue]`` (micro-dollars a second; absent: 0)."""
        out: dict[str, Spend] = {}
        for q, period in periods.items():
            book = self._books.get(q)
            if book is None:
                start, end = period_window(now_s, period)
                book = self._books[q] = _Book(start, end, restored(saved.get(q), start, now_s),
                                              0.0, now_s)
            t = min(book.last_s, now_s)
            while now_s >= book.period_end_s:  # the period renewed since the last cycle
                book.period_start_s, book.period_end_s = period_window(book.period_end_s,
                                                                       period)
                book.spent, t = 0.0, book.period_start_s
            book.spent += book.rate * (now_s - t)
            book.rate, book.last_s = float(rates.get(q, 0.0)), now_s
            out[q] = Spend(book.period_start_s, book.period_end_s, round(book.spent), book.rate)
        for gone in [q for q in self._books if q not in periods]:
            del self._books[gone]
        return out
