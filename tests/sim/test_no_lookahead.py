"""The replay never peeks: FGD's typical tasks are learned from arrived jobs only.

Mutation check (run by hand while writing this test): with the old rule — typical tasks from
the whole trace up front — the two workloads below place their shared prefix differently (the
futures' 0.6- vs 0.4-GPU shapes change FGD's fragmentation measure), so the equality asserted
here fails; learned online, it holds."""

from __future__ import annotations

from gpufleet.config import Scenario
from gpufleet.placement import typical_tasks_from
from gpufleet.sim.runner import Simulation
from gpufleet.state import ResourceRequest
from gpufleet.traces.jobs import JobSpec

SPLIT_S = 10 * 3600.0


def _req(milli: int, gpus: int = 1) -> ResourceRequest:
    return ResourceRequest(cpu_milli=2000 * gpus, num_gpu=gpus, gpu_milli=milli,
                           gpu_models=frozenset({"V100-16GB"}))


def workload(future: ResourceRequest) -> list[JobSpec]:
    """The same 60 jobs before SPLIT_S (fractions and whole GPUs), then 60 jobs of ``future``."""
    shapes = [_req(300), _req(700), _req(450), _req(1000)]
    jobs = [JobSpec(job_id=f"p{i}", submit_s=600.0 * i, duration_s=4 * 3600.0 + 300 * (i % 7),
                    request=shapes[i % len(shapes)], interruptible=False) for i in range(60)]
    jobs += [JobSpec(job_id=f"f{i}", submit_s=SPLIT_S + 60.0 * i, duration_s=3600.0,
                     request=future, interruptible=False) for i in range(60)]
    return jobs


def placements_at_split(jobs: list[JobSpec]) -> tuple[dict, Simulation]:
    sc = Scenario(name="packed-fixed", autoscaling=False, spot=False, fixed_nodes=4,
                  deadline_policy=None, recovery="restart-from-zero", checkpointing=False)
    sim = Simulation(sc, seed=0, jobs=jobs)
    sim.run_until(SPLIT_S - 1.0)
    binds = {j.spec.job_id: [(b.node, b.gpus, b.milli_per_gpu) for b, _ in j.binds]
             for j in sim.sim.jobs if j.binds}
    return binds, sim


def test_placements_before_a_job_arrives_do_not_depend_on_it() -> None:
    a_jobs, b_jobs = workload(_req(600)), workload(_req(400))
    # the trace-wide mixes differ: half the jobs are 0.6-GPU in one, 0.4-GPU in the other
    assert typical_tasks_from([j.request for j in a_jobs]) != typical_tasks_from(
        [j.request for j in b_jobs])
    a, sim_a = placements_at_split(a_jobs)
    b, sim_b = placements_at_split(b_jobs)
    assert a and a == b  # FGD placed the shared prefix identically
    learner = sim_a.sim.typical
    assert learner.seen == 60  # only the arrived prefix was counted
    assert learner.tasks is not None
    assert {r for r, _ in learner.tasks} <= {j.request for j in a_jobs[:60]}
    # once the futures arrive, each run learns its own mix
    sim_a.run()
    sim_b.run()
    assert sim_a.sim.typical.tasks != sim_b.sim.typical.tasks
