"""The pending queue's order and what a pin to on-demand does to it, by hand."""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.control.queue import PendingQueue, effective_shape
from gpufleet.state import ResourceRequest
from gpufleet.traces.jobs import JobSpec


@dataclass
class Job:
    idx: int
    spec: JobSpec
    shape: int = 0
    key: tuple = ()
    enqueued_s: float = 0.0
    requeued: bool = False
    on_demand_only: bool = False


def _job(idx: int, priority: int = 0, deadline_s: float | None = None, shape: int = 0) -> Job:
    spec = JobSpec(f"j{idx}", 0.0, 60.0, ResourceRequest(num_gpu=1), priority=priority,
                   deadline_s=deadline_s)
    return Job(idx, spec, shape)


def _order(q: PendingQueue) -> list[int]:
    return [idx for _, idx in q]


def test_priority_then_requeued_then_arrival() -> None:
    q = PendingQueue()
    a, b, c, d = _job(0), _job(1), _job(2, priority=5), _job(3)
    d.requeued = True
    for t, j in enumerate((a, b, c, d)):
        q.push(j, float(t))
    assert _order(q) == [2, 3, 0, 1]
    assert a.enqueued_s == 0.0 and d.enqueued_s == 3.0


def test_pinned_deadline_job_goes_ahead_of_older_work_and_keeps_its_sequence() -> None:
    q = PendingQueue()
    old, late = _job(0), _job(1, deadline_s=100.0)
    q.push(old, 0.0)
    q.push(late, 1.0)
    seq = late.key[-1]
    q.pin(late, True)
    assert _order(q) == [1, 0] and late.key[-1] == seq and late.on_demand_only
    q.pin(late, False)
    assert _order(q) == [0, 1]


def test_a_pin_without_deadline_changes_the_shape_but_not_the_order() -> None:
    q = PendingQueue()
    a, b = _job(0, shape=3), _job(1, shape=3)
    q.push(a, 0.0)
    q.push(b, 1.0)
    assert q.shapes == {6: 2}
    q.pin(b, True)
    assert _order(q) == [0, 1]
    assert effective_shape(b) == 7 and q.shapes == {6: 1, 7: 1}


def test_remove_drops_the_entry_and_its_shape_count() -> None:
    q = PendingQueue()
    a, b = _job(0, shape=1), _job(1, shape=2)
    q.push(a, 0.0)
    q.push(b, 0.0)
    q.remove(a)
    assert _order(q) == [1] and q.shapes == {4: 1} and len(q) == 1
    q.remove(b)
    assert not q and q.shapes == {}
