"""Unexpected node failures: lost work, requeue, replacement, the Young/Daly interval they
imply on on-demand nodes, and a failure process whose count matches its rate."""

from __future__ import annotations

import math

import pytest

from gpufleet.config import LLAMA3_GPU_MTBF_HOURS, Scenario, builtin_scenarios
from gpufleet.sim.cloud import MICRO
from gpufleet.sim.invariants import check_accounting
from gpufleet.sim.jobrun import DONE, RUNNING
from gpufleet.sim.runner import Simulation
from gpufleet.state import ResourceRequest
from gpufleet.traces.jobs import JobSpec

V100 = frozenset({"V100-16GB"})


def scenario(name: str, **kw) -> Scenario:
    return next(s for s in builtin_scenarios() if s.name == name).model_copy(update=kw)


def one_job(hours: float = 10.0) -> list[JobSpec]:
    req = ResourceRequest(cpu_milli=4000, memory_mib=12288, num_gpu=1, gpu_models=V100)
    return [JobSpec("long", 0.0, hours * 3600.0, req)]


def test_llama3_rate_is_computed_from_the_report() -> None:
    # 419 unexpected interruptions in 54 days on 16,384 GPUs
    assert abs(LLAMA3_GPU_MTBF_HOURS - 16384 * 54 * 24 / 419) < 1e-9
    assert round(LLAMA3_GPU_MTBF_HOURS) == 50677
    assert all(s.gpu_mtbf_hours == LLAMA3_GPU_MTBF_HOURS for s in builtin_scenarios())
    assert Scenario(name="mine").gpu_mtbf_hours is None  # scenario files: off by default


@pytest.mark.parametrize(
    ("name", "extra", "lost_s", "finish_s"),
    [
        # no checkpoints: 5 h of work lost; replacement boots 180 s, restart overhead 120 s,
        # then all 10 h again: 18,000 + 300 + 36,000
        ("static", {}, 18000.0, 54300.0),
        # checkpoint every 3,600 s of work at 30 s each: at 18,000 s four cycles of 3,630 s are
        # done (14,400 s saved) and 3,480 s of work since: lost; resume at 14,400 s; 21,600 s
        # left = 6 chunks, 5 checkpoints: 18,000 + 300 + 21,600 + 150
        ("checkpointing", {"checkpoint_interval_s": 3600.0}, 3480.0, 40050.0),
    ],
)
def test_failure_loses_work_since_last_checkpoint(
    name: str, extra: dict, lost_s: float, finish_s: float
) -> None:
    sim = Simulation(scenario(name, gpu_mtbf_hours=None, **extra), 0, one_job())
    cs = sim.sim
    sim.run_until(18000.0)
    (j,) = cs.jobs
    assert j.state == RUNNING
    ((bind, _),) = j.binds
    failed = cs.cloud.nodes[bind.node]
    cs._on_fail(bind.node)
    assert failed.state == "gone" and failed.ended_s == 18000.0
    assert cs.tally.node_failures == 1 and cs.tally.failure_interruptions == 1
    s = sim.run()
    assert s["jobs_lost"] == 0 and j.state == DONE
    assert j.lost_work_s == pytest.approx(lost_s)
    assert s["lost_gpu_hours"] == pytest.approx(lost_s / 3600.0)
    assert j.finish_s == pytest.approx(finish_s)
    assert s["node_failures"] == 1 and s["interruptions"] == 1
    assert s["recovery_p50_s"] == pytest.approx(300.0)  # failure → running past its overhead


def test_young_daly_on_demand_uses_the_failure_rate() -> None:
    # static's fixed type for V100 is p3.16xlarge (8 GPUs; ties p3.2xlarge per GPU, larger
    # wins): node MTBF = 1,000 / 8 h = 450,000 s; tau = sqrt(2 · 30 · 450,000) = 5,196.2 s
    sim = Simulation(scenario("checkpointing", gpu_mtbf_hours=1000.0), 0, one_job())
    sim.run_until(60.0)
    (j,) = sim.sim.jobs
    assert sim.sim.cloud.nodes[j.binds[0][0].node].gpus == 8
    assert j.ckpt_tau == pytest.approx(math.sqrt(2 * 30 * 450_000))
    # without failures an on-demand node has nothing to insure against
    quiet = Simulation(scenario("checkpointing", gpu_mtbf_hours=None), 0, one_job())
    quiet.run_until(60.0)
    assert quiet.sim.jobs[0].ckpt_tau == math.inf


