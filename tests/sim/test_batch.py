"""Scenarios in worker processes give the summaries a serial run gives (timing keys aside)."""

from __future__ import annotations

from gpufleet.config import scenarios_named
from gpufleet.sim.batch import expected_work, run_all
from gpufleet.traces.synthetic import generate

TIMING = {"wall_seconds", "events_per_s", "cpu_seconds"}


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
        "chain-autoscaling-packing", "chain-sharing", "sharing"])}
    whole, frac = whole_gpu_jobs(), whole_gpu_jobs(fraction=True)
    renamed = by["gpufleet"].model_copy(update={"name": "copy"})
    cases = [
        ("gpufleet-no-sharing", ["static", "gpufleet"], whole, "gpufleet"),
        ("chain-sharing", ["gpufleet", "chain-autoscaling-packing"], whole,
         "chain-autoscaling-packing"),
        ("gpufleet-no-sharing", ["gpufleet"], frac, None),  # the half GPU rounds up without
        ("gpufleet-no-spot", ["gpufleet"], whole, None),  # spot is decision-relevant
        ("static-p99", ["static"], whole, None),  # another fleet size
        ("sharing", ["static"], whole, "static"),  # fixed fleet: same demand steps
        ("sharing", ["static"], frac, None),
    ]
    for name, earlier, jobs, want in cases:
        got = twin_of(by[name], [by[e] for e in earlier], jobs)
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
