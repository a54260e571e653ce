"""The simulator finishes or says why not (``sim.progress``), worked by hand.

The livelock case: a fixed fleet of two g4dn.12xlarge (8 T4 GPUs). Teams ``v`` and ``n``, 2.5
GPUs each, in cohort ``lab`` (5 GPUs of quota); ``u`` is unmanaged. At t = 0 v0, v1, n0, n1
and u0…u2 start, each one GPU for an hour (no checkpoints): one GPU is free and the cohort has
one GPU of idle quota. n2 arrives at 10 and borrows it (n at 3 of 2.5). v2 arrives at 11: v is
at 2 of 2.5, so v2 straddles its quota, and the cohort's quota is spent. Giving n2's GPU back
would leave n at 2 of 2.5 — v's own share before v2, 0.8. A tie does not give: v2 waits for
n2 (610), then n3 (arrived at 12) for v2 (1210); nothing is evicted.

Were a tie to give and the evicted work free to take back the room freed for its claimant (no
nomination, ``control.nominations``), v2 would take n2's GPU at 11; at 12 n2 would take v2's
back the same way, n2 would borrow again in the pass that follows at once, v2 would take it
back unstarted, n3 would evict v0 for its own share, v0 would do the same to v2… each pass
undoing the last, at one instant, for ever: the run stops at t = 12 with a report.

The give-up case: one g4dn.xlarge ($0.526/h), team ``a`` with a budget of $0.05 a day and
``hold-and-drain``: $0.05 is 342 s of the node. j0 (team a, an hour, no checkpoints) starts at
0 and is drained at 343 s having kept nothing; every day the budget renews, j0 starts again and
is drained again. After eight such stops the simulator gives up on it and says why, and the run
ends on day 7 (7 × 86,400 + 343 s) instead of going on for ever.

The node-cap case: autoscaled, ``max_nodes`` 2, headroom on (the embedded ``gpufleet``'s levers,
spot, sharing and checkpoints off). Six 1-GPU jobs of a minute at 0 and 60 s run on two
g4dn.xlarge; the buffer keeps a third ready from 1,140 s. At 3,537 s a gang of two 4-GPU
replicas arrives: its cheapest launch is two g4dn.12xlarge in one zone, and with the buffer's
node up the cap leaves room for one. Launching that one would be of no use (the gang needs both)
and, as before, would let the next scan launch the other in another zone, scale-down take the
first back, and so on for ever — 600 nodes a week, the gang never placed. Instead the gang's
launch waits whole, the buffer yields (its idle node goes at once, it is empty past the
600 s), and at the next scale-up (3,600 s, the 60-s wait trigger) both nodes launch in one zone:
the gang runs from 3,780 s, five nodes launched in all.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli import _register, app
from gpufleet.config import default_scenario
from gpufleet.control.nominations import Nominations
from gpufleet.errors import NoProgress
from gpufleet.queueing.teams.quota import QuotaBook
from gpufleet.queueing.teams.settings import TeamsSettings
from gpufleet.sim.engine import Engine
from gpufleet.sim.progress import STARTS_PER_INSTANT, ProgressGuard, events_bound
from gpufleet.sim.runner import Simulation
from gpufleet.state import ResourceRequest
from gpufleet.traces.jobs import JobSpec

ONE_T4 = ResourceRequest(cpu_milli=1000, memory_mib=1024, num_gpu=1,
                         gpu_models=frozenset({"T4"}))
TEAMS = TeamsSettings.model_validate({"queues": [
    {"name": "v", "gpus": 2.5, "cohort": "lab"}, {"name": "n", "gpus": 2.5, "cohort": "lab"}]})


def tie_workload() -> Simulation:
    sc = default_scenario().model_copy(update={
        "autoscaling": False, "spot": False, "fixed_nodes": 2, "gpu_mtbf_hours": None,
        "instance_types": ("g4dn.12xlarge",), "teams": TEAMS})
    jobs = [JobSpec(jid, 0.0, 3600.0, ONE_T4, tenant=jid[0], checkpointable=False)
            for jid in ("v0", "v1", "n0", "n1", "u0", "u1", "u2")]
    jobs += [JobSpec(jid, t, 600.0, ONE_T4, tenant=jid[0], checkpointable=False)
             for jid, t in (("n2", 10.0), ("v2", 11.0), ("n3", 12.0))]
    return Simulation(sc, 0, jobs)


def test_a_tie_does_not_give_and_every_job_finishes() -> None:
    sim = tie_workload()
    s = sim.run()
    assert s["jobs_finished"] == 10 and s["jobs_lost"] == 0
    assert [n.gpus for n in sim.sim.cloud.nodes.values()] == [4, 4]
    by = {j.spec.job_id: j for j in sim.sim.jobs}
    assert all(j.interruptions == 0 for j in by.values())
    assert [by[j].first_start_s for j in ("n2", "v2", "n3")] == [10.0, 610.0, 1210.0]


def tie_gives(self: QuotaBook, team: str, left: int, milli: int, claimant: str,
              over: int) -> bool:
    """``QuotaBook.gives_back`` as it would be if a tie gave (≥ for >)."""
    if left <= 0 or team not in self.teams:
        return False
    if over <= 0:
        return True
    t, c = self.teams[team], self.teams[claimant]
    return (t.nominal_milli + left - milli) * c.nominal_milli >= (
        self.usage[claimant] * t.nominal_milli)


def undo_safeguards(monkeypatch: pytest.MonkeyPatch) -> None:
    """Take away both rules that keep this workload from taking turns: a tie gives, and a
    reclaim's claimant is not nominated (``control.nominations``)."""
    monkeypatch.setattr(QuotaBook, "gives_back", tie_gives)
    monkeypatch.setattr(Nominations, "current", lambda self, now: [])


