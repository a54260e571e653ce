"""The node cap and the consolidation set (``control.limits``)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from gpufleet.control.limits import (
    consolidation_set,
    launch_room,
    launches_under_cap,
    may_launch,
    within_cap,
)
from gpufleet.decisions import CapacityType, Launch
from gpufleet.provisioning import PendingPod
from gpufleet.state import GPU_MILLI, ResourceRequest

OD = CapacityType.ON_DEMAND


def nodes(count: int, gang: bool = False, kind: str = "t") -> Launch:
    return Launch(kind, "z", OD, count, all_or_none=gang)


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


@pytest.mark.parametrize(("launches", "room", "kept"), [
    # the module docstring's example: room 3, [2 nodes, a gang of 2, 3 nodes] → [2, 1]
    ([nodes(2), nodes(2, True, "g"), nodes(3, kind="u")], 3, [nodes(2), nodes(1, kind="u")]),
    ([nodes(2, True, "g")], 2, [nodes(2, True, "g")]),  # a gang that fits launches whole
    ([nodes(2, True, "g")], 1, []),  # part of a gang is of no use to it: none
    ([nodes(5)], 3, [nodes(3)]),  # anything else stops at the cap
    ([nodes(1), nodes(1, kind="u")], 0, []),
])
def test_within_cap(launches: list[Launch], room: int, kept: list[Launch]) -> None:
    assert within_cap(launches, room) == kept


GANG = [PendingPod("g", ResourceRequest(num_gpu=4), False, 0.0, gang_size=2)] * 2
HOLDER = [PendingPod("placeholder", ResourceRequest(num_gpu=1), True, float("inf"))]


def fake_plan(asked: Sequence[PendingPod]) -> list[Launch]:
    """A gang's two 4-GPU nodes (one launch, all or none); one 1-GPU node per placeholder."""
    out = [nodes(2, True, "g4")] if any(p.job_id == "g" for p in asked) else []
    n = sum(1 for p in asked if p.job_id == "placeholder")
    return out + ([nodes(n, kind="g1")] if n else [])


@pytest.mark.parametrize(("pods", "holders", "room", "kept", "held"), [
    # room for both: planned together, as without a cap
    (GANG, HOLDER, 3, [nodes(2, True, "g4"), nodes(1, kind="g1")], False),
    # room 2: the gang first, the placeholder gets none; nothing of the pods' is held back
    (GANG, HOLDER, 2, [nodes(2, True, "g4")], False),
    # room 1: the gang cannot launch, and the placeholder does not take its room either;
    # the cap holds the pods back (the buffer's idle nodes may go)
    (GANG, HOLDER, 1, [], True),
    # no pods: the placeholders have the room
    ([], HOLDER * 3, 2, [nodes(2, kind="g1")], False),
    # no placeholders: a held-back gang is held
    (GANG, [], 1, [], True),
])
def test_pods_before_placeholders_under_the_cap(pods: list[PendingPod],
                                                holders: list[PendingPod], room: int,
                                                kept: list[Launch], held: bool) -> None:
    assert launches_under_cap(fake_plan, pods, holders, room) == (kept, held)
