"""The sweep's grid: cells equal to ``simulate``'s summaries whatever runs them, and the
table's aggregates over the seeds."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from gpufleet.config import scenarios_named
from gpufleet.errors import InputError
from gpufleet.optiontypes import parse_seeds
from gpufleet.sim.batch import run_all
from gpufleet.sim.report import add_relative
from gpufleet.sim.summary import TIMING
from gpufleet.sim.sweep import (
    MAX_SEEDS,
    Cell,
    Workload,
    grid,
    grid_tables,
    groups_of,
    run_grid,
    run_local,
    seeds_text,
    synthetic_workload,
    trace_workload,
)
from gpufleet.traces.synthetic import SyntheticWorkload, generate

SCENARIOS = ["static", "gpufleet", "gpufleet-no-spot"]


def untimed(cells: list[Cell]) -> list[tuple[str, int, str, dict]]:
    return [(c.workload, c.seed, c.scenario,
             {k: v for k, v in c.summary.items() if k not in TIMING}) for c in cells]


def test_two_workers_give_the_serial_cells_and_each_cell_is_simulates_summary() -> None:
    small = synthetic_workload("jobs=40,days=0.1")
    gangs = synthetic_workload("jobs=30,days=0.1,gpu_count_weights=4/2/1/1/1/0")
    scs = scenarios_named(SCENARIOS)
    groups = groups_of([small, gangs], [0, 1], scs)
    seen: list[str] = []
    serial = run_grid(groups, scs, run_local(1))
    parallel = run_grid(groups, scs, run_local(2), lambda run: seen.append(run.scenario.name))
    assert untimed(serial) == untimed(parallel)  # to the bit: == on every float
    assert [(c.workload, c.seed, c.scenario) for c in serial] == [
        (w.label, seed, name) for w in (small, gangs) for seed in (0, 1) for name in SCENARIOS]
    assert len(seen) == sum(len(g.plan.order) for g in groups)  # each run reported once
    # a cell is what ``gpufleet simulate --seed 1 --only ...`` computes for that scenario: the
    # workload drawn under the seed, the runs of sim.batch, compared with the same static run
    assert small.params is not None
    jobs = generate(small.params, seed=1)
    outcomes = run_all(jobs, scs, seed=1, workers=1)
    summaries = {name: dict(o.summary) for name, o in outcomes.items()}
    add_relative(summaries, {name: o.finishes for name, o in outcomes.items()})
    cells = {c.scenario: c.summary for c in serial if c.workload == small.label and c.seed == 1}
    for name, s in summaries.items():
        assert {k: v for k, v in s.items() if k not in TIMING} == {
            k: v for k, v in cells[name].items() if k not in TIMING | {"jct_p95_vs_static"}}
        assert cells[name]["jct_p95_vs_static"] == s["jct_p95_s"] / summaries["static"][
            "jct_p95_s"]
    assert cells["static"]["cost_vs_static"] == 1.0
    assert cells["gpufleet"]["cost_usd"] != cells["static"]["cost_usd"]  # not a trivial grid


def test_a_trace_is_loaded_once_and_is_the_same_jobs_under_every_seed(tmp_path: Path) -> None:
    trace = tmp_path / "jobs.yaml"
    trace.write_text("jobs:\n" + "".join(
        f"  - {{job_id: j{i}, submit_s: {i * 600}, duration_s: {1200 + 60 * i}, num_gpu: 1, "
        "gpu_models: V100-16GB}\n" for i in range(12)))
    checked: list[int] = []
    groups = groups_of([trace_workload(trace)], [3, 4, 5], scenarios_named(["static"]),
                       lambda w, jobs: checked.append(len(jobs)))
    assert [g.seed for g in groups] == [3, 4, 5]
    assert groups[0].jobs is groups[1].jobs is groups[2].jobs
    assert checked == [12]  # checked once, before any run


def cell(seed: int, scenario: str, cost: float | None, jct: float | None, lost: int = 0) -> Cell:
    return Cell("w", seed, scenario, {"cost_vs_static": cost, "jct_p95_vs_static": jct,
                                      "jobs_lost": lost})


def test_grid_aggregates_over_the_seeds_by_hand() -> None:
    cells = [
        cell(0, "static", 1.0, 1.0), cell(0, "gpufleet", 0.40, 1.10, lost=1),
        cell(1, "static", 1.0, 1.0), cell(1, "gpufleet", 0.50, 0.90),
        cell(2, "static", 1.0, 1.0), cell(2, "gpufleet", 0.60, 1.30, lost=2),
        cell(7, "static", 1.0, 1.0), cell(7, "gpufleet", 0.60, 1.00),
    ]
    static, ours = grid(cells)
    assert (static.scenario, static.mean, static.low, static.high, static.stdev) == (
        "static", 1.0, 1.0, 1.0, 0.0)
    assert static.worst_seed == 0  # every ratio equal: the lowest seed
    assert ours.seeds == (0, 1, 2, 7)
    assert ours.cost_vs_static == (0.40, 0.50, 0.60, 0.60)
    # mean (0.4 + 0.5 + 0.6 + 0.6) / 4 = 0.525
    assert ours.mean == pytest.approx(0.525)
    assert (ours.low, ours.high) == (0.40, 0.60)
    # sample stdev: deviations -0.125, -0.025, 0.075, 0.075; squares sum to 0.0275;
    # / (4 - 1) = 0.0091667; sqrt = 0.095743
    assert ours.stdev == pytest.approx(0.095743, abs=1e-6)
    assert ours.worst_seed == 2  # 0.60 at seeds 2 and 7: the lower seed
    # JCT p95 ratios (1.10 + 0.90 + 1.30 + 1.00) / 4 = 1.075
    assert ours.jct_p95_vs_static == pytest.approx(1.075)
    assert ours.jobs_lost == 3
    table = grid_tables([static, ours])[0]
    assert table.title == "w: seeds 0,1,2,7"
    assert table.text[1] == ("gpufleet", "0.525", "0.400", "0.600", "0.096", "2", "1.075", "3")
    assert table.records()[1]["worst"] == 2 and table.records()[1]["lost"] == 3


def test_grid_skips_ratios_without_a_static_figure() -> None:
    """A static run that cost nothing (or a p95 of 0) leaves that seed's ratio None: the
    aggregates are over the seeds that have one; one seed has no stdev."""
    one, = grid([cell(0, "x", None, None), cell(1, "x", 0.8, None, lost=4)])
    assert (one.mean, one.low, one.high, one.stdev, one.worst_seed) == (0.8, 0.8, 0.8, None, 1)
    assert one.jct_p95_vs_static is None and one.jobs_lost == 4
    none, = grid([cell(0, "x", None, None)])
    assert (none.mean, none.worst_seed) == (None, None)
    assert grid_tables([none])[0].text[0][1:6] == ("—", "—", "—", "—", "—")


@pytest.mark.parametrize(("text", "seeds"), [
    ("0-4", [0, 1, 2, 3, 4]), ("3,1,9", [3, 1, 9]), ("7", [7]), ("0-1,5", [0, 1, 5]),
])
def test_seed_lists(text: str, seeds: list[int]) -> None:
    assert parse_seeds(text, MAX_SEEDS) == seeds


@pytest.mark.parametrize(("text", "says"), [
    ("4-2", "expected seeds like 42-51"), ("a-b", "expected seeds like"), ("", "no seeds"),
    ("-1", "expected seeds like"), ("0-4294967296", "seeds must be in 0..4294967295"),
    (f"0-{MAX_SEEDS}", f"at most {MAX_SEEDS} seeds"),
])
def test_bad_seed_lists_name_the_option(text: str, says: str) -> None:
    with pytest.raises(InputError, match=says) as err:
        parse_seeds(text, MAX_SEEDS)
    assert err.value.field == "--seeds"


def test_seeds_text() -> None:
    assert [seeds_text(s) for s in ([0, 1, 2, 3], [0, 1], [4], [1, 3, 4])] == [
        "0-3", "0,1", "4", "1,3,4"]


def test_synthetic_shapes() -> None:
    w = synthetic_workload("jobs=500, days=1.5,gpu_count_weights=4/2/1/1/0/0")
    assert w.label == "synthetic jobs=500, days=1.5,gpu_count_weights=4/2/1/1/0/0"
    assert w.params == SyntheticWorkload(jobs=500, days=1.5,
                                         gpu_count_weights=(4, 2, 1, 1, 0, 0))
    assert synthetic_workload("default") == Workload("synthetic default")
    assert synthetic_workload("default").jobs(3) == generate(seed=3)


@pytest.mark.parametrize(("text", "says"), [
    ("jobs", "expected KEY=VALUE"), ("jobs=", "expected KEY=VALUE"),
    ("nodes=3", "unknown parameter 'nodes'; known: jobs, days"),
    ("jobs=many", "jobs: Input should be a valid integer"),
    ("days=-1", "days: Input should be greater than 0"),
    ("gpu_count_weights=1/2", "gpu_count_weights.2: Field required"),
])
def test_bad_synthetic_shapes_name_the_option(text: str, says: str) -> None:
    with pytest.raises(InputError, match=says) as err:
        synthetic_workload(text)
    assert err.value.field == "--synthetic"


def test_a_missing_trace_names_the_option(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file") as err:
        trace_workload(tmp_path / "absent.csv")
    assert err.value.field == "--trace"


def test_stdev_matches_statistics_on_real_cells() -> None:
    """The grid over real cells: its figures are the cells' own, aggregated."""
    scs = scenarios_named(["static", "gpufleet-no-spot"])
    groups = groups_of([synthetic_workload("jobs=40,days=0.1")], [0, 1, 2], scs)
    cells = run_grid(groups, scs, run_local(1))
    row = grid(cells)[1]
    ratios = [c.summary["cost_usd"] / s.summary["cost_usd"]
              for c, s in zip(cells[1::2], cells[0::2], strict=True)]
    assert row.cost_vs_static == tuple(ratios)
    assert row.stdev == statistics.stdev(ratios)
    assert row.worst_seed == max(range(3), key=lambda i: (ratios[i], -i))
