"""The node cap and the consolidation set (``control.limits``)."""

from __future__ import annotations

import pytest

from gpufleet.control.limits import consolidation_set, launch_room, may_launch
from gpufleet.state import GPU_MILLI


def test_may_launch_below_the_cap_only() -> None:
    assert may_launch(0, 1)
    assert may_launch(9, 10)
    assert not may_launch(10, 10)
    assert not may_launch(11, 10)  # over the cap (a cap lowered mid-run): still no
    assert not may_launch(0, 0)


@pytest.mark.parametrize(("live", "cap", "room"), [
    (0, 5, 5), (3, 5, 2), (4, 5, 1), (5, 5, 0),
    (7, 5, 0),  # a cap lowered under a running fleet: nothing more, never negative
    (0, 0, 0),
])
def test_launch_room(live: int, cap: int, room: int) -> None:
    assert launch_room(live, cap) == room
    assert may_launch(live, cap) is (room > 0)


def test_consolidation_set_candidates_room_and_full_nodes() -> None:
    # unneeded 600 s at t = 1000, the module docstring's example
    nodes = [
        ("a", True, GPU_MILLI, 4, 300.0),  # underused 700 s: a candidate
        ("b", True, 2 * GPU_MILLI, 4, 900.0),  # underused 100 s: room only
        ("c", True, 3 * GPU_MILLI, 4, None),  # busy with room: room only
        ("d", True, 4 * GPU_MILLI, 4, None),  # full: cannot help
        ("e", False, 0, 4, 0.0),  # booting or draining: not in the set
        ("f", True, 0, 8, 400.0),  # exactly unneeded_s: a candidate
    ]
    assert consolidation_set(nodes, 1000.0, 600.0) == [
        ("a", False), ("b", True), ("c", True), ("f", False)]


def test_consolidation_set_keeps_the_given_order() -> None:
    nodes = [(n, True, 0, 1, 0.0) for n in ("z", "m", "a")]
    assert [n for n, _ in consolidation_set(nodes, 10.0, 5.0)] == ["z", "m", "a"]
    assert consolidation_set([], 10.0, 5.0) == []
