"""Pod backoff after a failed placement write (``control.write_backoff``), as a case table: a
run of failures, successes and pods leaving, and what is held when — hand-worked from
INITIAL_S 1 s doubling to MAX_S 10 s."""

from __future__ import annotations

import pytest

from gpufleet.control.write_backoff import INITIAL_S, MAX_S, WriteBackoff

assert (INITIAL_S, MAX_S) == (1.0, 10.0)  # the numbers the rows are worked with

# (events as (time, "fail" | "ok" | "exist:<pods that exist>", key), then (time, held then,
# next time one is due or None))
CASES = [
    # failures in a row: 1, 2, 4, 8, then the 10 s cap
    ([(100, "fail", "a")], (100.5, {"a"}, 101.0)),
    ([(100, "fail", "a")], (101.0, set(), None)),  # due exactly at 101: tried again
    ([(100, "fail", "a"), (101, "fail", "a")], (102.9, {"a"}, 103.0)),
    ([(100, "fail", "a"), (101, "fail", "a"), (103, "fail", "a")], (106.9, {"a"}, 107.0)),
    ([(100, "fail", "a"), (101, "fail", "a"), (103, "fail", "a"), (107, "fail", "a")],
     (114.9, {"a"}, 115.0)),
    ([(100, "fail", "a"), (101, "fail", "a"), (103, "fail", "a"), (107, "fail", "a"),
      (115, "fail", "a")], (124.9, {"a"}, 125.0)),  # 16 s capped to 10
    # a success forgets the run: the next failure waits 1 s again
    ([(100, "fail", "a"), (101, "fail", "a"), (103, "ok", "a"), (200, "fail", "a")],
     (200.5, {"a"}, 201.0)),
    # pods are held apart; the earliest due one wakes the loop
    ([(100, "fail", "a"), (100.2, "fail", "b"), (101, "fail", "a")], (101.1, {"a", "b"}, 101.2)),
    # a deleted pod is forgotten; one that still exists (its bind in flight) keeps its run
    ([(100, "fail", "a"), (100, "fail", "b"), (100.1, "exist:b", "")], (100.5, {"b"}, 101.0)),
    ([(100, "fail", "a"), (100.5, "exist:a", ""), (101, "fail", "a")], (102.9, {"a"}, 103.0)),
]


@pytest.mark.parametrize(("events", "expect"), CASES)
def test_backoff(events: list[tuple[float, str, str]],
                 expect: tuple[float, set[str], float | None]) -> None:
    book = WriteBackoff()
    for t, what, key in events:
        if what == "fail":
            book.failed(key, t)
        elif what == "ok":
            book.succeeded(key)
        else:
            book.keep(what.removeprefix("exist:").split(","))
    at, held, due = expect
    assert book.held(at) == held
    assert book.next_due(at) == due
