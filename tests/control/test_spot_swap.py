"""On-demand → spot swap: the candidate order and the decision, as case tables with hand-worked
numbers (``control.spot_swap``'s docstring example is the first row)."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import pytest

from gpufleet.control.spot_swap import (
    REASON,
    SwapLook,
    SwapNode,
    SwapSettings,
    first_swap,
    judge_swap,
    may_pay,
    plan_price,
    swap_decisions,
    swap_look,
    swap_order,
    swap_owed,
)
from gpufleet.decisions import CapacityType, Cause, Decision, Launch, Preempt, Terminate
from gpufleet.market.bidding import ZoneMarket

CFG = SwapSettings()  # min age 1800 s, price ratio 0.6, payback 8, 5 tries
SPOT = Launch("p3.16xlarge", "us-west-2a", CapacityType.SPOT, 1)
OD = Launch("p3.16xlarge", "us-west-2a", CapacityType.ON_DEMAND, 1)
MOVE_S = 30 + 120 + 180  # checkpoint + restart + provisioning delay


def node(attained_h: float, gpus: float = 8.0, jobs: tuple[str, ...] = ("j1",),
         usd: float = 24.48) -> SwapNode:
    return SwapNode("n1", usd, 8, jobs, gpus, attained_h * 3600, MOVE_S)


@pytest.mark.parametrize(("swap", "plan", "spot_usd", "want", "why"), [
    # move cost 8 × 3.06 × 330/3600 = 2.244 $; 8 × that = 17.952 $
    (node(2.0), [SPOT], 7.34, True, "(24.48 − 7.34) × 2 = 34.28 ≥ 17.952"),
    (node(1.0), [SPOT], 7.34, False, "17.14 < 17.952: the work done does not pay yet"),
    (node(1.05), [SPOT], 7.34, True, "17.14 × 1.05 = 17.997 ≥ 17.952"),
    # one 1-GPU job on the 8-GPU node: move cost 1 × 3.06 × 330/3600 = 0.2805 $, × 8 = 2.244 $
    (node(0.14, gpus=1.0), [SPOT], 7.34, True, "17.14 × 0.14 = 2.3996 ≥ 2.244"),
    (node(0.13, gpus=1.0), [SPOT], 7.34, False, "17.14 × 0.13 = 2.228 < 2.244"),
    (node(5.0), [SPOT], 14.68, True, "just under 0.6 × 24.48 = 14.688"),
    (node(5.0), [SPOT], 14.70, False, "above 0.6 × 24.48 = 14.688"),
    (node(5.0), [SPOT, OD], 7.34, False, "a plan with on-demand in it is no swap"),
    (node(5.0), [], 7.34, False, "scale-up found no launch"),
    (node(5.0, jobs=()), [SPOT], 7.34, False, "nothing to move"),
])
def test_swap_decisions(swap: SwapNode, plan: list[Launch], spot_usd: float, want: bool,
                        why: str) -> None:
    got = swap_decisions(swap, plan, spot_usd, CFG)
    assert (got is not None) == want, why
    if got is not None:  # launch first, then the graceful moves, then the node
        assert got == [*plan, *(Preempt(j, REASON) for j in swap.job_ids),
                       Terminate("n1", REASON)]


@pytest.mark.parametrize(("v", "attained_h", "want", "could", "why"), [
    # the docstring's node (8 GPUs at 3.06 $/GPU-h, 2 h of work, spot 7.34 $/h: a saving of
    # 17.14 $/h × 2 h = 34.28 $) with its job's owner valuing delay at v $/GPU-h: the move's
    # 330 s priced at 8 × (3.06 + v), paid back 8 times. ``could``: may_pay (spot at 0 $/h: a
    # saving of 24.48 $/h)
    (0.0, 2.0, True, True, "8 × 8 × 3.06 × 330/3600 = 17.952 ≤ 34.28"),
    (1.0, 2.0, True, True, "8 × 8 × 4.06 × 330/3600 = 23.819 ≤ 34.28"),
    (2.0, 2.0, True, True, "8 × 8 × 5.06 × 330/3600 = 29.685 ≤ 34.28"),
    (3.0, 2.0, False, True, "8 × 8 × 6.06 × 330/3600 = 35.552 > 34.28: the delay tips it"),
    (10.0, 2.0, False, False, "76.619 > 34.28, and > 24.48 × 2 = 48.96 at any spot price"),
    (10.0, 4.47, False, True, "17.14 × 4.47 = 76.616 < 76.619: not yet"),
    (10.0, 4.48, True, True, "17.14 × 4.48 = 76.787 ≥ 76.619: the work done pays it back"),
])
def test_the_value_of_time_prices_the_move(v: float, attained_h: float, want: bool,
                                           could: bool, why: str) -> None:
    swap = replace(node(attained_h), delay_usd_h=8 * v)  # Σ GPUs × v
    assert (swap_decisions(swap, [SPOT], 7.34, CFG) is not None) == want, why
    assert may_pay(swap, CFG) == could, why


def test_a_zero_value_of_time_leaves_the_move_cost_as_it_was() -> None:
    """The delay term is added, never folded in: with v = 0 the payback test compares the
    same floats as without it."""
    for h in (0.5, 1.0, 1.0472, 2.0, 7.3):
        for spot in (0.0, 3.3, 7.34, 14.68):
            base = node(h)
            before = (24.48 - spot) * base.attained_s / 3600 >= CFG.payback * (
                base.pod_gpus * (24.48 / 8) * base.move_s / 3600)
            assert (swap_decisions(base, [SPOT], spot, CFG) is not None) == before


def test_two_pods_each_preempted_once() -> None:
    got = swap_decisions(node(3.0, gpus=2.0, jobs=("a", "b")), [SPOT], 7.34, CFG)
    assert got is not None
    assert [d for d in got if isinstance(d, Preempt)] == [Preempt("a", REASON),
                                                         Preempt("b", REASON)]
    assert {d.cause for d in got if isinstance(d, Preempt)} == {Cause.SWAP}  # what is counted


@pytest.mark.parametrize(("found", "live", "max_nodes", "want"), [
    (False, 9, 10, SwapLook.LOOK),  # disruption found nothing, room for the spot node
    (True, 9, 10, SwapLook.NEXT_CYCLE),  # emptiness or consolidation acted this scan
    (False, 10, 10, SwapLook.NO),  # at the cap: the swap could not launch its spot node
    (False, 12, 10, SwapLook.NO),  # over a lowered cap
    (True, 10, 10, SwapLook.NO),  # at the cap the next cycle is no better: nothing owed
])
def test_swap_look(found: bool, live: int, max_nodes: int, want: SwapLook) -> None:
    assert swap_look(found, live, max_nodes) is want


@pytest.mark.parametrize(("attained_h", "movable", "anywhere", "want"), [
    # the docstring's node pays at a spot price of 0 from 17.952 / 24.48 = 0.733 h of work
    ({"a": 1.0}, {"a"}, True, True),
    ({"a": 0.5}, {"a"}, True, False),  # cannot pay at any price yet
    ({"a": 1.0, "b": 0.5}, {"b"}, True, False),  # a would pay but may not move
    ({"a": 0.5, "b": 1.0}, {"a", "b"}, True, True),  # b, the second try
    ({"a": 1.0}, {"a"}, False, False),  # the strategy bids nowhere: no plan could be spot
    ({f"n{i}": 0.5 for i in range(5)} | {"n5": 1.0}, {f"n{i}" for i in range(6)}, True,
     False),  # n5 would pay, but it is the 6th try
    ({}, set(), True, False),
])
def test_swap_owed(attained_h: dict[str, float], movable: set[str], anywhere: bool,
                   want: bool) -> None:
    def node_of(name: str) -> SwapNode:
        return replace(node(attained_h[name]), name=name)

    got = swap_owed(list(attained_h), lambda name: name in movable, node_of, CFG,
                    lambda: anywhere)
    assert got is want


@pytest.mark.parametrize(("nodes", "now", "want"), [
    # (name, ready_s, usd/h): at 2000 s only nodes ready by 200 s are old enough
    ([("a", 0.0, 3.06), ("b", 100.0, 24.48), ("c", 1000.0, 24.48)], 2000.0, ["b", "a"]),
    ([("a", 0.0, 3.06), ("b", 200.0, 24.48)], 2000.0, ["b", "a"]),  # exactly 1800 s counts
    ([("z", 0.0, 12.24), ("y", 0.0, 12.24)], 5000.0, ["y", "z"]),  # equal price: by name
    ([("a", 500.0, 3.06)], 2000.0, []),
])
def test_swap_order(nodes: list[tuple[str, float, float]], now: float, want: list[str]) -> None:
    assert swap_order(nodes, now, CFG) == want


@pytest.mark.parametrize(("movable", "pays", "want", "judged"), [
    # nodes a..g in order; judged = the ones scale-up was asked about
    ("abcdefg", "c", "c", "abc"),  # the first that pays wins; later ones are not asked
    ("abcdefg", "f", None, "abcde"),  # five tries, then the look ends
    ("bdfg", "g", "g", "bdfg"),  # nodes whose pods may not move are skipped, not counted
    ("", "a", None, ""),
])
def test_first_swap(movable: str, pays: str, want: str | None, judged: str) -> None:
    asked: list[str] = []

    def judge(name: str) -> list[Decision] | None:
        asked.append(name)
        return [Terminate(name, REASON)] if name in pays else None

    got = first_swap(list("abcdefg"), lambda n: n in movable, judge, CFG)
    assert got == ([Terminate(want, REASON)] if want else None)
    assert "".join(asked) == judged


def market(zone: str, price: str) -> ZoneMarket:
    return ZoneMarket(zone, Decimal("24.48"), (Decimal("9.99"), Decimal(price)))


TWO = Launch("p3.16xlarge", "us-west-2a", CapacityType.SPOT, 2)
OTHER_ZONE = Launch("p3.16xlarge", "us-west-2b", CapacityType.SPOT, 1)


@pytest.mark.parametrize(("plan", "want"), [
    ([SPOT], 7.34),  # the current (last) price of the launch's zone
    ([TWO], 14.68),  # × the count
    ([SPOT, OTHER_ZONE], 7.34 + 8.0),
    ([Launch("p3.2xlarge", "us-west-2a", CapacityType.SPOT, 1)], 0.0),  # no market for it
    ([], 0.0),
])
def test_plan_price(plan: list[Launch], want: float) -> None:
    markets = {"p3.16xlarge": [market("us-west-2a", "7.34"), market("us-west-2b", "8.0")]}
    assert plan_price(plan, markets) == pytest.approx(want)


@pytest.mark.parametrize(("plan", "max_nodes", "want"), [
    ([SPOT], 1, True),  # the live consolidator carries one replacement
    ([TWO], 1, False),  # two nodes for one swap: not there
    ([TWO], None, True),  # the simulator launches any plan
    ([SPOT, OTHER_ZONE], 1, False),
])
def test_max_nodes(plan: list[Launch], max_nodes: int | None, want: bool) -> None:
    assert (swap_decisions(node(5.0), plan, 7.34, CFG, max_nodes) is not None) == want


@pytest.mark.parametrize(("swap", "want", "why"), [
    # at a spot price of 0 the saving is the whole 24.48 $/h; 8 × 2.244 = 17.952 $
    (node(0.74), True, "24.48 × 0.74 = 18.115 ≥ 17.952"),
    (node(0.73), False, "24.48 × 0.73 = 17.870 < 17.952: no spot price can make it pay"),
    (node(1.0), True, "pays at spot 0, though not at 7.34 (swap_decisions' table)"),
    # one 1-GPU job: 8 × 0.2805 = 2.244 $
    (node(0.1, gpus=1.0), True, "24.48 × 0.1 = 2.448 ≥ 2.244"),
    (node(0.09, gpus=1.0), False, "24.48 × 0.09 = 2.2032 < 2.244"),
    (node(5.0, jobs=()), False, "nothing to move"),
])
def test_may_pay(swap: SwapNode, want: bool, why: str) -> None:
    assert may_pay(swap, CFG) is want, why



@pytest.mark.parametrize(("swap", "asked", "want"), [
    (node(0.73), False, False),  # cannot pay even at spot 0 (test_may_pay): scale-up not asked
    (node(1.0), True, False),  # could pay at 0, not at 7.34: asked, then no swap
    (node(2.0), True, True),  # 34.28 ≥ 17.952: the swap
])
def test_judge_swap_asks_scale_up_only_when_the_move_could_pay(
        swap: SwapNode, asked: bool, want: bool) -> None:
    calls: list[int] = []

    def ask() -> tuple[list[Launch], float]:
        calls.append(1)
        return [SPOT], 7.34

    got = judge_swap(swap, ask, CFG)
    assert bool(calls) is asked and (got is not None) is want


@pytest.mark.parametrize(("order", "anywhere", "asked", "want"), [
    ("abc", False, "", None),  # the strategy bids nowhere: no candidate is walked
    ("abc", True, "ab", "b"),  # it bids somewhere: the walk as ever (b pays)
    ("", True, "", None),  # no candidate: none judged
])
def test_first_swap_walks_no_candidate_when_the_strategy_bids_nowhere(
        order: str, anywhere: bool, asked: str, want: str | None) -> None:
    calls: list[str] = []
    judged: list[str] = []

    def spot_anywhere() -> bool:
        calls.append("bids")
        return anywhere

    def judge(name: str) -> list[Decision] | None:
        judged.append(name)
        return [Terminate(name, REASON)] if name == "b" else None

    def candidates() -> list[str]:
        calls.append("order")
        return list(order)

    got = first_swap(candidates, lambda _: True, judge, CFG, spot_anywhere)
    # the market first: the candidates (a walk over every node) only where it bids
    assert "".join(judged) == asked and calls == (["bids", "order"] if anywhere else ["bids"])
    assert (got is None if want is None else got == [Terminate(want, REASON)])
