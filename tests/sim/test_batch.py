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
