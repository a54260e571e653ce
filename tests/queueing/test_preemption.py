"""Priority preemption on FleetState: victims, reprieve, node choice, state left unchanged."""

from __future__ import annotations

from gpufleet.decisions import Bind
from gpufleet.placement import get_policy
from gpufleet.queueing.preemption import Victim, plan_preemption
from gpufleet.state import FleetState, ResourceRequest

ONE = ResourceRequest(cpu_milli=1000, num_gpu=1)
TWO = ResourceRequest(cpu_milli=1000, num_gpu=2)


def fleet() -> FleetState:
    s = FleetState()
    s.add_node("a", gpu_model="T4", num_gpus=2, cpu_milli=8000, memory_mib=8192)
    s.add_node("b", gpu_model="T4", num_gpus=2, cpu_milli=8000, memory_mib=8192)
    return s


def run(s: FleetState, job: str, node: str, gpus: tuple[int, ...], prio: int, t: float) -> Victim:
    b = Bind(job, node, gpus)
    req = TWO if len(gpus) == 2 else ONE
    s.allocate(req, b)
    return Victim(job, prio, t, req, b)


def test_picks_the_node_with_the_lowest_priority_victims_and_reprieves() -> None:
    s = fleet()
    vs = [run(s, "a0", "a", (0,), 5, 1), run(s, "a1", "a", (1,), 1, 2),
          run(s, "b0", "b", (0,), 3, 3), run(s, "b1", "b", (1,), 3, 4)]
    before = s.free_milli.copy()
    got = plan_preemption(s, ONE, 10, vs, get_policy("bestfit"), "vip")
    assert got is not None and got.node == "a"
    assert [p.job_id for p in got.preempts] == ["a1"]  # a0 reprieved: one GPU is enough
    assert (s.free_milli == before).all()


def test_no_plan_when_victims_are_not_lower_priority_or_do_not_make_room() -> None:
    s = fleet()
    vs = [run(s, "a0", "a", (0, 1), 10, 1), run(s, "b0", "b", (0, 1), 10, 2)]
    assert plan_preemption(s, ONE, 10, vs, get_policy("bestfit")) is None
    s2 = FleetState()
    s2.add_node("c", gpu_model="T4", num_gpus=1, cpu_milli=8000, memory_mib=8192)
    v = run(s2, "c0", "c", (0,), 0, 1)
    assert plan_preemption(s2, TWO, 10, [v], get_policy("bestfit")) is None
