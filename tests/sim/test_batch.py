"""Scenarios in worker processes give the summaries a serial run gives (timing keys aside)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpufleet.config import scenarios_named
from gpufleet.sim.batch import expected_work, run_all
from gpufleet.sim.summary import TIMING
from gpufleet.traces.synthetic import generate


def test_workers_match_a_serial_run_on_the_default_workload() -> None:
    jobs = generate(seed=0)
    scs = scenarios_named(["static-p99", "gpufleet-no-spot", "chain-sharing"])
    seen: list[tuple[str, float]] = []
    serial = run_all(jobs, scs, seed=0, workers=1)
    parallel = run_all(jobs, scs, seed=0, workers=2,
                       on_progress=lambda name, done, total: seen.append((name, done)))
    assert list(parallel) == [s.name for s in scs]  # the order given, not the run order
    for name, one in serial.items():
        other = parallel[name]
        assert {k: v for k, v in one.summary.items() if k not in TIMING} == {
            k: v for k, v in other.summary.items() if k not in TIMING}
        assert one.finishes == other.finishes
        assert one.series == other.series
        assert other.summary["cpu_seconds"] > 0
    # the workers' progress reaches the caller, up to every job done
    assert {(s.name, len(jobs)) for s in scs} <= set(seen)


def test_longest_first_puts_autoscaled_spot_scenarios_before_the_fixed_fleets() -> None:
    scs = scenarios_named(["static", "gpufleet-no-spot", "gpufleet", "chain-autoscaling-packing"])
    order = [s.name for s in sorted(scs, key=expected_work, reverse=True)]
    assert order == ["gpufleet", "gpufleet-no-spot", "chain-autoscaling-packing", "static"]


def whole_gpu_jobs(fraction: bool = False) -> list:
    """40 small jobs on V100s, whole GPUs (``fraction``: one of them takes half a GPU)."""
    from gpufleet.state import ResourceRequest
    from gpufleet.traces.jobs import JobSpec

    out = []
    for i in range(40):
        milli = 500 if fraction and i == 7 else 1000
        req = ResourceRequest(cpu_milli=2000, memory_mib=8192, num_gpu=1 if i % 5 else 4,
                              gpu_milli=milli if i % 5 else 1000,
                              gpu_models=frozenset({"V100-16GB"}))
        out.append(JobSpec(job_id=f"j{i}", submit_s=300.0 * i, duration_s=1800.0 + 97 * i,
                           request=req))
    return out


def test_twins_are_only_runs_that_differ_in_nothing_decision_relevant() -> None:
    """Case table: (scenario, earlier ones, workload) → the earlier one it repeats, or None."""
    from gpufleet.sim.batch import twin_of

    by = {s.name: s for s in scenarios_named([
        "static", "static-p99", "gpufleet", "gpufleet-no-sharing", "gpufleet-no-spot",
        "chain-autoscaling-packing", "chain-sharing", "sharing", "gpufleet-no-checkpointing",
        "spot", "static-reserved"])}
    # headroom's placeholder pods tolerate spot: where a row keeps it, spot is never inert
    nh = {n: s.model_copy(update={"headroom": False}) for n, s in by.items()}
    whole, frac = whole_gpu_jobs(), whole_gpu_jobs(fraction=True)
    renamed = by["gpufleet"].model_copy(update={"name": "copy"})
    cases = [
        (by, "gpufleet-no-sharing", ["static", "gpufleet"], whole, "gpufleet"),
        # no job can checkpoint: none tolerates spot, so without headroom the market is inert
        (nh, "chain-autoscaling-packing", ["gpufleet-no-checkpointing"], whole,
         "gpufleet-no-checkpointing"),
        (nh, "gpufleet-no-checkpointing", ["chain-autoscaling-packing"], whole,
         "chain-autoscaling-packing"),
        (nh, "chain-sharing", ["static", "gpufleet-no-checkpointing"], frac,
         "gpufleet-no-checkpointing"),
        (by, "chain-autoscaling-packing", ["gpufleet-no-checkpointing"], whole, None),
        (by, "gpufleet-no-checkpointing", ["chain-sharing"], whole, None),
        (nh, "chain-autoscaling-packing", ["gpufleet-no-checkpointing"], frac, None),  # sharing
        (by, "chain-sharing", ["gpufleet", "chain-autoscaling-packing"], whole,
         "chain-autoscaling-packing"),
        (by, "gpufleet-no-sharing", ["gpufleet"], frac, None),  # the half GPU rounds up without
        (by, "gpufleet-no-spot", ["gpufleet"], whole, None),  # checkpointing jobs take spot
        (by, "chain-autoscaling-packing", ["spot"], whole, None),  # a fixed spot fleet
        (by, "static-reserved", ["static-p99"], whole, None),  # re-billed, not the same run
        (by, "static-p99", ["static"], whole, None),  # another fleet size
        (by, "sharing", ["static"], whole, "static"),  # fixed fleet: same demand steps
        (by, "sharing", ["static"], frac, None),
    ]
    for rows, name, earlier, jobs, want in cases:
        got = twin_of(rows[name], [rows[e] for e in earlier], jobs)
        assert (got.name if got else None) == want, (name, earlier)
    assert twin_of(renamed, [by["static"], by["gpufleet"]], frac).name == "gpufleet"


def test_a_derived_row_is_what_running_it_gives() -> None:
    """The proof's check: on a whole-GPU workload gpufleet-no-sharing, run for real, gives
    gpufleet's summary; run_all derives it instead and says from which row."""
    from gpufleet.sim.batch import run_one

    jobs = whole_gpu_jobs()
    [gf, ns] = scenarios_named(["gpufleet", "gpufleet-no-sharing"])
    real = run_one(ns, 0, jobs)
    got = run_all(jobs, [gf, ns], seed=0, workers=1)
    assert got["gpufleet-no-sharing"].summary["derived_from"] == "gpufleet"
    assert "derived_from" not in got["gpufleet"].summary
    strip = TIMING | {"derived_from"}
    assert {k: v for k, v in real.summary.items() if k not in strip} == {
        k: v for k, v in got["gpufleet-no-sharing"].summary.items() if k not in strip}
    assert real.finishes == got["gpufleet-no-sharing"].finishes
    assert real.series == got["gpufleet-no-sharing"].series


