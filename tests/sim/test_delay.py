"""Delay per job as users feel it (``sim.summary.delay_vs_static``, ``delay_vs_run_time``,
``sim.report.add_relative`` / ``team_delays``): hand-worked cases, then a small real run."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.config import scenarios_named
from gpufleet.sim.report import add_relative, team_delays
from gpufleet.sim.runner import Simulation
from gpufleet.sim.summary import delay_vs_run_time, delay_vs_static, job_finishes
from gpufleet.state import ResourceRequest
from gpufleet.traces.jobs import JobSpec

# (finishes here, finishes under static) → (paired delays, unfinished here, unfinished static)
STATIC_CASES = [
    # a: 300 s later, b: 100 s earlier (negative), c: the same
    ({"a": 400.0, "b": 100.0, "c": 50.0}, {"a": 100.0, "b": 200.0, "c": 50.0},
     [300.0, -100.0, 0.0], 0, 0),
    # d finished under static only: counted, no delay; e finished here only: counted
    ({"a": 100.0, "d": None, "e": 70.0}, {"a": 100.0, "d": 40.0, "e": None}, [0.0], 1, 1),
    # a job neither run finished is in no count
    ({"x": None}, {"x": None}, [], 0, 0),
]


@pytest.mark.parametrize(("here", "base", "delays", "miss_here", "miss_static"), STATIC_CASES)
def test_delay_vs_static_cases(here: dict, base: dict, delays: list[float], miss_here: int,
                               miss_static: int) -> None:
    got = delay_vs_static(here, base)
    assert got["delay_vs_static_jobs_paired"] == len(delays)
    assert got["delay_vs_static_jobs_unfinished_here"] == miss_here
    assert got["delay_vs_static_jobs_unfinished_static"] == miss_static
    mean = sum(delays) / len(delays) if delays else 0.0
    assert got["delay_vs_static_mean_s"] == pytest.approx(mean)


def test_delay_vs_static_percentiles_hand_worked() -> None:
    # delays 0, 10, 20, ..., 1000 s (101 jobs): p50 = 500, p95 = 950, p99 = 990 exactly
    base = {f"j{i}": 1000.0 for i in range(101)}
    here = {f"j{i}": 1000.0 + 10.0 * i for i in range(101)}
    got = delay_vs_static(here, base)
    assert got["delay_vs_static_p50_s"] == pytest.approx(500.0)
    assert got["delay_vs_static_p95_s"] == pytest.approx(950.0)
    assert got["delay_vs_static_p99_s"] == pytest.approx(990.0)
    assert got["delay_vs_static_mean_s"] == pytest.approx(500.0)
    # no job in common: zeros, not NaN, and the counts say why
    empty = delay_vs_static({}, {"a": 1.0})
    assert empty["delay_vs_static_p95_s"] == 0.0
    assert empty["delay_vs_static_jobs_unfinished_here"] == 1


def test_delay_vs_run_time_hand_worked() -> None:
    # (JCT, run time): ran at once (0 s, 0.0), waited 600 s for a 600-s run (600 s, 1.0),
    # waited 100 s for a 1000-s run (100 s, 0.1)
    got = delay_vs_run_time(np.array([3600.0, 1200.0, 1100.0]), np.array([3600.0, 600.0, 1000.0]))
    assert got["delay_vs_run_time_mean_s"] == pytest.approx(700.0 / 3)
    assert got["delay_vs_run_time_p50_s"] == pytest.approx(100.0)
    # numpy's linear percentile over (0, 100, 600): rank 0.95 × 2 = 1.9 → 100 + 0.9 × 500
    assert got["delay_vs_run_time_p95_s"] == pytest.approx(550.0)
    assert got["delay_over_run_time_p50"] == pytest.approx(0.1)
    assert got["delay_over_run_time_p95"] == pytest.approx(0.1 + 0.9 * 0.9)
    assert delay_vs_run_time(np.array([]), np.array([]))["delay_vs_run_time_p99_s"] == 0.0


def test_team_delays_hand_worked() -> None:
    teams = {"per_team": {"a": {"jobs_finished": 2}, "b": {"jobs_finished": 1}},
             "jain_index": 1.0}
    base = {"a1": 100.0, "a2": 100.0, "b1": 100.0}
    here = {"a1": 1000.0, "a2": 100.0, "b1": 150.0}
    tenants = {"a1": "a", "a2": "a", "b1": "b"}
    got = team_delays(teams, here, base, tenants)
    # a: a1 900 s late (late), a2 on time → 1/2; p95 of (900, 0) = 855
    assert got["per_team"]["a"]["late_over_5min_share"] == pytest.approx(0.5)
    assert got["per_team"]["a"]["delay_vs_static_p95_s"] == pytest.approx(855.0)
    assert got["per_team"]["a"]["jobs_finished"] == 2  # the row's other figures are kept
    # b: 50 s later, not late
    assert got["per_team"]["b"]["late_over_5min_share"] == 0.0
    assert got["per_team"]["b"]["delay_vs_static_p95_s"] == pytest.approx(50.0)
    assert got["jain_index"] == 1.0
    assert "late_over_5min_share" not in teams["per_team"]["a"]  # the input is not changed


def burst() -> list[JobSpec]:
    """A steady 2-GPU load all day (a 2-h 1-GPU job an hour), plus six 4-GPU ten-minute jobs
    at once at noon: 0.7 % of the span, so the p99-sized fleet has no room for them."""
    one = ResourceRequest(cpu_milli=4000, num_gpu=1, gpu_models=frozenset({"V100-16GB"}))
    four = ResourceRequest(cpu_milli=16000, num_gpu=4, gpu_models=frozenset({"V100-16GB"}))
    jobs = [JobSpec(job_id=f"s{i}", submit_s=i * 3600.0, duration_s=7200.0, request=one,
                    interruptible=False) for i in range(24)]
    jobs += [JobSpec(job_id=f"b{i}", submit_s=12 * 3600.0, duration_s=600.0, request=four,
                     interruptible=False) for i in range(6)]
    return sorted(jobs, key=lambda j: (j.submit_s, j.job_id))


def test_delays_of_a_real_run_against_static() -> None:
    jobs = burst()
    sums, fins = {}, {}
    for name in ("static", "static-p99"):
        (sc,) = scenarios_named([name])
        sim = Simulation(sc, seed=0, jobs=jobs)
        sums[name], fins[name] = sim.run(), job_finishes(sim.sim)
        finished = [j for j in sim.sim.jobs if j.finish_s is not None]
        assert len(finished) == len(jobs)
        # time not running, from the run's own jobs
        waits = sorted(j.finish_s - j.spec.submit_s - j.spec.duration_s for j in finished)
        assert sums[name]["delay_vs_run_time_mean_s"] == pytest.approx(
            sum(waits) / len(waits))
    add_relative(sums, fins, {j.job_id: j.tenant for j in jobs})
    static, p99 = sums["static"], sums["static-p99"]
    # static against itself: no delay; sized for the peak, nothing waits
    assert static["delay_vs_static_p99_s"] == 0.0
    assert static["delay_vs_static_jobs_paired"] == len(jobs)
    assert static["delay_vs_run_time_p99_s"] == pytest.approx(0.0, abs=1e-6)
    # the p99-sized fleet queues the burst: some burst job waits a run or more
    delays = {k: fins["static-p99"][k] - fins["static"][k] for k in fins["static"]}  # type: ignore[operator]
    assert p99["delay_vs_static_mean_s"] == pytest.approx(sum(delays.values()) / len(jobs))
    assert max(delays.values()) >= 600.0
    assert p99["delay_vs_static_p99_s"] >= p99["delay_vs_static_p95_s"] \
        >= p99["delay_vs_static_p50_s"]
    assert p99["delay_vs_run_time_p99_s"] >= 600.0
    assert p99["delay_over_run_time_p95"] > 0.0
    late = sum(1 for d in delays.values() if d > 300.0) / len(jobs)
    assert p99["late_over_5min_share"] == pytest.approx(late)
    assert p99["delay_vs_static_jobs_unfinished_here"] == 0
