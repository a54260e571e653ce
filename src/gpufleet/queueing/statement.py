"""Trial allocations on a FleetState that are either kept or undone as a whole.

KAI scheduler's ``Statement`` (``pkg/scheduler/framework/statement.go``): a scheduling action
records every allocate and release it makes on the session's state; ``Commit`` keeps them,
``Discard`` undoes them in reverse order. Gang admission (place replica after replica, give them
all back), preemption's what-ifs (release a node's victims, reprieve them one by one) and the
scheduling cycle (place unit after unit so later ones see earlier ones, then hand the state back
unchanged with the plan) are all such trials; written against one ``Statement`` they cannot
forget an undo on an early return, and they can nest: a statement may start inside another and
is undone before it.

Used as a context manager a statement discards on exit unless it was committed — the safe
default for a what-if. Nodes must not be added or removed while a statement is open (its undo
log names them by row).
"""

from __future__ import annotations

from collections.abc import Iterable
from types import TracebackType

from gpufleet.decisions import Bind
from gpufleet.state import FleetState, ResourceRequest

MigMasks = tuple[tuple[int, int, int], ...]


class Statement:
    """A log of allocations and releases on ``state`` (see the module docstring)."""

    __slots__ = ("_ops", "state")

    def __init__(self, state: FleetState) -> None:
        self.state = state
        self._ops: list[tuple[int, ResourceRequest, Bind, MigMasks]] = []

    def allocate(self, req: ResourceRequest, bind: Bind,
                 masks: Iterable[tuple[int, int, int]] = ()) -> None:
        """Allocate ``bind`` (``FleetState.allocate``: raises on over-commit, logging nothing)."""
        m = tuple(masks)
        self.state.allocate(req, bind, m)
        self._ops.append((+1, req, bind, m))

    def release(self, req: ResourceRequest, bind: Bind,
                masks: Iterable[tuple[int, int, int]] = ()) -> None:
        m = tuple(masks)
        self.state.release(req, bind, m)
        self._ops.append((-1, req, bind, m))

    def discard(self) -> None:
        """Undo every operation since the start (or the last commit), newest first."""
        ops = self._ops
        while ops:
            sign, req, bind, masks = ops.pop()
            if sign > 0:
                self.state.release(req, bind, masks)
            else:
                self.state.allocate(req, bind, masks)

    def commit(self) -> None:
        """Keep what was done: the state stays as it is and the log is emptied."""
        self._ops.clear()

    def __len__(self) -> int:
        return len(self._ops)

    def __enter__(self) -> Statement:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.discard()