def test_spot_inert_needs_autoscaling_no_teams_no_guard_and_no_spot_tolerant_job() -> None:
    """Case table for ``spot_inert``: one change at a time from an inert spot fleet."""
    from gpufleet.queueing.teams.settings import TeamsSettings
    from gpufleet.sim.batch import spot_inert

    [nc] = scenarios_named(["gpufleet-no-checkpointing"])
    nc = nc.model_copy(update={"headroom": False})
    whole = whole_gpu_jobs()
    deadline = [replace(j, deadline_s=j.submit_s + 3 * j.duration_s) if i == 3 else j
                for i, j in enumerate(whole)]
    teams = TeamsSettings.model_validate({"queues": [{"name": "a", "gpus": 4}]})
    cases = [
        (nc, whole, True),
        (nc.model_copy(update={"checkpointing": True}), whole, False),  # jobs take spot
        (nc.model_copy(update={"headroom": True}), whole, False),  # placeholders take spot
        (nc.model_copy(update={"autoscaling": False}), whole, False),  # fixed spot fleet
        (nc.model_copy(update={"teams": teams}), whole, False),  # budgets: spot-only
        (nc, deadline, False),  # the deadline guard runs
        (nc.model_copy(update={"deadline_policy": None}), deadline, True),
    ]
    for sc, jobs, want in cases:
        assert spot_inert(sc, jobs) is want, sc


