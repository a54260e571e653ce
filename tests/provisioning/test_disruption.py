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
