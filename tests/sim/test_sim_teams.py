"""Team quotas in the simulator (``control.cycle`` step 5 through ``sim.jobs``), worked by hand.

A fixed fleet of one g4dn.metal (8 T4 GPUs). Teams ``a`` and ``b``, 4 GPUs each, in cohort
``lab``. Team a submits four 2-GPU jobs of an hour at t = 10, 20, 30, 40 (a1…a4): a1 and a2
are within a's quota, a3 and a4 borrow b's idle 4 GPUs — the node is full. At t = 600 b1 (2
GPUs, 600 s) arrives: within b's quota, and the cohort has no idle quota left, so a's newest
borrowed job a4 is reclaimed: it writes its checkpoint (30 s) and leaves at 630, when b1
starts; a4 waits (a at 6 GPUs + 2 would need 2 idle in the cohort, there are none) until b1
finishes at 1230, then borrows again. Without ``teams:`` nothing is evicted and b1 waits for
a1 to finish at 3610.
"""

from __future__ import annotations

import pytest

from gpufleet.config import default_scenario
from gpufleet.queueing.teams.settings import TeamsSettings, jain_index
from gpufleet.sim.runner import Simulation
from gpufleet.state import ResourceRequest
from gpufleet.traces.jobs import JobSpec

TWO_T4 = ResourceRequest(cpu_milli=1000, memory_mib=1024, num_gpu=2,
                         gpu_models=frozenset({"T4"}))
TEAMS = TeamsSettings.model_validate({"queues": [
    {"name": "a", "gpus": 4, "cohort": "lab"}, {"name": "b", "gpus": 4, "cohort": "lab"}]})


def run(teams: TeamsSettings | None) -> tuple[Simulation, dict]:
    sc = default_scenario().model_copy(update={
        "autoscaling": False, "spot": False, "fixed_nodes": 1, "gpu_mtbf_hours": None,
        "instance_types": ("g4dn.metal",), "teams": teams})
    jobs = [JobSpec(f"a{i}", 10.0 * i, 3600.0, TWO_T4, checkpoint_cost_s=30.0, tenant="a")
            for i in range(1, 5)]
    jobs.append(JobSpec("b1", 600.0, 600.0, TWO_T4, tenant="b"))
    sim = Simulation(sc, 0, jobs)
    s = sim.run()
    assert s["jobs_finished"] == 5 and s["jobs_lost"] == 0
    assert [n.gpus for n in sim.sim.cloud.nodes.values()] == [8]
    return sim, s


def test_borrowing_then_reclaim() -> None:
    sim, s = run(TEAMS)
    by = {j.spec.job_id: j for j in sim.sim.jobs}
    # a borrowed: all four of a's jobs started at once on the 8 GPUs
    assert [by[f"a{i}"].first_start_s for i in range(1, 5)] == [10.0, 20.0, 30.0, 40.0]
    assert [by[f"a{i}"].interruptions for i in range(1, 5)] == [0, 0, 0, 1]
    assert by["b1"].first_start_s == pytest.approx(630.0)  # a4's checkpoint: 600 + 30
    assert by["b1"].finish_s == pytest.approx(1230.0)
    assert by["a4"].bound_s == pytest.approx(1230.0)  # borrows again once b1 is gone
    a4_end = by["a4"].finish_s
    assert a4_end is not None
    end = s["makespan_s"]
    assert end == a4_end
    teams = s["teams"]["per_team"]
    # a: a1..a3 one hour × 2 GPUs, a4 40→630 and 1230→its end, × 2 GPUs
    a_used = (3 * 3600 + (630 - 40) + (a4_end - 1230)) * 2 / 3600
    assert teams["a"]["gpu_hours_used"] == pytest.approx(a_used)
    assert teams["b"]["gpu_hours_used"] == pytest.approx(600 * 2 / 3600)
    assert teams["a"]["gpu_hours_entitled"] == pytest.approx(4 * end / 3600)
    assert teams["b"]["queue_mean_s"] == pytest.approx(30.0)
    assert teams["b"]["jct_p50_s"] == pytest.approx(630.0)
    assert teams["a"]["queue_mean_s"] == pytest.approx(0.0)
    ratios = [teams[t]["gpu_hours_used"] / teams[t]["gpu_hours_entitled"] for t in "ab"]
    assert s["teams"]["jain_index"] == pytest.approx(jain_index(ratios))


def test_without_teams_nothing_is_reclaimed_and_the_summary_has_no_teams() -> None:
    sim, s = run(None)
    by = {j.spec.job_id: j for j in sim.sim.jobs}
    assert "teams" not in s
    assert all(j.interruptions == 0 for j in sim.sim.jobs)
    assert by["b1"].first_start_s == pytest.approx(3610.0)  # a1 (10 + 3600) frees 2 GPUs


def test_reclaim_takes_a_borrowed_gang_whole() -> None:
    """The same node and teams. a1 and a2 are gangs of two 2-GPU replicas (t = 10, 20): a1 is
    within a's 4 GPUs, a2 borrows b's 4 — the node is full. b1 (2 GPUs) at 600 is within b's
    quota with no idle quota in the cohort: the newest borrowed workload is the gang a2, and it
    goes whole (both replicas, 4 GPUs, though b1 needs 2): it checkpoints (30 s) and b1 starts
    at 630. a2 (a at 4 + 4 would need 4 idle in the cohort, b1 leaves 2) waits until b1 ends at
    1230."""
    sc = default_scenario().model_copy(update={
        "autoscaling": False, "spot": False, "fixed_nodes": 1, "gpu_mtbf_hours": None,
        "instance_types": ("g4dn.metal",), "teams": TEAMS})
    jobs = [JobSpec(f"a{i}", 10.0 * i, 3600.0, TWO_T4, replicas=2, checkpoint_cost_s=30.0,
                    tenant="a") for i in (1, 2)]
    jobs.append(JobSpec("b1", 600.0, 600.0, TWO_T4, tenant="b"))
    sim = Simulation(sc, 0, jobs)
    s = sim.run()
    assert s["jobs_finished"] == 3
    by = {j.spec.job_id: j for j in sim.sim.jobs}
    assert (by["a1"].interruptions, by["a2"].interruptions) == (0, 1)
    assert by["b1"].first_start_s == pytest.approx(630.0)
    assert by["a2"].bound_s == pytest.approx(1230.0)


@pytest.mark.slow
def test_the_embedded_default_with_four_teams_in_one_cohort_finishes() -> None:
    """The embedded default workload (2,000 jobs, tenants vision, nlp, speech, recsys) under
    ``gpufleet`` with the four teams in one cohort (24, 16, 8 and 8 GPUs): every job finishes
    and none is given up on — two teams at the same share once handed one GPU back and forth at
    one instant for ever, and a rule that gave up on jobs reclaimed again and again gave up on
    23 that finish here."""
    teams = TeamsSettings.model_validate({"queues": [
        {"name": name, "gpus": gpus, "cohort": "lab"}
        for name, gpus in (("vision", 24), ("nlp", 16), ("speech", 8), ("recsys", 8))]})
    sim = Simulation(default_scenario().model_copy(update={"name": "gpufleet-teams",
                                                           "teams": teams}), 0)
    s = sim.run()
    assert s["jobs_finished"] == 2000 and s["jobs_lost"] == 0 and s["given_up"] == {}
    assert s["teams"]["jain_index"] > 0.99
