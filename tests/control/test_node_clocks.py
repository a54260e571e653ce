"""The idle-node rule and its clocks (``control.node_clocks``), as case tables worked by hand."""

from __future__ import annotations

import pytest

from gpufleet.control.node_clocks import Idle, SinceClock, idle_state


@pytest.mark.parametrize(("name", "pods", "alloc_milli", "gpus", "threshold", "want"), [
    # threshold × 1,000 × GPUs is the line: 0.5 × 1,000 × 4 = 2,000 milli-GPU
    ("no pod", 0, 0, 4, 0.5, Idle.EMPTY),
    ("no pod, threshold 0", 0, 0, 4, 0.0, Idle.EMPTY),
    ("1,500 < 2,000", 2, 1500, 4, 0.5, Idle.UNDERUSED),
    ("2,000 is not below 2,000", 2, 2000, 4, 0.5, Idle.BUSY),
    ("1,999 < 2,000", 1, 1999, 4, 0.5, Idle.UNDERUSED),
    ("a CPU-only pod on a GPU node: 0 < 500", 1, 0, 1, 0.5, Idle.UNDERUSED),
    ("threshold 0: never underused", 1, 0, 8, 0.0, Idle.BUSY),
    ("a MIG slice's share, 3/7 of a GPU: 428.6 < 500", 1, 3000 / 7, 1, 0.5, Idle.UNDERUSED),
    ("a node without GPUs: 0 < 0 is false", 3, 0, 0, 0.5, Idle.BUSY),
])
def test_idle_state(name: str, pods: int, alloc_milli: float, gpus: int, threshold: float,
                    want: Idle) -> None:
    assert idle_state(pods, alloc_milli, gpus, threshold) is want, name


def test_since_clock_starts_keeps_resets_and_forgets() -> None:
    c = SinceClock()
    # (nodes, holding, now) → since per node
    steps = [
        (["a", "b"], ["b"], 10.0, {"a": None, "b": 10.0}),
        (["a", "b"], ["a", "b"], 20.0, {"a": 20.0, "b": 10.0}),  # b keeps its start
        (["a", "b"], ["b"], 30.0, {"a": None, "b": 10.0}),  # a left the state: reset
        (["a", "b"], ["a", "b"], 40.0, {"a": 40.0, "b": 10.0}),  # a starts again
        (["a"], ["a"], 50.0, {"a": 40.0}),  # b not listed: forgotten
        (["a", "b"], ["a", "b"], 60.0, {"a": 40.0, "b": 60.0}),  # b is new again
    ]
    for nodes, holding, now, want in steps:
        assert c.update(nodes, holding, now) == want, now
    c.forget("a")
    assert c.update(["a"], ["a"], 70.0) == {"a": 70.0}  # a terminated node's name reused
