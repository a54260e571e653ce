"""Gang room in the simulator (``control.gang_room`` through ``control.cycle`` and ``sim.jobs``),
each case run with the rule on and off so that it fails without it.

- *Wait*: two 4-GPU jobs end at about 1,190 s; an 8-GPU gang (2 × 4) arrives at 900 s. Its
  room frees in ~290 s, less than 2P + U = 960 s, so it waits for the two nodes instead of
  launching two more (with the rule off, scale-up launches them at once).
- *Scale up*: the same with jobs that run 5,000 s: waiting ~4,300 s costs more than a launch.
- *Preempt*: a fixed fleet of four 4-GPU nodes placed by ``spread``: two long 2-GPU jobs that
  cannot checkpoint (n1, n2) and four 1-GPU checkpointing jobs, two on each of n3 and n4. Eight
  GPUs are free, none of them a whole node. The gang evicts the four movable jobs, takes n3 and
  n4 (reserved for it while the victims write their checkpoints), and the victims go back on
  n1 and n2's free GPUs; with the rule off the gang waits until the movable jobs end (3,000 s).
"""

from __future__ import annotations

import pytest

from gpufleet.config import default_scenario
from gpufleet.sim.runner import Simulation
from gpufleet.state import ResourceRequest
from gpufleet.traces.jobs import JobSpec


def v100(gpus: int) -> ResourceRequest:
    return ResourceRequest(cpu_milli=1000, memory_mib=1024, num_gpu=gpus,
                           gpu_models=frozenset({"V100-16GB"}))


BASE = default_scenario().model_copy(update={
    "spot": False, "gpu_mtbf_hours": None, "instance_types": ("p3.8xlarge",),
    "consolidation": False, "headroom": False})  # the gang room's worked examples alone


def run(jobs: list[JobSpec], gang_room: bool, **kw: object) -> Simulation:
    sim = Simulation(BASE.model_copy(update={"gang_room": gang_room, **kw}), 0, jobs)
    s = sim.run()
    assert s["jobs_finished"] == len(jobs) and s["jobs_lost"] == 0
    t = sim.sim.tally
    assert t.alloc_gpu_s + 1e-6 >= t.useful_gpu_s + t.lost_gpu_s  # allocated ≥ useful + lost
    return sim


def two_then_gang(duration_s: float) -> list[JobSpec]:
    return [JobSpec("a", 0.0, duration_s, v100(4), checkpointable=False),
            JobSpec("b", 0.0, duration_s, v100(4), checkpointable=False),
            JobSpec("gang", 900.0, 600.0, v100(4), replicas=2)]


def test_a_gang_whose_room_frees_soon_waits_instead_of_launching() -> None:
    on = run(two_then_gang(1000.0), True)
    off = run(two_then_gang(1000.0), False)
    s_on, s_off = on.summary(), off.summary()
    assert (s_on["gang_room_wait"], s_on["gang_room_scale_up"]) == (1, 0)
    assert s_on["nodes_launched"] == 2 and s_off["nodes_launched"] == 4
    gang = on.sim.jobs[2]
    a = on.sim.jobs[0]
    assert gang.first_start_s == pytest.approx(a.finish_s)  # it took a and b's nodes
    assert s_on["cost_usd"] < s_off["cost_usd"]


def test_a_gang_whose_room_is_far_scales_up() -> None:
    on = run(two_then_gang(5000.0), True)
    off = run(two_then_gang(5000.0), False)
    s_on = on.summary()
    assert (s_on["gang_room_wait"], s_on["gang_room_scale_up"]) == (0, 1)
    assert s_on["nodes_launched"] == 4 == off.summary()["nodes_launched"]
    assert on.sim.jobs[2].first_start_s == pytest.approx(off.sim.jobs[2].first_start_s)


def fragmented() -> list[JobSpec]:
    return [JobSpec("long1", 0.0, 20000.0, v100(2), checkpointable=False),
            JobSpec("long2", 0.0, 20000.0, v100(2), checkpointable=False),
            *(JobSpec(f"m{k}", 0.0, 3000.0, v100(1), checkpoint_cost_s=30.0)
              for k in range(4)),
            JobSpec("gang", 100.0, 600.0, v100(4), replicas=2)]


FIXED = {"autoscaling": False, "fixed_nodes": 4, "placement": "spread"}


def test_a_gang_evicts_movable_pods_into_the_holes_elsewhere() -> None:
    on = run(fragmented(), True, **FIXED)
    off = run(fragmented(), False, **FIXED)
    s_on = on.summary()
    assert s_on["gang_room_preempt"] == 1 and s_on["gang_room_evictions"] == 4
    jobs = {j.spec.job_id: j for j in on.sim.jobs}
    gang = jobs["gang"]
    # the victims checkpoint (30 s) on the eviction at the gang's arrival, then it starts
    assert gang.first_start_s == pytest.approx(130.0)
    assert all(jobs[f"m{k}"].interruptions == 1 for k in range(4))
    assert s_on["lost_gpu_hours"] == 0  # they checkpointed on the way out
    # the victims went straight back, onto n1 and n2's free GPUs: had they waited for the
    # gang's nodes (it ends at 730 s) they would finish after 730 + 2,900 s of work left
    assert max(jobs[f"m{k}"].finish_s or 0.0 for k in range(4)) < 3600.0
    # without the rule nobody is evicted and the gang waits for the movable jobs to end
    assert {j.spec.job_id for j in off.sim.jobs if j.interruptions} == set()
    assert off.sim.jobs[-1].first_start_s == pytest.approx(3000.0)
