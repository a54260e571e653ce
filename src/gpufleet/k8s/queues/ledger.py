"""Each queue's spend this budget period, kept so that a restarted controller rebuilds it.

What a queue pays is what the controller's cost metrics charge its namespaces
(``k8s.capacity.cost``): each running pod costs its share of its node's GPUs × the node's price
per hour, from the time its containers started (``running_since``). The share is the pod's
GPU-equivalents (``queueing.teams.shares``: a fraction its milli, a MIG instance its compute
share) over the node's GPUs — the unit the quota counts, so a team is charged for exactly what
its quota is charged. A node's unallocated GPUs are charged to no queue (the fleet's idle cost
stays on ``gpufleet_node_cost_dollars``).

Spend in a period = **closed** (pods that stopped running this period, each up to the last time
it was seen running) + **live** (the running pods, each from max(start, period start) to now).
Live spend is a function of the API objects (start time, node, price), so it needs no memory;
closed spend does, and the controller writes it to the queue's status (``status.ledger``:
closed and live micro-dollars as of ``asOf``). A new controller restores
``closed = C + L − live_then``, where ``live_then`` is what the pods still running now had
accrued at ``asOf`` — recomputed from the API — so a pod is never counted twice and a pod that
stopped while no controller ran is counted up to ``asOf`` (the write interval bounds that
under-count).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gpufleet.queueing.teams.budget import Period, period_window


@dataclass(frozen=True, slots=True)
class RunningPod:
    """A running pod of a queue as the ledger charges it."""

    uid: str
    queue: str
    rate_micro_per_s: float  # its share of its node's price, micro-dollars a second
    start_s: float


@dataclass(frozen=True, slots=True)
class Saved:
    """``status.ledger`` as the last controller wrote it."""

    period_start_s: float
    as_of_s: float
    closed_micro: int
    live_micro: int


@dataclass(frozen=True, slots=True)
class Spend:
    period_start_s: float
    period_end_s: float
    closed_micro: int
    live_micro: int
    rate_micro_per_s: float

    @property
    def spent_micro(self) -> int:
        return self.closed_micro + self.live_micro


def accrued(rate: float, start_s: float, until_s: float, period_start_s: float) -> float:
    """What a pod running at ``rate`` since ``start_s`` cost in the period up to ``until_s``."""
    return rate * max(0.0, until_s - max(start_s, period_start_s))


@dataclass(slots=True)
class _Book:
    period_start_s: float
    closed: float
    live: dict[str, RunningPod] = field(default_factory=dict)
    seen_s: float = 0.0


def restored_closed(saved: Saved | None, period_start_s: float,
                    running: Iterable[RunningPod]) -> float:
    """Closed spend a new controller starts from (module docstring); 0 in a new period."""
    if saved is None or saved.period_start_s != period_start_s:
        return 0.0
    then = sum(accrued(p.rate_micro_per_s, p.start_s, saved.as_of_s, period_start_s)
               for p in running if p.start_s < saved.as_of_s)
    gone = max(0.0, saved.live_micro - then)
    return saved.closed_micro + min(gone, float(saved.live_micro))


class SpendLedger:
    """Closed spend per queue in memory, seeded from ``status.ledger`` the first time a queue
    is seen; everything else is recomputed from the pods each time."""

    def __init__(self) -> None:
        self._books: dict[str, _Book] = {}

    def observe(self, now_s: float, periods: Mapping[str, Period],
                running: Iterable[RunningPod], saved: Mapping[str, Saved | None]) -> dict[
                    str, Spend]:
        """Each queue of ``periods`` (name → its budget period) at ``now_s``."""
        by_queue: dict[str, list[RunningPod]] = {q: [] for q in periods}
        for p in running:
            if p.queue in by_queue:
                by_queue[p.queue].append(p)
        out: dict[str, Spend] = {}
        for q, period in periods.items():
            start, end = period_window(now_s, period)
            pods = by_queue[q]
            book = self._books.get(q)
            if book is None:
                book = self._books[q] = _Book(start, restored_closed(saved.get(q), start, pods))
            now_live = {p.uid: p for p in pods}
            for uid, p in book.live.items():
                if uid not in now_live:  # stopped: charged up to when it was last seen running
                    book.closed += accrued(p.rate_micro_per_s, p.start_s, book.seen_s,
                                           book.period_start_s)
            if book.period_start_s != start:  # a new period: nothing spent in it yet
                book.period_start_s, book.closed = start, 0.0
            book.live, book.seen_s = now_live, now_s
            live = sum(accrued(p.rate_micro_per_s, p.start_s, now_s, start) for p in pods)
            out[q] = Spend(start, end, round(book.closed), round(live),
                           sum(p.rate_micro_per_s for p in pods))
        for gone in [q for q in self._books if q not in periods]:
            del self._books[gone]
        return out
