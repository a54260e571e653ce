"""control.cycle as a case table, each expectation worked by hand (kube-scheduler's
noderesources/least_allocated_test.go style): a fleet, the running pods, the pending units →
the binds (id → node, GPUs), the evictions and the refusals' messages.

Fleet of every case unless it says otherwise: ``a`` and ``b``, two T4 GPUs each, 8 CPUs;
``bestfit`` placement, so a unit goes to the fullest node that fits it (ties: the first row).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pytest

from gpufleet.control.admission import SPOT_TAINT
from gpufleet.control.cycle import PendingUnit, Victim, plan_cycle
from gpufleet.control.gang_room import Costs, GangRoomBook, GangRoomInput, GangRoomSettings
from gpufleet.decisions import Bind, CapacityType
from gpufleet.placement import get_policy
from gpufleet.queueing import BackfillPass
from gpufleet.state import FleetState, NodeInfo, ResourceRequest

ONE = ResourceRequest(cpu_milli=1000, num_gpu=1)
TWO = ResourceRequest(cpu_milli=1000, num_gpu=2)
FOUR = ResourceRequest(cpu_milli=1000, num_gpu=4)
HALF = ResourceRequest(cpu_milli=1000, num_gpu=1, gpu_milli=500)
ONE_SPOT_OK = ResourceRequest(cpu_milli=1000, num_gpu=1, tolerations=frozenset({SPOT_TAINT}))
POLICY = get_policy("bestfit", tie_seed=0)


def unit(uid: str, req: ResourceRequest | None = ONE, prio: int = 0, t: float = 0.0,
         **kw: object) -> PendingUnit:
    return PendingUnit(uid, req, prio, submit_s=t, **kw)  # type: ignore[arg-type]


@dataclass
class Case:
    name: str
    pending: list[PendingUnit]
    binds: dict[str, tuple[str, tuple[int, ...]]]
    refused: dict[str, str] = field(default_factory=dict)  # id → a part of its message
    running: list[tuple[str, str, tuple[int, ...], int]] = field(default_factory=list)
    evicted: list[str] = field(default_factory=list)
    spot_b: bool = False  # node b is a spot node (tainted)
    kw: dict = field(default_factory=dict)


CASES = [
    Case("priority first: b (5) before the older a (0); one GPU left → a refused",
         [unit("a", TWO, 0, 1), unit("b", TWO, 5, 2), unit("c", TWO, 0, 3)],
         {"b": ("a", (0, 1)), "a": ("b", (0, 1))}, {"c": "insufficient GPU"}),
    Case("requeued ahead of older new work: node a has one GPU free, b full",
         [unit("new", ONE, 0, 1), unit("back", ONE, 0, 9, requeued=True)],
         {"back": ("a", (1,))}, {"new": "0/2 nodes are available"},
         running=[("r", "a", (0,), 0), ("s", "b", (0, 1), 0)]),
    Case("urgent ahead of requeued (and of older)",
         [unit("back", ONE, 0, 1, requeued=True), unit("late", ONE, 0, 9, urgent=True)],
         {"late": ("a", (1,))}, {"back": "insufficient GPU"},
         running=[("r", "a", (0,), 0), ("s", "b", (0, 1), 0)]),
    Case("backfill: the 4-GPU head cannot fit anywhere, the 1-GPU unit behind it starts",
         [unit("big", FOUR, 0, 1), unit("small", ONE, 0, 2)],
         {"small": ("a", (0,))}, {"big": "0/2 nodes are available"}),
    Case("starvation: the head waited 100 s > 50 s, so nothing starts behind it",
         [unit("big", FOUR, 0, 0), unit("small", ONE, 0, 2)],
         {}, {"big": "insufficient GPU", "small": "waiting behind big"},
         kw={"backfill": BackfillPass(50.0), "now": 100.0}),
    Case("a blocked shape from an earlier cycle is not tried (capacity has not grown)",
         [unit("x", ONE, 0, 1, shape="s1"), unit("y", TWO, 0, 2, shape="s2")],
         {"y": ("a", (0, 1))}, {"x": "not tried"}, kw={"blocked": {"s1"}}),
    Case("gang: both members or none; two 1-GPU members fit on a (fullest first: a's free GPU"
         " and then b)",
         [unit("g", ONE, 0, 1, members=("g-0", "g-1"), need=2)],
         {"g-0": ("a", (1,)), "g-1": ("b", (0,))}, running=[("r", "a", (0,), 0)]),
    Case("gang of three members with two free GPUs: none placed",
         [unit("g", ONE, 0, 1, members=("g-0", "g-1", "g-2"), need=3)],
         {}, {"g-0": "(3 pods, all or nothing)", "g-2": "all or nothing"},
         running=[("r", "a", (0, 1), 0), ("s", "b", (0,), 0)]),
    Case("gang waiting for members: needs 3, 2 pending",
         [unit("g", ONE, 0, 1, members=("g-0", "g-1"), need=3)],
         {}, {"g-0": "waiting for 3 members, 2 pending"}),
    Case("two halves share one GPU of the fuller node",
         [unit("h1", HALF, 0, 1), unit("h2", HALF, 0, 2)],
         {"h1": ("a", (1,)), "h2": ("a", (1,))}, running=[("r", "a", (0,), 0)]),
    Case("pin to on-demand: the spot-tolerating unit may not take spot node b any more",
         [unit("p", ONE_SPOT_OK, 0, 1, pin=CapacityType.ON_DEMAND)],
         {}, {"p": "untolerated taint"}, running=[("r", "a", (0, 1), 0)], spot_b=True),
    Case("unpinned, the same unit takes spot node b",
         [unit("p", ONE_SPOT_OK, 0, 1)],
         {"p": ("b", (0,))}, running=[("r", "a", (0, 1), 0)], spot_b=True),
    Case("eligibility mask: only row b, though a is fuller",
         [unit("m", ONE, 0, 1, eligible=np.array([False, True]))],
         {"m": ("b", (0,))}, running=[("r", "a", (0,), 0)]),
    Case("eligibility mask over a full node: the excluded node is named in the reason",
         [unit("m", ONE, 0, 1, eligible=np.array([True, False]))],
         {}, {"m": "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity"},
         running=[("r", "a", (0, 1), 0)]),
    Case("unreadable request: refused with its reason, never placed",
         [unit("bad", None, 0, 1, refusal="two MIG kinds")], {}, {"bad": "two MIG kinds"}),
    Case("preemption: high (5) needs 2 GPUs; b's single low pod (0) goes, a's two stay",
         [unit("high", TWO, 5, 9)], {}, {"high": "insufficient GPU"},
         running=[("a0", "a", (0,), 0), ("a1", "a", (1,), 0), ("b0", "b", (0, 1), 0)],
         evicted=["b0"]),
    Case("preemption reprieve: only the lower-priority victim on the node goes",
         [unit("high", ONE, 5, 9)], {}, {"high": "insufficient GPU"},
         running=[("a0", "a", (0,), 3), ("a1", "a", (1,), 1), ("b0", "b", (0, 1), 4)],
         evicted=["a1"]),
    Case("no preemption among equals", [unit("same", TWO, 0, 9)], {},
         {"same": "insufficient GPU"}, running=[("a0", "a", (0, 1), 0), ("b0", "b", (0, 1), 0)]),
    Case("no preemption while an eviction is in progress",
         [unit("high", TWO, 5, 9)], {}, {"high": "insufficient GPU"},
         running=[("a0", "a", (0, 1), 0), ("b0", "b", (0, 1), 0)], kw={"evicting": True}),
    Case("no preemption for preempt_never",
         [unit("high", TWO, 5, 9, preempt_never=True)], {}, {"high": "insufficient GPU"},
         running=[("a0", "a", (0, 1), 0), ("b0", "b", (0, 1), 0)]),
    Case("no preemption for a gang",
         [unit("g", ONE, 5, 9, members=("g-0", "g-1"), need=2)], {}, {"g-0": "all or nothing"},
         running=[("a0", "a", (0, 1), 0), ("b0", "b", (0, 1), 0)]),
    Case("the module docstring's example (node b full with a priority-9 pod): c first but"
         " blocked, b (requeued) binds, a refused; evicting r would not make room for c",
         [unit("a", ONE, 0, 5), unit("b", ONE, 0, 9, requeued=True), unit("c", TWO, 5, 20)],
         {"b": ("a", (1,))}, {"a": "insufficient GPU", "c": "insufficient GPU"},
         running=[("r", "a", (0,), 0), ("s", "b", (0, 1), 9)]),
    Case("the same, but b's pod has priority 0: c evicts it instead",
         [unit("a", ONE, 0, 5), unit("b", ONE, 0, 9, requeued=True), unit("c", TWO, 5, 20)],
         {"b": ("a", (1,))}, {"a": "insufficient GPU", "c": "insufficient GPU"},
         running=[("r", "a", (0,), 0), ("s", "b", (0, 1), 0)], evicted=["s"]),
]


def fleet(spot_b: bool) -> FleetState:
    s = FleetState()
    s.add_node("a", gpu_model="T4", num_gpus=2, cpu_milli=8000, memory_mib=8192)
    info = NodeInfo(name="b", capacity_type=CapacityType.SPOT,
                    taints=frozenset({SPOT_TAINT})) if spot_b else None
    s.add_node("b", gpu_model="T4", num_gpus=2, cpu_milli=8000, memory_mib=8192, info=info)
    return s


def reserved_b() -> GangRoomInput:
    """A book in which gang ``g`` chose to preempt and holds node ``b`` for 60 s."""
    book = GangRoomBook()
    book.record("g", Costs(math.inf, None, 1.0, math.inf, ("v",), ("b",), 0.0), 0.0)
    return GangRoomInput(GangRoomSettings(False, 180, 600), book, lambda r: 1.0)


CASES += [
    Case("no reservation: x best-fits b, next to r",
         [unit("x", ONE, 0, 1)], {"x": ("b", (1,))}, running=[("r", "b", (0,), 0)]),
    Case("gang room: b is reserved for gang g (its victims are leaving), so x goes to a",
         [unit("x", ONE, 0, 1), unit("g", TWO, 0, 0, members=("g#0", "g#1"), need=2)],
         {"x": ("a", (0,))}, {"g#0": "pod group g"}, running=[("r", "b", (0,), 0)],
         kw={"gang_room": reserved_b()}),
    Case("gang room: the reservation lapses at 60 s (its write + grace)",
         [unit("x", ONE, 0, 1)], {"x": ("b", (1,))}, running=[("r", "b", (0,), 0)],
         kw={"gang_room": reserved_b(), "now": 60.0}),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_cycle_case(case: Case) -> None:
    s = fleet(case.spot_b)
    victims = []
    for job, node, gpus, prio in case.running:
        req = ResourceRequest(cpu_milli=1000, num_gpu=len(gpus))
        b = Bind(job, node, gpus)
        s.allocate(req, b)
        victims.append(Victim(job, prio, 0.0, req, b))
    before = (s.free_milli.copy(), s.cpu_free.copy(), s.active.copy())
    plan = plan_cycle(s, case.pending, POLICY, np.random.default_rng(0), victims=victims,
                      **case.kw)
    assert {b.job_id: (b.node, b.gpus) for b in plan.binds} == case.binds
    assert [e.job_id for e in plan.evictions] == case.evicted
    refused = {r.job_id: r.message for r in plan.refusals}
    for job, part in case.refused.items():
        assert part in refused[job], (job, refused[job])
    placed = {m for u in case.pending for m in u.placed_ids} & set(case.binds)
    assert set(refused) == {m for u in case.pending for m in u.placed_ids} - placed
    # the state comes back unchanged: the driver applies the binds itself
    assert all(np.array_equal(x, y) for x, y in
               zip(before, (s.free_milli, s.cpu_free, s.active), strict=True))


def test_eviction_reason_names_the_preemptor() -> None:
    s = fleet(False)
    b = Bind("low", "a", (0, 1))
    s.allocate(TWO, b)
    s.allocate(TWO, Bind("other", "b", (0, 1)))
    plan = plan_cycle(s, [unit("high", TWO, 7)], POLICY, np.random.default_rng(0),
                      victims=[Victim("low", 0, 0.0, TWO, b)])
    (e,) = plan.evictions
    assert (e.job_id, e.reason) == ("low", "preempted by high (priority 7)")


def test_explain_false_builds_no_refusals_and_blocked_carries_over() -> None:
    s = fleet(False)
    plan = plan_cycle(s, [unit("big", FOUR, shape="four")], POLICY, np.random.default_rng(0),
                      explain=False)
    assert plan.refusals == [] and plan.blocked == {"four"} and plan.binds == []
