"""The discrete-event engine: one heap of ``(time, priority, seq, kind, payload)``.

simpy's core in thirty lines, without generators: the driver dispatches on ``kind`` (a small int)
so a step is a heap pop and one method call. ``seq`` increases monotonically, which makes ties
at the same time and priority resolve in scheduling order — the whole run is a pure function of
its inputs and seed. Events are never removed; a handler that finds its target changed (a job
that was preempted before its completion fired) ignores the stale event, which is cheaper than
heap deletion.

``at_instant`` counts the events popped at the current time (``sim.progress`` bounds it: a run
that keeps scheduling work at one instant stops with a report instead of hanging).
"""

from __future__ import annotations

import heapq
from typing import Any

Event = tuple[float, int, int, int, Any]


class Engine:
    __slots__ = ("_heap", "_seq", "at_instant", "now", "steps")

    def __init__(self, start: float = 0.0) -> None:
        self._heap: list[Event] = []
        self._seq = 0
        self.now = start
        self.steps = 0
        self.at_instant = 0

    def schedule(self, time: float, kind: int, payload: Any = None, priority: int = 0) -> None:
        """Enqueue an event; scheduling in the past is a driver bug, not input."""
        if time < self.now:
            raise ValueError(f"event kind {kind} scheduled at {time} before now {self.now}")
        self._seq += 1
        heapq.heappush(self._heap, (time, priority, self._seq, kind, payload))

    def peek_time(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def pop(self) -> Event:
        ev = heapq.heappop(self._heap)
        if ev[0] != self.now:
            self.now = ev[0]
            self.at_instant = 0
        self.at_instant += 1
        self.steps += 1
        return ev

    def __len__(self) -> int:
        return len(self._heap)