def workload(n: int = 40) -> list[JobSpec]:
    req = ResourceRequest(cpu_milli=4000, memory_mib=12288, num_gpu=1, gpu_models=V100)
    return [JobSpec(f"j{i}", i * 900.0, (4 + i % 9) * 3600.0, req) for i in range(n)]


def test_failure_process_rate_conservation_and_checkpoint_value() -> None:
    """A high failure rate (one per 200 GPU-hours) on a fixed fleet: the count matches the
    rate, every job still ends exactly once, billing matches lifetimes, and checkpointing alone
    loses less work than restarting from zero."""
    jobs = workload()
    runs = {}
    for name in ("static", "checkpointing"):
        sim = Simulation(scenario(name, gpu_mtbf_hours=200.0), 0, jobs)
        s = sim.run()
        cs = sim.sim
        runs[name] = s
        assert s["jobs_finished"] == len(jobs) and s["jobs_lost"] == 0
        assert all(j.state == DONE for j in cs.jobs) and cs.life.done == len(jobs)
        assert s["allocated_gpu_hours"] <= s["provisioned_gpu_hours"] + 1e-9
        bill = sum(round(n.usd_per_hour * MICRO) * math.ceil(n.ended_s - n.launched_s) // 3600
                   for n in cs.cloud.nodes.values())
        assert s["cost_usd"] == pytest.approx(bill / MICRO)
        # ready GPU-hours / 200 failures expected; Poisson: within 4 standard deviations
        ready_h = sum(n.gpus * (n.ended_s - n.ready_s) for n in cs.cloud.nodes.values()
                      if n.ended_s is not None and n.ended_s > n.ready_s) / 3600.0
        expect = ready_h / 200.0
        assert abs(s["node_failures"] - expect) <= 4 * math.sqrt(expect) + 1
        assert s["node_failures"] >= 1
        # every failed node was replaced once (the fixed fleet keeps its size)
        initial = sum(1 for n in cs.cloud.nodes.values() if n.launched_s == 0.0)
        assert cs.cloud.launches == initial + s["node_failures"]
    assert runs["checkpointing"]["lost_gpu_hours"] < runs["static"]["lost_gpu_hours"]
    # same seed, same failures
    again = Simulation(scenario("static", gpu_mtbf_hours=200.0), 0, jobs).run()
    assert again["node_failures"] == runs["static"]["node_failures"]
    assert again["cost_usd"] == runs["static"]["cost_usd"]


def test_every_interruption_on_an_on_demand_fleet_is_a_failure() -> None:
    """Without spot and without consolidation moves (which are graceful, not counted), the only
    interruptions are failures: the two counters must agree, and the snapshot's spot counter
    (interruptions − failure interruptions) must stay 0."""
    jobs = workload(20)
    sim = Simulation(scenario("gpufleet", gpu_mtbf_hours=100.0, spot=False), 0, jobs)
    s = sim.run()
    assert s["node_failures"] >= 1 and s["jobs_lost"] == 0
    assert s["failure_interruptions"] == s["interruptions"] >= 1
    assert sim.snapshot().spot_interruptions_total == 0
    assert check_accounting(sim.sim) == []


def test_gang_on_two_failing_nodes_is_interrupted_once() -> None:
    """A 2-node gang on a fixed fleet; both its nodes fail at the same instant: one failure
    interruption (the job leaves once), two node failures, and the books still balance."""
    req = ResourceRequest(cpu_milli=32000, memory_mib=96 * 1024, num_gpu=8, gpu_models=V100)
    jobs = [JobSpec("gang", 0.0, 10 * 3600.0, req, replicas=2)]
    sim = Simulation(scenario("checkpointing", gpu_mtbf_hours=None), 0, jobs)
    cs = sim.sim
    sim.run_until(18000.0)
    (j,) = cs.jobs
    for bind, _ in list(j.binds):
        cs._on_fail(bind.node)
    assert cs.tally.node_failures == 2 and cs.tally.failure_interruptions == 1
    assert j.interruptions == 1
    s = sim.run()
    assert s["jobs_lost"] == 0 and s["interruptions"] == 1
    assert check_accounting(cs) == []


