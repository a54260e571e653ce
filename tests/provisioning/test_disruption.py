from __future__ import annotations

import dataclasses
import math

import pytest

from gpufleet.decisions import Preempt, Terminate
from gpufleet.provisioning import DisruptionPolicy, NodeShape, NodeView, PodView
from gpufleet.state import ResourceRequest

SHAPE = NodeShape("V100-16GB", 4, 32000, 244 * 1024, 16384)
ONE = ResourceRequest(cpu_milli=4000, memory_mib=1024, num_gpu=1)


def node(name: str, used: int, pods: tuple[PodView, ...] = (), empty: float | None = None,
         under: float | None = None, spot: bool = False) -> NodeView:
    free = tuple([0] * used + [1000] * (4 - used))
    return NodeView(name, SHAPE, spot, free, 32000 - 4000 * used, 244 * 1024 - 1024 * used,
                    pods, empty, under)


def pod(job: str, movable: bool = True, spot_ok: bool = True) -> PodView:
    return PodView(job, ONE, movable, spot_ok)


def test_emptiness_after_unneeded_time_only() -> None:
    pol = DisruptionPolicy(unneeded_s=600)
    nodes = [node("a", 0, empty=0.0), node("b", 0, empty=100.0)]
    cmd = pol.decide(nodes, now=650.0)
    assert cmd is not None and cmd.method == "emptiness"
    assert cmd.decisions == (Terminate("a", "empty", only_if_empty=True),)
    assert pol.decide(nodes, now=500.0) is None


def test_consolidation_moves_pods_to_free_room() -> None:
    pol = DisruptionPolicy(unneeded_s=600, utilization_threshold=0.5)
    nodes = [node("low", 1, (pod("j1"),), under=0.0), node("busy", 2, (pod("x"), pod("y")))]
    cmd = pol.decide(nodes, now=700.0)
    assert cmd is not None and cmd.method == "single-node-consolidation"
    assert cmd.decisions == (Preempt("j1", "consolidation"), Terminate("low", "consolidation"))


def test_no_consolidation_when_pods_do_not_fit_or_are_not_movable() -> None:
    pol = DisruptionPolicy(unneeded_s=600)
    full = node("full", 4, tuple(pod(f"f{i}") for i in range(4)))
    assert pol.decide([node("low", 1, (pod("j1"),), under=0.0), full], 700.0) is None
    roomy = node("roomy", 0)
    stuck = node("low", 1, (pod("j1", movable=False),), under=0.0)
    assert pol.decide([stuck, roomy], 700.0) is None


def test_on_demand_only_pods_never_consolidate_onto_spot() -> None:
    pol = DisruptionPolicy(unneeded_s=600)
    low = node("low", 1, (pod("j1", spot_ok=False),), under=0.0)
    spot_room = node("spot", 0, spot=True)
    assert pol.decide([low, spot_room], 700.0) is None
    od_room = node("od", 1, (pod("z"),))
    assert pol.decide([low, od_room], 700.0) is not None


MIG_SHAPE = NodeShape("A100-40GB", 2, 32000, 244 * 1024, 40960, mig_compute=7)


def mig_node(name: str, used: tuple[int, int], compute: tuple[int, int],
             pods: tuple[PodView, ...] = (), under: float | None = None) -> NodeView:
    return NodeView(name, MIG_SHAPE, False, (0, 0), 30000, 200 * 1024, pods, None, under,
                    mig_used=used, mig_compute_used=compute)