def test_a_spot_twin_is_what_running_it_gives() -> None:
    """The proof's check for an inert market: chain-autoscaling-packing run for real gives
    gpufleet-no-checkpointing's figures (no job can checkpoint, so none takes spot; no
    headroom, whose placeholders would); run_all derives it and keeps the row's own market
    description."""
    from gpufleet.sim.batch import run_one

    jobs = whole_gpu_jobs()
    nc, chain = (s.model_copy(update={"headroom": False}) for s in scenarios_named(
        ["gpufleet-no-checkpointing", "chain-autoscaling-packing"]))
    real = run_one(nc, 0, jobs)
    got = run_all(jobs, [chain, nc], seed=0, workers=1)
    row = got["gpufleet-no-checkpointing"]
    assert row.summary["derived_from"] == "chain-autoscaling-packing"
    assert row.summary["spot_model"] == real.summary["spot_model"] != "none"
    assert got["chain-autoscaling-packing"].summary["spot_model"] == "none"
    strip = TIMING | {"derived_from"}
    assert {k: v for k, v in real.summary.items() if k not in strip} == {
        k: v for k, v in row.summary.items() if k not in strip}
    assert real.finishes == row.finishes
    assert real.series == row.series


def test_a_rebilled_row_is_what_running_it_gives() -> None:
    """static-reserved is static-p99 billed at the commitment rate: run for real, it gives
    the same figures as the re-billed row (every dollar recomputed per node as the cloud
    bills it); the plot's cost series is the run's scaled by the rate ratio."""
    from gpufleet.sim.batch import rebill_of, run_one

    jobs = generate(seed=0)[:300]
    [p99, res, st] = scenarios_named(["static-p99", "static-reserved", "static"])
    assert rebill_of(res, [st, p99]) is p99
    assert rebill_of(res, [st]) is None  # another fleet size
    assert rebill_of(p99, [res]) is res  # either way round
    assert rebill_of(res.model_copy(update={"spot": True}), [p99]) is None
    real = run_one(res, 0, jobs)
    got = run_all(jobs, [st, p99, res], seed=0, workers=1)
    row = got["static-reserved"]
    assert row.summary["derived_from"] == "static-p99"
    assert row.summary["cpu_seconds"] == 0.0
    strip = TIMING | {"derived_from"}
    assert {k: v for k, v in real.summary.items() if k not in strip} == {
        k: v for k, v in row.summary.items() if k not in strip}
    assert row.summary["cost_usd"] < got["static-p99"].summary["cost_usd"]
    assert real.finishes == row.finishes
    assert row.series.cost_usd == pytest.approx(real.series.cost_usd, rel=1e-6, abs=1e-3)
    assert row.series.t == real.series.t


def test_plan_runs_names_the_runs_a_batch_makes_and_how_the_other_rows_are_made() -> None:
    """On whole GPUs (Philly's kind) the default set runs 9 scenarios, longest first:
    no-sharing repeats gpufleet, chain-sharing repeats chain-autoscaling-packing, and
    static-reserved is static-p99 re-billed. One half-GPU job makes sharing matter again."""
    from gpufleet.config import default_scenarios
    from gpufleet.sim.batch import plan_runs

    scs = default_scenarios()
    runs = plan_runs(whole_gpu_jobs(), scs)
    assert {(a.name, b.name) for a, b in runs.twins} == {
        ("gpufleet-no-sharing", "gpufleet"), ("chain-sharing", "chain-autoscaling-packing")}
    assert {k: [r.name for r in v] for k, v in runs.rebills.items()} == {
        "static-p99": ["static-reserved"]}
    assert len(runs.order) == len(scs) - 3
    assert runs.order == sorted(runs.order, key=expected_work, reverse=True)
    assert runs.order[0].name == "gpufleet"
    frac = plan_runs(whole_gpu_jobs(fraction=True), scs)
    assert [a.name for a, _ in frac.twins] == []
    assert len(frac.order) == len(scs) - 1
