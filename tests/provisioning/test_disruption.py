from __future__ import annotations

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
    assert cmd.decisions == (Terminate("a", "empty"),)
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