def test_mig_node_allocation_and_consolidation_respect_slices() -> None:
    three = ResourceRequest(cpu_milli=1000, num_gpu=1, mig_profile="3g.20gb")
    low = mig_node("low", (0xF0, 0), (3, 0), (PodView("m", three, True, True),), under=0.0)
    assert low.allocation == 3 / 14
    pol = DisruptionPolicy(unneeded_s=600, utilization_threshold=0.5)
    # the other node has a 3g at start 4 on GPU 0 and 1g instances on slices 0-6 of GPU 1:
    # GPU 0's start 0 is free, so the 3g moves there
    fits = mig_node("other", (0xF0, 0x7F), (3, 7))
    cmd = pol.decide([low, fits], now=700.0)
    assert cmd is not None and cmd.method == "single-node-consolidation"
    # slices 0-3 of GPU 0 hold a 1g at slice 1: a 3g can start at 0 or 4 only, both blocked
    blocked = mig_node("other", (0xF2, 0x7F), (4, 7))
    assert pol.decide([low, blocked], now=700.0) is None
    # a whole-GPU node has free GPUs but no MIG slices
    whole = NodeView("whole", SHAPE, False, (1000,) * 4, 32000, 244 * 1024, (), None, None)
    assert pol.decide([low, whole], now=700.0) is None


# -- multi-node consolidation ----------------------------------------------------------------
P3_8X = NodeShape("V100-16GB", 4, 32000, 244 * 1024, 16384)
TWO_GPU = NodeShape("V100-16GB", 2, 48000, 244 * 1024, 16384)
HUNGRY = ResourceRequest(cpu_milli=20000, memory_mib=1024, num_gpu=1)


def cpu_node(name: str, pods: tuple[PodView, ...], under: float | None = 0.0,
             price: float = 12.24) -> NodeView:
    used = len(pods)
    return NodeView(name, P3_8X, False, tuple([0] * used + [1000] * (4 - used)),
                    32000 - 20000 * used, 244 * 1024 - 1024 * used, pods, None, under,
                    usd_per_hour=price)


def hungry(job: str) -> PodView:
    return PodView(job, HUNGRY, True, True)


def offers(price: float) -> list:
    from gpufleet.decisions import CapacityType
    from gpufleet.provisioning import Offer

    return [
        Offer("two-gpu", CapacityType.ON_DEMAND, TWO_GPU, price, "z1"),
        Offer("two-gpu", CapacityType.SPOT, TWO_GPU, price / 4),  # spot never replaces
        Offer("p3.8xlarge", CapacityType.ON_DEMAND, P3_8X, 12.24, "z1"),
    ]


def test_multi_node_replaces_two_nodes_with_one_cheaper() -> None:
    """The module docstring's example: single-node fails on CPU; 10 $/h < 2 × 12.24 $/h."""
    from gpufleet.decisions import CapacityType, Launch

    pol = DisruptionPolicy(unneeded_s=600, utilization_threshold=0.5)
    nodes = [cpu_node("a", (hungry("j1"),)), cpu_node("b", (hungry("j2"),))]
    assert pol.decide(nodes, now=700.0) is None  # no offers: nothing to replace with
    cmd = pol.decide(nodes, now=700.0, offers=offers(10.0))
    assert cmd is not None and cmd.method == "multi-node-consolidation"
    assert cmd.candidates == ("a", "b")
    assert cmd.decisions == (
        Launch("two-gpu", "z1", CapacityType.ON_DEMAND, 1, reason="replaces 2 nodes"),
        Preempt("j1", "multi-node consolidation"),
        Preempt("j2", "multi-node consolidation"),
        Terminate("a", "multi-node consolidation"),
        Terminate("b", "multi-node consolidation"),
    )


@pytest.mark.parametrize(
    ("why", "nodes", "price"),
    [
        # not cheaper: 24.48 $/h is not below 2 × 12.24
        ("price", lambda: [cpu_node("a", (hungry("j1"),)), cpu_node("b", (hungry("j2"),))],
         24.48),
        # a pod that may not move (not checkpointable) keeps its node out of the group
        ("unmovable", lambda: [cpu_node("a", (hungry("j1"),)),
                               cpu_node("b", (PodView("j2", HUNGRY, False, True),))], 10.0),
        # not under-used for long enough
        ("young", lambda: [cpu_node("a", (hungry("j1"),)),
                           cpu_node("b", (hungry("j2"),), under=500.0)], 10.0),
    ],
)
def test_multi_node_declines(why: str, nodes, price: float) -> None:
    pol = DisruptionPolicy(unneeded_s=600, utilization_threshold=0.5)
    assert pol.decide(nodes(), now=700.0, offers=offers(price)) is None, why


