"""Deadline guards (``gpufleet.control.deadline_guard``), hand-worked end to end.

Delays used throughout: provisioning 180 s, restart overhead 120 s (after an interruption
only), checkpoint 30 s, scale-up wait trigger 60 s for a pod below the 2-GPU threshold.
"""

from __future__ import annotations

import pytest

from gpufleet.config import Scenario, default_scenario
from gpufleet.control.deadline_guard import cannot_wait, fresh_node_fits, move_fits, rerun_fits
from gpufleet.sim.runner import Simulation
from gpufleet.state import ResourceRequest
from gpufleet.traces.jobs import JobSpec

V100 = frozenset({"V100-16GB"})


def req(gpus: int = 1, cpu: int = 4000, milli: int = 1000) -> ResourceRequest:
    return ResourceRequest(cpu_milli=cpu, memory_mib=12288, num_gpu=gpus, gpu_milli=milli,
                           gpu_models=V100)


def no_failures(**kw: object) -> Scenario:
    # the guard's worked examples alone: no headroom buffer, no swap
    return default_scenario().model_copy(update={"gpu_mtbf_hours": None, "headroom": False,
                                                  "spot_swap": False, **kw})


@pytest.mark.parametrize(
    ("now", "deadline", "duration", "expect"),
    [
        # 2·3600 + 120 + 180 = 7,500 s needed from now
        (0.0, 7500.0, 3600.0, True),
        (0.0, 7499.0, 3600.0, False),
        (1000.0, 8500.0, 3600.0, True),
        (1000.0, 8000.0, 3600.0, False),
    ],
)
def test_rerun_fits(now: float, deadline: float, duration: float, expect: bool) -> None:
    assert rerun_fits(now, deadline, duration, 120.0, 180.0) is expect


@pytest.mark.parametrize(
    ("now", "deadline", "remaining", "expect"),
    [
        # 30 + 180 + 120 + remaining
        (1640.0, 36300.0, 34600.0, False),  # 34,660 < 34,930
        (1640.0, 36570.0, 34600.0, True),  # 34,930 = 34,930
        (0.0, 1000.0, 669.0, True),
        (0.0, 1000.0, 671.0, False),
    ],
)
def test_move_fits(now: float, deadline: float, remaining: float, expect: bool) -> None:
    assert move_fits(now, deadline, remaining, 30.0, 120.0, 180.0) is expect


@pytest.mark.parametrize(
    ("now", "deadline", "remaining", "overhead", "expect"),
    [
        (0.0, 800.0, 600.0, 0.0, True),  # 800 < 600 + 180 + 60 = 840
        (0.0, 840.0, 600.0, 0.0, False),
        (10.0, 900.0, 600.0, 120.0, True),  # 890 < 960
        (0.0, 1e9, 600.0, 0.0, False),
    ],
)
def test_cannot_wait(now: float, deadline: float, remaining: float, overhead: float,
                     expect: bool) -> None:
    assert cannot_wait(now, deadline, remaining, overhead, 180.0, 60.0) is expect


@pytest.mark.parametrize(
    ("now", "deadline", "remaining", "expect"),
    [
        (0.0, 240.0, 60.0, True),  # 180 + 60 = 240
        (0.0, 239.0, 60.0, False),
        (100.0, 250.0, 60.0, False),  # 150 < 240
    ],
)
def test_fresh_node_fits(now: float, deadline: float, remaining: float, expect: bool) -> None:
    assert fresh_node_fits(now, deadline, remaining, 180.0) is expect


def _consolidation_run(h0_deadline: float) -> Simulation:
    # tests/sim/test_consolidation.py's three p3.8xlarge nodes; h0 now has a deadline
    r = req(cpu=20000)
    jobs = [JobSpec(f"h{i}", i * 400.0, 10 * 3600.0, r,
                    deadline_s=h0_deadline if i == 0 else None) for i in range(3)]
    sim = Simulation(no_failures(spot=False), 0, jobs)
    sim.run()
    return sim


