"""Statement: trial allocations kept (commit) or undone as a whole (discard), nested."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.decisions import Bind
from gpufleet.queueing.statement import Statement
from gpufleet.state import FleetState, ResourceRequest

ONE = ResourceRequest(cpu_milli=1000, num_gpu=1)


def fleet() -> FleetState:
    s = FleetState()
    s.add_node("a", gpu_model="T4", num_gpus=2, cpu_milli=8000, memory_mib=8192)
    return s


def free(s: FleetState) -> list[int]:
    return [int(x) for x in s.free_milli[0, :2]]


def test_discard_undoes_allocations_and_releases_newest_first() -> None:
    s = fleet()
    run = Bind("r", "a", (0,))
    s.allocate(ONE, run)
    with Statement(s) as st:
        st.release(ONE, run)
        st.allocate(ONE, Bind("x", "a", (0,)))
        st.allocate(ONE, Bind("y", "a", (1,)))
        assert free(s) == [0, 0] and len(st) == 3
    assert free(s) == [0, 1000] and s.cpu_free[0] == 7000


def test_commit_keeps_and_a_nested_statement_is_undone_alone() -> None:
    s = fleet()
    outer = Statement(s)
    outer.allocate(ONE, Bind("x", "a", (0,)))
    with Statement(s) as inner:
        inner.allocate(ONE, Bind("y", "a", (1,)))
        assert free(s) == [0, 0]
    assert free(s) == [0, 1000]
    outer.commit()
    outer.discard()  # nothing left to undo
    assert free(s) == [0, 1000] and len(outer) == 0


def test_a_refused_allocation_is_not_logged() -> None:
    s = fleet()
    with Statement(s) as st:
        st.allocate(ResourceRequest(num_gpu=1), Bind("x", "a", (0,)))
        with pytest.raises(ValueError, match="overcommits"):
            st.allocate(ResourceRequest(num_gpu=1), Bind("y", "a", (0,), 1000))
        assert len(st) == 1
    assert np.all(s.free_milli[0, :2] == 1000)