def test_multi_node_takes_the_largest_prefix_that_fits() -> None:
    # three pods need 60 vCPU, more than any one offer (48): all three fail, a pair works
    pol = DisruptionPolicy(unneeded_s=600, utilization_threshold=0.5)
    nodes = [cpu_node(n, (hungry(f"j{n}"),)) for n in "abc"]
    cmd = pol.decide(nodes, now=700.0, offers=offers(1.0))
    assert cmd is not None and cmd.candidates == ("a", "b")


def test_multi_node_prefers_room_on_other_nodes_and_is_off_when_disabled() -> None:
    # the two candidates' pods: one fits the busy node's free room, the other the replacement
    pol = DisruptionPolicy(unneeded_s=600, utilization_threshold=0.5)
    busy = NodeView("busy", P3_8X, False, (0, 0, 1000, 1000), 20000, 100 * 1024,
                    (pod("x"), pod("y")), None, None, usd_per_hour=12.24)
    nodes = [cpu_node("a", (hungry("j1"),)), cpu_node("b", (hungry("j2"),)), busy]
    # single-node: a's pod fits busy (20 vCPU free): that comes first
    cmd = pol.decide(nodes, now=700.0, offers=offers(5.0))
    assert cmd is not None and cmd.method == "single-node-consolidation"
    off = DisruptionPolicy(unneeded_s=600, multi_node=False)
    tight = [cpu_node("a", (hungry("j1"),)), cpu_node("b", (hungry("j2"),))]
    assert off.decide(tight, now=700.0, offers=offers(5.0)) is None


def priced(n: NodeView, usd: float) -> NodeView:
    return dataclasses.replace(n, usd_per_hour=usd)


# 4-GPU nodes: "a" at 4 $/h (1 $/GPU-h), "b" at 2 $/h; "low" holds one movable pod that fits
# on "busy" (2 of 4 used). Removing a node takes its 4 GPUs from the free room: its pods move
# into room that was free already.
EMPTY_AB = [priced(node("a", 0, empty=0.0), 4.0), priced(node("b", 0, empty=0.0), 2.0)]
LOW_BUSY = [node("low", 1, (pod("j1"),), under=0.0), node("busy", 2, (pod("x"), pod("y")))]


@pytest.mark.parametrize(("nodes", "spare", "want", "why"), [
    (EMPTY_AB, math.inf, ("a", "b"), "no buffer kept: both empty nodes go"),
    (EMPTY_AB, 8.0, ("a", "b"), "8 GPUs may go: both"),
    (EMPTY_AB, 7.0, ("a",), "room for one: the dearer per GPU (a: 1 $/GPU-h > b: 0.5) goes"),
    (EMPTY_AB, 4.0, ("a",), "exactly one node's GPUs"),
    (EMPTY_AB, 3.9, None, "not even one node fits the spare: nothing"),
    (EMPTY_AB, -2.5, None, "the buffer is short already"),
    (LOW_BUSY, 4.0, ("low",), "the consolidation takes 4 GPUs: allowed"),
    (LOW_BUSY, 3.0, None, "a consolidation is all or nothing"),
])
def test_disruption_keeps_the_headroom(nodes: list[NodeView], spare: float,
                                       want: tuple[str, ...] | None, why: str) -> None:
    cmd = DisruptionPolicy(unneeded_s=600).decide(nodes, now=700.0, spare_gpus=spare)
    if want is None:
        assert cmd is None, why
        return
    assert cmd is not None and cmd.candidates == want, why
    assert [d.node for d in cmd.decisions if isinstance(d, Terminate)] == list(want), why
