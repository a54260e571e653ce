from __future__ import annotations

from gpufleet.queueing import BackfillPass, queue_key


def test_queue_key_priority_then_urgent_then_requeued_then_fifo() -> None:
    keys = {
        "new-early": queue_key(0, False, 10.0, 1),
        "new-late": queue_key(0, False, 20.0, 2),
        "requeued-late": queue_key(0, True, 30.0, 3),
        "high": queue_key(5, False, 40.0, 4),
        "urgent-latest": queue_key(0, False, 50.0, 5, urgent=True),
    }
    order = sorted(keys, key=keys.__getitem__)
    assert order == ["high", "urgent-latest", "requeued-late", "new-early", "new-late"]


def run(queue, fits, starvation=None, now=100.0, blocked=None):
    tried: list[str] = []

    def try_place(job_id: str) -> bool:
        tried.append(job_id)
        return fits(job_id)

    shapes = len({s for _, s, _ in queue})
    res = BackfillPass(starvation).run(queue, now, try_place, shapes, blocked)
    return res, tried


def test_backfill_skips_failed_shape_without_another_call() -> None:
    # a (8 GPUs) does not fit; b, d share its shape and are skipped; c (1 GPU) backfills
    q = [("a", "8g", 0.0), ("b", "8g", 1.0), ("c", "1g", 2.0), ("d", "8g", 3.0)]
    res, tried = run(q, lambda j: j == "c")
    assert tried == ["a", "c"]
    assert res.started == ["c"]
    assert res.blocked == {"8g"}


def test_pass_stops_once_every_shape_failed() -> None:
    q = [("a", "8g", 0.0), ("b", "1g", 1.0)] + [(f"x{i}", "1g", 2.0 + i) for i in range(100)]
    res, tried = run(q, lambda j: False)
    assert tried == ["a", "b"]
    assert res.started == []


def test_starving_head_stops_backfill() -> None:
    q = [("a", "8g", 0.0), ("c", "1g", 2.0)]
    res, tried = run(q, lambda j: j == "c", starvation=50.0, now=100.0)
    assert tried == ["a"] and res.stopped_for == "a" and res.started == []
    # not starving yet (waited 40 s < 50 s): backfill proceeds
    res, tried = run(q, lambda j: j == "c", starvation=50.0, now=40.0)
    assert res.started == ["c"]


def test_known_blocked_shapes_are_not_retried() -> None:
    q = [("a", "8g", 0.0), ("c", "1g", 2.0)]
    res, tried = run(q, lambda j: True, blocked={"8g"})
    assert tried == ["c"] and res.started == ["c"]