def test_consolidation_does_not_move_a_job_the_move_would_make_late() -> None:
    """At 1,640 s h0 has 34,600 s of work left; a move needs 30 (checkpoint) + 180 (boot) +
    120 (restart) + 34,600 = 34,930 s. Deadline 36,300 leaves 34,660: h0 stays put, and the two
    other nodes alone have no cheaper replacement (one p3.16xlarge costs what two p3.8xlarge
    do), so nothing moves then and h0 ends at 240 + 36,000 = 36,240 s, in time. (Once h0's node
    is empty, h1 and h2 move onto it by single-node consolidation: h1 at the 36,250-s scan with
    390 s left, node gone after its 30-s checkpoint, ends at 36,280 + 120 + 390 = 36,790 s.)
    With 36,570 the move fits: all three move as in test_consolidation (h0 ends at 36,540 s,
    still in time)."""
    sim = _consolidation_run(36300.0)
    s = sim.summary()
    assert s["consolidation_replacements"] == 0
    h0 = sim.sim.jobs[0]
    assert (h0.interruptions, h0.finish_s) == (0, 36240.0)
    assert [j.finish_s for j in sim.sim.jobs[1:]] == [36790.0, 37190.0]
    assert s["deadline_misses"] == 0
    moved = _consolidation_run(36570.0)
    assert moved.summary()["consolidation_moves"] == 3
    assert moved.sim.jobs[0].finish_s == 36540.0 and moved.summary()["deadline_misses"] == 0


def _spot_run(jobs: list[JobSpec]) -> Simulation:
    # price model without volatility: spot is always offered and never reclaimed; the deadline
    # controller ticks every price_tick_s = 300 s
    sc = no_failures(spot_market="price", price_volatility=0.0)
    sim = Simulation(sc, 0, jobs)
    sim.run()
    return sim


def test_job_without_checkpoints_stays_off_spot_even_when_a_rerun_would_fit() -> None:
    """2 GPUs (at the scale-up trigger), 3,600 s, no checkpoints. A reclaim would cost all its
    work, so it never tolerates spot (``control.admission``; ``market.spot_cost``): with a
    deadline of 5,000 s (< 2·3,600 + 120 + 180 = 7,500, no rerun would fit) and of 8,000 s
    (a rerun would fit) alike, the node launched at 0 s is on-demand, ready at 180, the job ends
    at 3,780 s, and the deadline guards never had to pin it (0 switches)."""
    for deadline in (5000.0, 8000.0):
        job = JobSpec("t", 0.0, 3600.0, req(2), checkpointable=False, deadline_s=deadline)
        sim = _spot_run([job])
        nodes = list(sim.sim.cloud.nodes.values())
        assert [(n.spot, n.launched_s, n.ready_s) for n in nodes] == [(False, 0.0, 180.0)]
        assert sim.sim.jobs[0].finish_s == 3780.0 and sim.summary()["deadline_switches"] == 0


def test_tight_deadline_job_gets_on_demand_at_once() -> None:
    """A 0.5-GPU job of 600 s with checkpoints arrives at 10 s, due at 810 s. It is urgent (800 <
    600 + 180 + 60), so the scan at 10 s scales up without the 60-s wait; and the controller's
    safety net, applied at that scan instead of the next availability tick (300 s), says
    on-demand (R = floor(800/300)·300 = 600 ≤ T1 = ceil(720/300)·300 = 900): one on-demand
    node launched at 10 s, ready at 190 s, job done at 790 s, in time. Without these it would
    have started on a spot node and been moved to on-demand at the 300-s tick, too late."""
    job = JobSpec("u", 10.0, 600.0, req(1, cpu=2000, milli=500), deadline_s=810.0)
    sim = _spot_run([job])
    nodes = list(sim.sim.cloud.nodes.values())
    assert [(n.spot, n.launched_s, n.ready_s) for n in nodes] == [(False, 10.0, 190.0)]
    j = sim.sim.jobs[0]
    assert (j.first_start_s, j.finish_s, j.interruptions) == (190.0, 790.0, 0)
    s = sim.summary()
    assert s["deadline_misses"] == 0 and s["deadline_switches"] == 1


def test_infeasible_misses_are_counted_apart() -> None:
    """Both 2-GPU jobs of 60 s arrive at 0 s on an empty autoscaled fleet: one node each is
    ready at 180 s, both end at 240 s. Window 100 s < 180 + 60 is infeasible (missed, counted
    in both figures); window 250 s is met."""
    jobs = [JobSpec("x", 0.0, 60.0, req(2), deadline_s=100.0),
            JobSpec("y", 0.0, 60.0, req(2), deadline_s=250.0)]
    sim = Simulation(no_failures(spot=False), 0, jobs)
    s = sim.run()
    assert (s["deadline_misses"], s["deadline_misses_infeasible"]) == (1, 1)