def node_rows(sim: Simulation) -> dict[str, tuple[str, str, str, str, int]]:
    """name -> (instance type, capacity type, zone, state, allocated milli), from the snapshot."""
    return {n.name: (n.instance_type, n.capacity_type, n.zone, n.state, n.allocated_milli)
            for n in sim.snapshot().nodes}


def test_fixed_fleet_replaces_a_failed_node_seen_in_the_snapshot() -> None:
    """static sizes one p3.16xlarge for one 1-GPU job. It fails at 18,000 s: the snapshot shows
    it gone and a new node of the same type, capacity type and zone booting; 180 s later that
    node is ready and holds the restarted job."""
    sim = Simulation(scenario("static", gpu_mtbf_hours=None), 0, one_job())
    sim.run_until(18000.0)
    ((old, row),) = node_rows(sim).items()
    assert row[3] == "ready" and row[4] == 1000
    sim.sim._on_fail(old)
    now = node_rows(sim)
    assert old not in now
    ((new, row2),) = now.items()
    assert row2[:3] == row[:3] and row2[3] == "provisioning" and row2[4] == 0
    sim.run_until(18000.0 + 180.0)
    assert node_rows(sim)[new][3:] == ("ready", 1000)
    assert sum(sim.snapshot().jobs_running.values()) == 1


def test_fixed_spot_fleet_replaces_a_reclaimed_node_seen_in_the_snapshot() -> None:
    """The spot lever's fixed fleet, with checkpointing (a job that cannot checkpoint stays off
    spot; flat price path: spot always available): a node's notice at 18,000 s; it is gone
    after the 120-s notice and a spot node of the same type boots in its place, ready 180 s
    later with the job back on it."""
    sc = scenario("spot", gpu_mtbf_hours=None, spot_market="price", price_volatility=0.0,
                  checkpointing=True, recovery="checkpoint-requeue")
    sim = Simulation(sc, 0, one_job())
    sim.run_until(18000.0)
    ((old, row),) = node_rows(sim).items()
    assert row[1] == "spot" and row[3] == "ready"
    sim.sim._on_notice(old)
    sim.run_until(18000.0 + 120.0)
    now = node_rows(sim)
    assert old not in now
    ((new, row2),) = now.items()
    assert row2[:2] == row[:2] and row2[3] == "provisioning"
    sim.run_until(18000.0 + 120.0 + 180.0)
    assert node_rows(sim)[new][3:] == ("ready", 1000)


def test_autoscaled_fleet_replaces_failed_capacity_within_one_scan() -> None:
    """gpufleet without spot, one 2-GPU job (2 pending GPUs meet the scale-up trigger at once):
    its node fails at 18,000 s; the requeued job triggers a scan at once, so the snapshot shows
    a new on-demand node of the same type booting within one scan interval, ready 180 s
    later and holding the job."""
    req = ResourceRequest(cpu_milli=8000, memory_mib=24576, num_gpu=2, gpu_models=V100)
    sc = scenario("gpufleet", gpu_mtbf_hours=None, spot=False)
    sim = Simulation(sc, 0, [JobSpec("two", 0.0, 10 * 3600.0, req)])
    sim.run_until(18000.0)
    ((old, row),) = node_rows(sim).items()
    sim.sim._on_fail(old)
    assert old not in node_rows(sim) and sum(sim.snapshot().jobs_pending.values()) == 1
    sim.run_until(18000.0 + sc.scan_interval_s)
    ((new, row2),) = node_rows(sim).items()
    assert row2[:2] == row[:2] and row2[3] == "provisioning"
    sim.run_until(18000.0 + sc.scan_interval_s + sc.provisioning_delay_s)
    assert node_rows(sim)[new][3:] == ("ready", 2000)
    s = sim.run()
    assert s["jobs_lost"] == 0 and s["node_failures"] == 1