def test_a_rule_that_undoes_itself_stops_with_a_report(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tie given and no nomination: the run stops at t = 12 with a report naming the pass,
    the time and the jobs taking turns, within a few dozen events."""
    undo_safeguards(monkeypatch)
    sim = tie_workload()
    with pytest.raises(NoProgress) as err:
        sim.run()
    msg = str(err.value)
    assert msg.startswith("the simulation stopped making progress while handling a "
                          "scheduling pass event: job v2 (team v) started "
                          f"{STARTS_PER_INSTANT + 1} times at t=12.00 s")
    assert "jobs started most at this instant: v2 (team v) ×9, v0 (team v) ×8" in msg
    assert msg.endswith("This is a defect in gpufleet's rules, not in the input: please "
                        "report it with the scenario file and the workload.")
    assert sim.now == 12.0 and sim.sim.engine.steps < 100


def test_a_job_drained_every_day_without_keeping_work_is_given_up() -> None:
    teams = TeamsSettings.model_validate({"queues": [{"name": "a", "gpus": 1, "budget": {
        "usd": 0.05, "period": "day", "action": "hold-and-drain"}}]})
    sc = default_scenario().model_copy(update={
        "autoscaling": False, "spot": False, "fixed_nodes": 1, "gpu_mtbf_hours": None,
        "instance_types": ("g4dn.xlarge",), "teams": teams})
    jobs = [JobSpec("j0", 0.0, 3600.0, ONE_T4, tenant="a", checkpointable=False),
            JobSpec("j1", 0.0, 60.0, ONE_T4, tenant="b")]
    sim = Simulation(sc, 0, jobs)
    s = sim.run()
    assert s["jobs_finished"] == 1 and s["jobs_lost"] == 1
    assert s["given_up"] == {"j0": (
        "drained 8 times in a row without keeping any work; the last: budget drain: team a: "
        "budget $0.05 of $0.05 spent; new work waits until the period renews; running work is "
        "evicted")}
    assert s["makespan_s"] == 7 * 86400.0 + 343.0
    j0, j1 = sim.sim.jobs
    assert j0.interruptions == 8 and j1.first_start_s == 343.0 and j1.finish_s == 403.0


def test_a_gang_under_a_node_cap_launches_whole_before_the_buffer() -> None:
    one = ResourceRequest(cpu_milli=1000, memory_mib=1024, num_gpu=1)
    four = ResourceRequest(cpu_milli=1000, memory_mib=1024, num_gpu=4)
    jobs = [JobSpec(f"j{i}", 0.0 if i < 5 else 60.0, 60.0, one, checkpointable=False)
            for i in range(6)]
    jobs.append(JobSpec("gang", 3537.0, 60.0, four, replicas=2, checkpointable=False))
    sc = default_scenario().model_copy(update={
        "instance_types": ("g4dn.xlarge", "g4dn.12xlarge", "p4d.24xlarge"),
        "gpu_mtbf_hours": None, "spot": False, "sharing": False, "checkpointing": False,
        "max_nodes": 2})
    assert sc.headroom
    sim = Simulation(sc, 0, jobs)
    t = 0.0
    while sim.run_until(t) and t < 3 * 86400.0:  # bounded: the defect ran for ever
        t += 86400.0
    assert sim.done
    s = sim.summary()
    assert s["jobs_finished"] == 7 and s["nodes_launched"] == 5
    nodes = list(sim.sim.cloud.nodes.values())
    assert [(n.itype.name, n.ready_s) for n in nodes[2:]] == [
        ("g4dn.xlarge", 1140.0), ("g4dn.12xlarge", 3780.0), ("g4dn.12xlarge", 3780.0)]
    assert nodes[3].zone == nodes[4].zone
    assert sim.sim.jobs[-1].first_start_s == 3780.0


def test_a_gang_no_node_of_a_fixed_fleet_can_hold_ends_the_run() -> None:
    """A fixed fleet of one g4dn.12xlarge (4 GPUs) and a gang of two 4-GPU replicas: no room
    will free, no node can be launched and nothing can be evicted. The gang's pricing books no
    timer, so the run ends at once with the gang lost (it used to price it again every 600 s,
    for ever)."""
    four = ResourceRequest(cpu_milli=1000, memory_mib=1024, num_gpu=4)
    sc = default_scenario().model_copy(update={
        "instance_types": ("g4dn.12xlarge",), "gpu_mtbf_hours": None, "spot": False,
        "autoscaling": False, "fixed_nodes": 1})
    sim = Simulation(sc, 0, [JobSpec("gang", 0.0, 60.0, four, replicas=2)])
    assert not sim.run_until(86400.0)
    s = sim.summary()
    assert s["jobs_lost"] == 1 and s["makespan_s"] == 0.0


def test_a_pod_behind_one_its_quota_holds_is_still_launched_for() -> None:
    """Team a has 1 GPU of quota and no cohort; ``big`` (2 GPUs, t = 0) can never start.
    ``small`` (1 GPU, t = 1,000) is below the 2-GPU scale-up threshold, so its launch waits
    for the 60-s trigger: the scan at 1,060 launches a g4dn.xlarge (ready 1,240). The next scan
    used to be asked for when the *oldest* pending job crossed the trigger — ``big``'s, long
    past — so none came, and the run ended at 1,200 with both jobs lost."""
    teams = TeamsSettings.model_validate({"queues": [{"name": "a", "gpus": 1}]})
    sc = default_scenario().model_copy(update={
        "instance_types": ("g4dn.xlarge", "g4dn.12xlarge"), "gpu_mtbf_hours": None,
        "spot": False, "headroom": False, "teams": teams})
    two = ResourceRequest(cpu_milli=1000, memory_mib=1024, num_gpu=2,
                          gpu_models=frozenset({"T4"}))
    sim = Simulation(sc, 0, [JobSpec("big", 0.0, 600.0, two, tenant="a"),
                             JobSpec("small", 1000.0, 600.0, ONE_T4, tenant="a")])
    s = sim.run()
    assert s["jobs_finished"] == 1 and s["jobs_lost"] == 1
    big, small = sim.sim.jobs
    assert big.first_start_s is None and (small.first_start_s, small.finish_s) == (1240.0, 1840.0)


@pytest.mark.slow
def test_a_gang_whose_wait_lapses_while_its_team_is_over_quota_does_not_stall_the_run() -> None:
    """The embedded workload on ``gpufleet`` with a fixed fleet (four nodes, no autoscaling, no
    spot) under quotas:
    vision 16 GPUs (borrowing 8), nlp 8 and speech 8 in one cohort, recsys 4 alone. At
    t = 597,720 s a gang's gang-room wait lapses while its team is over quota, so the pass the
    lapse asks for does not price it again; the lapse is spent by that pass
    (``GangRoomBook.apply``) instead of asking for another pass at the same instant, for ever.
    The run ends with every job finished or given up (about 10 s)."""
    teams = TeamsSettings.model_validate({"half_life_s": 604800, "queues": [
        {"name": "vision", "gpus": 16, "cohort": "research", "borrowing_limit": 8},
        {"name": "nlp", "gpus": 8, "cohort": "research"},
        {"name": "speech", "gpus": 8, "cohort": "research"},
        {"name": "recsys", "gpus": 4}]})
    sc = default_scenario().model_copy(update={
        "autoscaling": False, "spot": False, "fixed_nodes": 4, "teams": teams})
    s = Simulation(sc, 0).run()
    assert s["jobs_total"] == 2000 and s["jobs_finished"] + s["jobs_lost"] == 2000


def test_guard_counts_starts_per_instant() -> None:
    guard = ProgressGuard(lambda i: f"job-{i}")
    for _ in range(STARTS_PER_INSTANT):
        guard.started(1, 5.0)
        guard.started(2, 5.0)
    guard.started(1, 6.0)  # a new instant: the count starts again
    for _ in range(STARTS_PER_INSTANT - 1):
        guard.started(1, 6.0)
    with pytest.raises(NoProgress, match=r"job job-1 started 9 times at t=6\.00 s"):
        guard.started(1, 6.0)


def test_stalled_names_the_jobs_started_or_else_the_queue() -> None:
    guard = ProgressGuard(lambda i: f"job-{i}")
    err = guard.stalled(7.0, 20_001, 20_000, [3, 4])
    assert str(err) == ("20,001 events at t=7.00 s, past the bound of 20,000 for one instant; "
                        "none started at this instant; 2 pending, first job-3, job-4")
    guard.started(9, 7.0)
    guard.started(9, 7.0)
    guard.started(8, 7.0)
    assert str(guard.stalled(7.0, 5, 4, [])).endswith(
        "jobs started most at this instant: job-9 ×2, job-8 ×1")


def test_engine_counts_events_at_the_current_instant() -> None:
    eng = Engine()
    for t in (0.0, 0.0, 1.0, 1.0, 1.0, 2.0):
        eng.schedule(t, 0)
    got = []
    while len(eng):
        eng.pop()
        got.append(eng.at_instant)
    assert got == [1, 2, 1, 2, 3, 1]


def test_the_events_bound_grows_with_jobs_and_nodes() -> None:
    assert events_bound(0, 0) == 10_000
    assert events_bound(2000, 100) == 10_000 + 16 * 2100


def test_the_cli_prints_the_report_and_exits_3(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """``gpufleet simulate`` on the same workload and teams, written as files: one error
    paragraph, exit status 3, no traceback."""
    undo_safeguards(monkeypatch)
    _register()
    trace = tmp_path / "jobs.yaml"
    rows = [f"  - {{job_id: {j}, submit_s: 0, duration_s: 3600, num_gpu: 1, cpu_milli: 1000, "
            f"memory_mib: 1024, gpu_models: T4, tenant: {j[0]}, checkpointable: false}}"
            for j in ("v0", "v1", "n0", "n1", "u0", "u1", "u2")]
    rows += [f"  - {{job_id: {j}, submit_s: {t}, duration_s: 600, num_gpu: 1, cpu_milli: 1000, "
             f"memory_mib: 1024, gpu_models: T4, tenant: {j[0]}, checkpointable: false}}"
             for j, t in (("n2", 10), ("v2", 11), ("n3", 12))]
    trace.write_text("jobs:\n" + "\n".join(rows) + "\n")
    scenario = tmp_path / "teams.yaml"
    scenario.write_text(
        "name: tie\nautoscaling: false\nspot: false\nfixed_nodes: 2\n"
        "instance_types: [g4dn.12xlarge]\nteams:\n  queues:\n"
        "    - {name: v, gpus: 2.5, cohort: lab}\n    - {name: n, gpus: 2.5, cohort: lab}\n")
    got = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--scenario",
                                   str(scenario), "--only", "tie", "--workers", "1",
                                   "--out", str(tmp_path / "out")])
    assert got.exit_code == 3, got.output
    assert "error: the simulation stopped making progress while handling a scheduling pass " \
           "event: job v2 (team v) started 9 times at t=12.00 s" in " ".join(got.output.split())
    assert "Traceback" not in got.output
