from __future__ import annotations

import pytest

from gpufleet.sim.engine import Engine


def test_order_by_time_priority_then_scheduling_order() -> None:
    eng = Engine()
    eng.schedule(5.0, 1, "late")
    eng.schedule(1.0, 1, "b", priority=2)
    eng.schedule(1.0, 1, "a", priority=1)
    eng.schedule(1.0, 1, "c", priority=2)
    got = [eng.pop()[4] for _ in range(4)]
    assert got == ["a", "b", "c", "late"]
    assert eng.now == 5.0 and eng.steps == 4


def test_scheduling_in_the_past_is_a_bug() -> None:
    eng = Engine()
    eng.schedule(2.0, 0)
    eng.pop()
    with pytest.raises(ValueError):
        eng.schedule(1.0, 0)
