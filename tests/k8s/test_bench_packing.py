"""``bench k8s-packing``'s own arithmetic (no cluster): the latency timeline."""

from __future__ import annotations

import pytest

from gpufleet.k8s.bench_packing import timeline

# (created s, bound s) per pod, from t0 = 100 → [window start, pods, p50, p99] per 10 s window
CASES = {
    "one window": ({"a": (100.0, 100.5), "b": (101.0, 102.0)},
                   ((0.0, 2, 0.75, 0.995),)),
    "a gap and a late pod": ({"a": (100.0, 100.2), "c": (125.0, 130.0)},
                             ((0.0, 1, 0.2, 0.2), (20.0, 1, 5.0, 5.0))),
    "windows by creation, not by bind": ({"a": (109.9, 115.0), "b": (110.0, 110.1)},
                                         ((0.0, 1, 5.1, 5.1), (10.0, 1, 0.1, 0.1))),
    "never bound: left out": ({"a": (100.0, None)}, ()),
}


@pytest.mark.parametrize("case", list(CASES))
def test_timeline(case: str) -> None:
    pods, want = CASES[case]
    created = {k: c for k, (c, _) in pods.items()}
    bound = {k: b for k, (_, b) in pods.items() if b is not None}
    assert timeline(created, bound, 100.0) == want  # rounded to the millisecond
