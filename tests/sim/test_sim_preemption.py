"""Priority preemption in the simulator (``control.cycle`` through ``sim.jobs``): on a fixed
one-node fleet (a g4dn.metal, 8 T4 GPUs: each job needs all of them), a high-priority job that
arrives while a low-priority one holds every GPU evicts it; the victim checkpoints, is requeued
and finishes after the preemptor. With one priority in the workload nothing is ever evicted."""

from __future__ import annotations

import pytest

from gpufleet.config import default_scenario
from gpufleet.sim.runner import Simulation
from gpufleet.state import ResourceRequest
from gpufleet.traces.jobs import JobSpec

EIGHT_T4 = ResourceRequest(cpu_milli=1000, memory_mib=1024, num_gpu=8,
                          gpu_models=frozenset({"T4"}))
SC = default_scenario().model_copy(update={
    "autoscaling": False, "spot": False, "fixed_nodes": 1, "gpu_mtbf_hours": None})


def run(high_priority: int) -> Simulation:
    jobs = [JobSpec("low", 0.0, 3600.0, EIGHT_T4, checkpoint_cost_s=30.0),
            JobSpec("high", 600.0, 600.0, EIGHT_T4, priority=high_priority)]
    sim = Simulation(SC, 0, jobs)
    s = sim.run()
    assert s["jobs_finished"] == 2 and s["jobs_lost"] == 0
    return sim


def test_a_higher_priority_arrival_evicts_the_running_job() -> None:
    sim = run(10)
    low, high = sim.sim.jobs
    assert len(sim.sim.cloud.nodes) == 1
    assert low.interruptions == 1  # preempted once, requeued
    assert sim.sim.tally.interruptions == 0  # a preemption we asked for is not an interruption
    # the victim leaves after writing its checkpoint (30 s), then the preemptor starts
    assert high.first_start_s == pytest.approx(630.0)
    assert low.finish_s is not None and high.finish_s is not None
    assert low.finish_s > high.finish_s


def test_equal_priorities_never_preempt() -> None:
    sim = run(0)
    low, high = sim.sim.jobs
    assert low.interruptions == 0 and high.first_start_s == pytest.approx(low.finish_s)
