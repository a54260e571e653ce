"""Fair comparisons: right-sized and reserved baselines, leave-one-out and chain scenarios,
and the late-job share, on real small runs and hand-worked cases."""

from __future__ import annotations

import pytest

from gpufleet.config import (
    CHAIN,
    LEVERS,
    builtin_scenarios,
    chain_scenarios,
    default_scenarios,
    leave_one_out,
    scenarios_named,
)
from gpufleet.sim.report import add_relative, views
from gpufleet.sim.runner import Simulation
from gpufleet.sim.summary import job_finishes, late_share
from gpufleet.state import ResourceRequest
from gpufleet.traces.jobs import JobSpec


def bursty() -> list[JobSpec]:
    """Steady 2-GPU load all day, plus a 10-minute burst of 6 more 4-GPU jobs at noon."""
    req = ResourceRequest(cpu_milli=4000, num_gpu=1, gpu_models=frozenset({"V100-16GB"}))
    big = ResourceRequest(cpu_milli=16000, num_gpu=4, gpu_models=frozenset({"V100-16GB"}))
    jobs = [JobSpec(job_id=f"s{i}", submit_s=i * 3600.0, duration_s=7200.0, request=req,
                    interruptible=False) for i in range(24)]
    jobs += [JobSpec(job_id=f"b{i}", submit_s=12 * 3600.0, duration_s=600.0,
                     request=big, interruptible=False) for i in range(6)]
    return sorted(jobs, key=lambda j: (j.submit_s, j.job_id))


def run(name: str, jobs: list[JobSpec]) -> tuple[dict, dict]:
    (sc,) = scenarios_named([name])
    sim = Simulation(sc, seed=0, jobs=jobs)
    return sim.run(), job_finishes(sim.sim)


def test_default_set_has_baselines_gpufleet_leave_one_out_and_chain() -> None:
    names = [s.name for s in default_scenarios()]
    assert names[:4] == ["static", "static-p99", "static-reserved", "gpufleet"]
    assert len(names) == len(set(names))
    by = {s.name: s for s in builtin_scenarios()}
    for lever in LEVERS:
        assert by[f"gpufleet-no-{lever}"].levers == {k: k != lever for k in LEVERS}
        assert by[lever].levers == {k: k == lever for k in LEVERS}  # still there by name
        assert lever not in names  # but not run by default
    on: set[str] = set()
    for step, add in CHAIN:
        on |= set(add)
        assert by[step].levers == {k: k in on for k in LEVERS}
    # what a lever needs comes with it, nothing else changes from gpufleet
    assert by["gpufleet-no-checkpointing"].recovery == "restart-from-zero"
    assert by["gpufleet-no-spot"].deadline_policy is None
    assert by["chain-sharing"].scale_down_unneeded_s == by["gpufleet"].scale_down_unneeded_s
    assert {s.name for s in leave_one_out()} | {s.name for s in chain_scenarios()} <= set(names)


def test_right_sized_static_queues_the_burst_and_costs_less() -> None:
    jobs = bursty()
    peak, fin_peak = run("static", jobs)
    p99, fin_p99 = run("static-p99", jobs)
    # peak: 2 steady + 24 burst GPUs = 26 → 4 p3.16xlarge; p99 ignores the 10-minute burst
    # (0.7 % of the 25-h span): 2 GPUs → 1 node
    assert peak["provisioned_gpu_hours"] > p99["provisioned_gpu_hours"]
    assert p99["cost_usd"] < peak["cost_usd"]
    assert p99["jobs_lost"] == 0 and p99["jobs_finished"] == len(jobs)
    assert p99["queue_p95_s"] > peak["queue_p95_s"]  # the burst waited
    late = late_share(fin_p99, fin_peak)
    assert 0 < late <= 6 / len(jobs) + 1e-9  # only burst jobs can be late (the steady fit)
    reserved, fin_res = run("static-reserved", jobs)
    assert fin_res == fin_p99  # the same run ...
    assert reserved["cost_usd"] == pytest.approx(0.70 * p99["cost_usd"], rel=1e-5)  # ... billed


def test_late_share_hand_worked() -> None:
    base = {"a": 100.0, "b": 200.0, "c": None, "d": 50.0}
    here = {"a": 400.1, "b": 500.0, "c": 10.0, "d": None}
    # a: 300.1 s later (late); b: exactly 300 s (not late); c: not finished in the baseline
    # (left out); d: never finished here (late)
    assert late_share(here, base) == pytest.approx(2 / 3)
    assert late_share(base, base) == 0.0


def test_views_and_relative_costs_from_real_runs() -> None:
    jobs = bursty()
    sums, fins = {}, {}
    for name in ("static", "static-p99", "static-reserved", "gpufleet-no-spot"):
        sums[name], fins[name] = run(name, jobs)
    add_relative(sums, fins)
    v = views(sums)
    assert v["baselines"] == {n: sums[n]["cost_usd"]
                              for n in ("static", "static-p99", "static-reserved")}
    assert list(v["ablation"]) == ["spot"] and v["chain"] == []  # only what ran
    s = sums["gpufleet-no-spot"]
    assert s["cost_vs_static"] == pytest.approx(s["cost_usd"] / sums["static"]["cost_usd"])
    assert s["cost_vs_static_reserved"] == pytest.approx(
        s["cost_usd"] / sums["static-reserved"]["cost_usd"])
    assert s["late_over_5min_share"] == late_share(fins["gpufleet-no-spot"], fins["static"])
    assert s["cost_vs_gpufleet"] is None  # gpufleet did not run
