"""When the autoscaler's scan runs, and which of its steps are due (Cluster Autoscaler's loop).

A scan is scale-up (pending pods → ``Launch``es) followed by disruption (emptiness and
consolidation → a ``Command``). A live controller could scan every ``interval_s`` for ever; a
simulated one must not (months of idle ten-second ticks), and neither needs to: a scan can only
change its answer after something it reads changed. So the driver reports what happened
(demand changed, a node became ready, empty, underused or went away) and asks this clock *when*
a scan is next wanted; it schedules that time (aligned to the scan grid) and calls back when it
comes. Inside a scan the clock says whether scale-up is due (new demand, or a pod crossed the
wait trigger) and whether disruption is (a node empty for ``unneeded_s``, or one underused that
long with something new to try since the last consolidation, at most once per ``recheck_s``).

Example (interval 10 s, unneeded 600 s): a job arrives at t = 3 → scan at 10; a node turns empty
at 50 → scan at 650, when emptiness may delete it. Pure bookkeeping: times come in as arguments.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum

INF = float("inf")


@dataclass(frozen=True, slots=True)
class ScanConfig:
    """The fleet settings the scan timing reads (a scenario's, or a live controller's)."""

    autoscaling: bool
    interval_s: float
    unneeded_s: float
    max_pending_wait_s: float
    consolidation: bool
    recheck_s: float


class Disrupt(Enum):
    """Which disruption look a scan takes: none, empty nodes only, or consolidation too."""

    NONE = "none"
    EMPTY = "empty"
    UNDERUSED = "underused"


class ConsolidationLook:
    """When consolidation is computed: the one rule both drivers follow.

    A look is due when some node has been underused for ``unneeded_s`` (``due_n`` of them),
    something new could change its answer since the last look — a pod left a node
    (``pod_moved``: room freed, or a candidate lost a pod) or more nodes are due than then
    (more candidates can make multi-node consolidation possible) — **and** the last look is at
    least ``recheck_s`` old. Both, not either: a look over the same candidates with no pod gone
    from any node finds no more room than the last one did, so it would repeat its answer, and
    the interval bounds the cost of the search (multi-node consolidation tries up to 20
    candidate prefixes) while pods churn. (Karpenter instead looks on any cluster change and at
    least every 5 minutes; the live driver used to look every ``recheck_s`` even with nothing
    new, the simulator never did — one rule now, the simulator's.)

    Example (recheck 300 s): looks at 600 (first); at 610 nothing new → none; a pod leaves at
    620 → still none at 620 (recheck), the next at 900.
    """

    def __init__(self, recheck_s: float) -> None:
        self.recheck_s = recheck_s
        self.pods_moved = True  # a pod left a node since the last look
        self.last = -INF  # when the last look ran
        self.last_due_n = 0  # how many nodes were due for it then

    def pod_moved(self) -> None:
        self.pods_moved = True

    def due(self, now: float, due_n: int) -> bool:
        """Whether to look now (and, if so, that it counts as the look)."""
        fresh = self.pods_moved or due_n > self.last_due_n
        if due_n > 0 and fresh and now - self.last >= self.recheck_s:
            self.last = now
            self.pods_moved = False
            self.last_due_n = due_n
            return True
        return False

    def next_at(self, now: float) -> float:
        """When to ask again about a look refused now: ``recheck_s`` after now, or after the
        last look if that is later (the simulator's rescan time)."""
        return max(now, self.last) + self.recheck_s


class ScanClock:
    """The scan schedule and the memory that lets a scan skip a look that cannot change."""

    def __init__(self, cfg: ScanConfig) -> None:
        self.cfg = cfg
        self._scheduled: set[float] = set()
        self.demand_changed = True  # pending pods or booting capacity changed since scale-up
        self.last_scale_up = -INF
        self.look = ConsolidationLook(cfg.recheck_s)

    # -- the schedule ------------------------------------------------------------------------
    def want(self, t: float | None, now: float) -> float | None:
        """A scan wanted at ``t`` or later: the grid time to schedule, or None when one is
        already scheduled then (or ``t`` is None)."""
        if t is None:
            return None
        iv = self.cfg.interval_s
        at = math.ceil(t / iv) * iv
        if at < now:
            at = now
        if at in self._scheduled:
            return None
        self._scheduled.add(at)
        return at

    def fired(self, at: float) -> None:
        """The scan scheduled for ``at`` runs now."""
        self._scheduled.discard(at)

    # -- what happened (each returns when a scan is wanted, or None) --------------------------
    def demand(self, now: float) -> float | None:
        """A pod was queued or its request changed (a pin): scale-up must look again."""
        self.demand_changed = True
        return self.want(now, now) if self.cfg.autoscaling else None

    def capacity_booting_changed(self) -> None:
        """A booting node became ready or was cancelled: what absorbs pending pods changed."""
        self.demand_changed = True

    def node_ready(self, now: float) -> float | None:
        """A node joined (empty): emptiness may remove it after ``unneeded_s``."""
        self.demand_changed = True
        return self.want(now + self.cfg.unneeded_s, now) if self.cfg.autoscaling else None

    def node_empty(self, now: float, fallback: bool) -> float | None:
        """A node's last pod left. A fixed fleet scans only for an empty on-demand fallback
        node (spot rebalance may swap it for spot)."""
        if self.cfg.autoscaling:
            return self.want(now + self.cfg.unneeded_s, now)
        return self.want(now, now) if fallback else None

    def node_underused(self, now: float) -> float | None:
        """A node fell below the utilisation threshold: consolidation after ``unneeded_s``."""
        if self.cfg.autoscaling and self.cfg.consolidation:
            return self.want(now + self.cfg.unneeded_s, now)
        return None

    def node_gone(self, now: float) -> float | None:
        """A node went away: an autoscaled fleet looks at once (its pods are pending)."""
        return self.want(now, now) if self.cfg.autoscaling else None

    def pod_moved(self) -> None:
        """A pod left a node (finished, interrupted, moved): consolidation may find more."""
        self.look.pod_moved()

    def swap_deferred(self, now: float) -> float | None:
        """The swap did not look because disruption acted in this scan
        (``control.spot_swap.swap_look``): a live loop looks again one interval later, so the
        simulator scans then too (else the swap would wait for some unrelated change)."""
        return self.want(now + self.cfg.interval_s, now) if self.cfg.autoscaling else None

    # -- inside a scan ------------------------------------------------------------------------
    def scale_up_due(self, now: float, pending: bool) -> bool:
        """Whether scale-up runs now: pods pending and either something changed since the last
        look or the wait trigger may have fired (else the answer would be the same)."""
        if pending and (self.demand_changed
                        or now - self.last_scale_up >= self.cfg.max_pending_wait_s):
            self.demand_changed = False
            self.last_scale_up = now
            return True
        return False

    def disruption_due(
        self, now: float, empty_since: Iterable[float], underused_since: Iterable[float]
    ) -> tuple[Disrupt, float | None]:
        """Which disruption look runs now, and when to scan again for a consolidation that is
        due but was tried too recently or with nothing new (``(kind, rescan_at)``).

        ``empty_since``/``underused_since``: since when each empty/underused node has been so.
        Consolidation follows :class:`ConsolidationLook`."""
        unneeded = self.cfg.unneeded_s
        due_empty = any(now - t >= unneeded for t in empty_since)
        due_n = sum(1 for t in underused_since if now - t >= unneeded) \
            if self.cfg.consolidation else 0
        if self.look.due(now, due_n):
            return Disrupt.UNDERUSED, None
        if due_empty:
            return Disrupt.EMPTY, None
        if due_n > 0:
            return Disrupt.NONE, self.want(self.look.next_at(now), now)
        return Disrupt.NONE, None

    def after_scan(
        self, now: float, pending: bool, more_work: bool, queued_s: Callable[[], Iterable[float]]
    ) -> float | None:
        """When to scan next after a scan. While pods are pending and work is under way (jobs
        running, nodes booting or just launched, arrivals to come), every interval; with pods
        pending and nothing under way, when the next of them (``queued_s()``: their queue
        times) crosses the wait trigger, so a lone 1-GPU or CPU-only job below the scale-up
        threshold is not stranded — also behind an older pod scale-up does not launch for (its
        team's quota holds it, say), whose trigger fired long ago."""
        if not pending:
            return None
        if more_work:
            return self.want(now + self.cfg.interval_s, now)
        wait = self.cfg.max_pending_wait_s
        due = min((t + wait for t in queued_s() if t + wait > now), default=None)
        if due is None:
            return None
        return self.want(max(due, self.last_scale_up + wait), now)
