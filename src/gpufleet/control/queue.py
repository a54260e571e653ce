"""The pending queue: who is tried first, and what a pin to on-demand does to the order.

Order (``gpufleet.queueing.queue_key``): higher priority first, then deadline jobs pinned to
on-demand (they have run out of slack, so the on-demand node launched for them must not be taken
by another job first), then requeued work, then arrival order, then a sequence number for ties.

A job's *effective shape* is its request shape doubled, plus one when pinned to on-demand: a
pinned job asks for a different request (no spot toleration), so a shape that failed unpinned
says nothing about it. The backfill pass memoises failed shapes by this number, and
``shapes`` counts the pending jobs of each (how many distinct shapes wait).

The queue is driver-independent: a job is anything with the ``Queued`` fields; the driver keeps
its own job records and asks the queue to order them.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterator
from typing import Protocol

from gpufleet.queueing import QueueKey, queue_key
from gpufleet.traces.jobs import JobSpec


class Queued(Protocol):
    """What the queue reads and writes on a driver's job record."""

    idx: int
    spec: JobSpec
    shape: int
    key: QueueKey
    enqueued_s: float
    requeued: bool
    on_demand_only: bool


def effective_shape(j: Queued) -> int:
    """Shape for the blocked-shape memo: on-demand-only jobs are a different request."""
    return j.shape * 2 + (1 if j.on_demand_only else 0)


def is_urgent(j: Queued) -> bool:
    """A deadline job pinned to on-demand (its slack ran out): ahead of older work."""
    return j.on_demand_only and j.spec.deadline_s is not None


def order_key(j: Queued, seq: int) -> QueueKey:
    """Sort key of ``j`` (see the module docstring); ``seq`` breaks ties in arrival order."""
    return queue_key(j.spec.priority, j.requeued, j.enqueued_s, seq, is_urgent(j))


class PendingQueue:
    """Sorted ``(key, idx)`` entries plus a count of pending jobs per effective shape."""

    __slots__ = ("_entries", "_seq", "shapes")

    def __init__(self) -> None:
        self._entries: list[tuple[QueueKey, int]] = []
        self._seq = 0
        self.shapes: Counter[int] = Counter()

    def __len__(self) -> int:
        return len(self._entries)

    def __bool__(self) -> bool:
        return bool(self._entries)

    def __iter__(self) -> Iterator[tuple[QueueKey, int]]:
        return iter(self._entries)

    def __getitem__(self, s: slice) -> list[tuple[QueueKey, int]]:
        return self._entries[s]

    def push(self, j: Queued, now: float) -> None:
        """Queue ``j`` as of ``now`` (behind every job of its class already waiting)."""
        self._seq += 1
        j.enqueued_s = now
        j.key = order_key(j, self._seq)
        self._insert(j)

    def remove(self, j: Queued) -> None:
        """Take ``j`` off the queue (it started, or is being re-sorted)."""
        i = bisect.bisect_left(self._entries, (j.key, j.idx))
        del self._entries[i]
        shape = effective_shape(j)
        c = self.shapes[shape] - 1
        if c:
            self.shapes[shape] = c
        else:
            del self.shapes[shape]

    def pin(self, j: Queued, on_demand_only: bool) -> None:
        """Pin a queued job to on-demand (or unpin it): it keeps its arrival sequence but its
        place in the order and its effective shape change."""
        self.remove(j)
        j.on_demand_only = on_demand_only
        j.key = order_key(j, j.key[-1])
        self._insert(j)

    def _insert(self, j: Queued) -> None:
        bisect.insort(self._entries, (j.key, j.idx))
        self.shapes[effective_shape(j)] += 1
