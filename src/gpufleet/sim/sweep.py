"""A grid of what-ifs: every workload × seed × scenario, one simulation per cell, and the table
that sums each workload × scenario up over the seeds.

A **workload** is a trace file (the same jobs under every seed) or a synthetic shape
(``traces.synthetic``: the embedded default, or its parameters changed), generated again under
each seed, as ``gpufleet simulate --seed`` does. One workload under one seed is a **group**:
its scenarios are planned as ``simulate`` plans them (``sim.batch.plan_runs``: a provable
repeat of another scenario is not run, one that differs only in its prices is re-billed), and
each run is ``sim.batch.run_billed``, so a cell's summary is the one ``gpufleet simulate
--seed S --only ...`` prints for it, ``cost_vs_static`` and ``late_over_5min_share`` included
(``sim.report.add_relative`` over the group), plus ``jct_p95_vs_static``.

The runs are independent, so an executor may run them anywhere in any order: here one after
another, in local worker processes (``run_local``), or as tasks on a Ray cluster
(``sim.sweep_ray``). A run reads nothing from the process it runs in (``sim.batch``), so every
executor gives the same summaries to the bit, the timing keys (``sim.summary.TIMING``) aside.

The grid table, per workload × scenario over the seeds (``grid``): the mean cost against
``static`` with its min, max and sample standard deviation, the worst seed (the highest cost
ratio; the lowest seed among equals), the mean JCT p95 against ``static``'s, and the jobs lost
summed over the seeds.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gpufleet.collector import tune_collector
from gpufleet.config import Scenario
from gpufleet.errors import InputError
from gpufleet.sim.batch import Outcome, RunPlan, add_twins, expected_work, plan_runs, run_billed
from gpufleet.sim.report import add_relative
from gpufleet.tables import DataTable
from gpufleet.traces.jobs import JobSpec, load_jobs
from gpufleet.traces.synthetic import SyntheticWorkload, generate

DEFAULT_SCENARIOS = ("static", "gpufleet", "gpufleet-no-spot")
MAX_SEEDS = 1000  # each seed is a full simulation per scenario and workload


@dataclass(frozen=True)
class Workload:
    """A trace file, or a synthetic shape (``params``; None: the embedded default)."""

    label: str
    trace: Path | None = None
    params: SyntheticWorkload | None = None

    @property
    def seeded(self) -> bool:
        """Whether the jobs depend on the seed (a synthetic workload is drawn under it)."""
        return self.trace is None

    def jobs(self, seed: int) -> list[JobSpec]:
        if self.trace is not None:
            jobs = load_jobs(self.trace)
            if not jobs:
                raise InputError("the workload has no jobs", path=self.trace, field="--trace")
            return jobs
        return generate(self.params, seed=seed)


def default_workload() -> Workload:
    return Workload("synthetic default")


def trace_workload(path: Path) -> Workload:
    """``path`` as a workload; a missing file is an error naming ``--trace`` before any work."""
    if not path.is_file():
        raise InputError("no such file", path=path, field="--trace")
    return Workload(str(path), trace=path)


def synthetic_workload(text: str) -> Workload:
    """``jobs=500,days=1``: the default synthetic workload with these of its parameters
    (``traces.synthetic.SyntheticWorkload``) changed; a tuple's items are separated by ``/``
    (``gpu_count_weights=4/2/1/1/0/0``). ``default`` is the default itself."""
    text = text.strip()
    if text == "default":
        return default_workload()
    fields: dict[str, Any] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise InputError(f"expected KEY=VALUE,... (e.g. jobs=500,days=1), got {text!r}",
                             field="--synthetic")
        if key not in SyntheticWorkload.model_fields:
            raise InputError(f"unknown parameter {key!r}; known: "
                             f"{', '.join(SyntheticWorkload.model_fields)}", field="--synthetic")
        fields[key] = value.split("/") if "/" in value else value
    try:
        params = SyntheticWorkload.model_validate(fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise InputError(f"{where}: {err['msg']} (in {text!r})", field="--synthetic") from None
    return Workload(f"synthetic {text}", params=params)


@dataclass(frozen=True)
class Group:
    """One workload under one seed: its jobs and which runs give its scenarios' rows."""

    workload: Workload
    seed: int
    jobs: list[JobSpec]
    plan: RunPlan


@dataclass(frozen=True)
class Run:
    """One simulation: ``scenario`` over group ``group``'s jobs, re-billed for ``rebills``."""

    group: int
    scenario: Scenario
    rebills: tuple[Scenario, ...]
    seed: int


@dataclass(frozen=True)
class Cell:
    """A grid cell: the scenario's summary as ``gpufleet simulate`` computes it."""

    workload: str
    seed: int
    scenario: str
    summary: dict[str, Any]


def groups_of(workloads: Sequence[Workload], seeds: Sequence[int],
              scenarios: list[Scenario],
              check: Callable[[Workload, list[JobSpec]], None] | None = None) -> list[Group]:
    """Every workload under every seed, planned (``sim.batch.plan_runs``). A trace is loaded
    once, whatever the seeds; ``check(workload, jobs)`` sees each group's jobs before any run."""
    out: list[Group] = []
    for w in workloads:
        loaded: list[JobSpec] | None = None
        for seed in seeds:
            if w.seeded or loaded is None:
                loaded = w.jobs(seed)
                if check is not None:
                    check(w, loaded)
            out.append(Group(w, seed, loaded, plan_runs(loaded, scenarios)))
    return out


def runs_of(groups: Sequence[Group]) -> list[Run]:
    """Every group's runs, longest first over the whole grid (``sim.batch.expected_work``:
    a long run started last would leave the other workers idle while it runs alone)."""
    runs = [Run(i, sc, tuple(g.plan.rebills.get(sc.name, ())), g.seed)
            for i, g in enumerate(groups) for sc in g.plan.order]
    return sorted(runs, key=lambda r: expected_work(r.scenario), reverse=True)


# (groups, runs, on_done(run index)) → each run's outcomes (``sim.batch.run_billed``), by index
Executor = Callable[[Sequence[Group], Sequence[Run], Callable[[int], None]], list[list[Outcome]]]


def run_local(workers: int | None = None) -> Executor:
    """Runs in ``workers`` local processes (default: one per CPU; 1: one after another in this
    process). A run's jobs travel with it (a few hundred kB for the default workload)."""

    def execute(groups: Sequence[Group], runs: Sequence[Run],
                on_done: Callable[[int], None]) -> list[list[Outcome]]:
        n = min(workers or os.cpu_count() or 1, len(runs))
        got: list[list[Outcome]] = [[] for _ in runs]
        if n <= 1:
            for i, r in enumerate(runs):
                got[i] = run_billed(r.scenario, r.rebills, r.seed, groups[r.group].jobs)
                on_done(i)
            return got
        ctx = multiprocessing.get_context("spawn")  # as sim.batch: no forked threads or files
        with ProcessPoolExecutor(n, mp_context=ctx, initializer=tune_collector) as pool:
            futures = {pool.submit(run_billed, r.scenario, r.rebills, r.seed,
                                   groups[r.group].jobs): i for i, r in enumerate(runs)}
            left = set(futures)
            while left:
                done, left = wait(left, return_when=FIRST_COMPLETED)
                for f in done:
                    got[futures[f]] = f.result()
                    on_done(futures[f])
        return got

    return execute


def cells(groups: Sequence[Group], runs: Sequence[Run], outcomes: Sequence[list[Outcome]],
          scenarios: Sequence[Scenario]) -> list[Cell]:
    """Each group's rows (twins filled in, ``sim.batch.add_twins``), compared with its
    ``static`` (``sim.report.add_relative``, and ``jct_p95_vs_static``), in grid order:
    workload, seed, scenario as given."""
    by_group: list[dict[str, Outcome]] = [{} for _ in groups]
    for r, outs in zip(runs, outcomes, strict=True):
        for o in outs:
            by_group[r.group][o.name] = o
    out: list[Cell] = []
    for g, got in zip(groups, by_group, strict=True):
        add_twins(got, g.plan.twins, g.jobs, g.seed)
        summaries = {sc.name: dict(got[sc.name].summary) for sc in scenarios}
        add_relative(summaries, {sc.name: got[sc.name].finishes for sc in scenarios},
                     {j.job_id: j.tenant for j in g.jobs})
        base = summaries.get("static", {}).get("jct_p95_s")
        for name, s in summaries.items():
            s["jct_p95_vs_static"] = s["jct_p95_s"] / base if base else None
            out.append(Cell(g.workload.label, g.seed, name, s))
    return out


def run_grid(groups: Sequence[Group], scenarios: Sequence[Scenario], execute: Executor,
             on_done: Callable[[Run], None] | None = None) -> list[Cell]:
    """Every cell of ``groups`` × ``scenarios``, the runs made by ``execute``; ``on_done``
    hears of each run as it ends."""
    runs = runs_of(groups)

    def done(i: int) -> None:
        if on_done is not None:
            on_done(runs[i])

    return cells(groups, runs, execute(groups, runs, done), scenarios)


@dataclass(frozen=True)
class GridRow:
    """One workload × scenario over its seeds (module docstring). A ratio is None where
    ``static``'s figure is 0."""

    workload: str
    scenario: str
    seeds: tuple[int, ...]
    cost_vs_static: tuple[float | None, ...]  # per seed, in ``seeds`` order
    mean: float | None
    low: float | None
    high: float | None
    stdev: float | None  # sample standard deviation; None with fewer than two seeds
    worst_seed: int | None
    jct_p95_vs_static: float | None  # mean over the seeds
    jobs_lost: int  # summed over the seeds


def grid(cell_list: Sequence[Cell]) -> list[GridRow]:
    """The grid table's rows, in the cells' order of workloads and scenarios."""
    keys: dict[tuple[str, str], list[Cell]] = {}
    for c in cell_list:
        keys.setdefault((c.workload, c.scenario), []).append(c)
    rows: list[GridRow] = []
    for (workload, scenario), cs in keys.items():
        ratios = [c.summary["cost_vs_static"] for c in cs]
        known = [(r, c.seed) for r, c in zip(ratios, cs, strict=True) if r is not None]
        values = [r for r, _ in known]
        jct = [c.summary["jct_p95_vs_static"] for c in cs
               if c.summary["jct_p95_vs_static"] is not None]
        rows.append(GridRow(
            workload, scenario, tuple(c.seed for c in cs), tuple(ratios),
            mean=statistics.fmean(values) if values else None,
            low=min(values) if values else None,
            high=max(values) if values else None,
            stdev=statistics.stdev(values) if len(values) > 1 else None,
            worst_seed=min(known, key=lambda rs: (-rs[0], rs[1]))[1] if known else None,
            jct_p95_vs_static=statistics.fmean(jct) if jct else None,
            jobs_lost=sum(int(c.summary["jobs_lost"]) for c in cs)))
    return rows


def seeds_text(seeds: Sequence[int]) -> str:
    """``0-4`` for a run of consecutive seeds, else ``0,2,7``."""
    if len(seeds) > 2 and list(seeds) == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"{seeds[0]}-{seeds[-1]}"
    return ",".join(str(s) for s in seeds)


def _ratio(x: float | None, digits: int = 3) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def grid_tables(rows: Sequence[GridRow]) -> list[DataTable]:
    """One table per workload, a row per scenario."""
    tables: dict[str, DataTable] = {}
    for r in rows:
        t = tables.get(r.workload)
        if t is None:
            t = tables[r.workload] = DataTable(
                f"{r.workload}: seeds {seeds_text(r.seeds)}",
                ["scenario", "cost", "min", "max", "stdev", "worst", "JCT p95", "lost"],
                numeric=[False, *[True] * 7],
                caption="cost, JCT p95: the mean over the seeds of each seed's ratio to its "
                        "own static run; min, max, stdev: of the cost ratio; worst: the seed "
                        "of the highest cost ratio; lost: jobs never finished, all seeds")
        t.add_row(r.scenario, _ratio(r.mean), _ratio(r.low), _ratio(r.high), _ratio(r.stdev),
                  "—" if r.worst_seed is None else str(r.worst_seed),
                  _ratio(r.jct_p95_vs_static), f"{r.jobs_lost:,}",
                  values=[r.scenario, r.mean, r.low, r.high, r.stdev, r.worst_seed,
                          r.jct_p95_vs_static, r.jobs_lost])
    return list(tables.values())


def sweep_document(groups: Sequence[Group], cell_list: Sequence[Cell], rows: Sequence[GridRow],
                   executor: str, wall_s: float) -> dict[str, Any]:
    """What ``sweep.json`` holds: the grid's axes, every cell's summary and the grid table."""
    workloads: dict[str, dict[str, int]] = {}
    for g in groups:
        workloads.setdefault(g.workload.label, {})[str(g.seed)] = len(g.jobs)
    return {
        "workloads": [{"workload": w, "jobs_by_seed": n} for w, n in workloads.items()],
        "seeds": sorted({g.seed for g in groups}),
        "scenarios": list(dict.fromkeys(c.scenario for c in cell_list)),
        "executor": executor,
        "wall_seconds": wall_s,
        "cells": [{"workload": c.workload, "seed": c.seed, "scenario": c.scenario,
                   "summary": c.summary} for c in cell_list],
        "grid": [{"workload": r.workload, "scenario": r.scenario, "seeds": list(r.seeds),
                  "cost_vs_static_by_seed": list(r.cost_vs_static),
                  "cost_vs_static_mean": r.mean, "cost_vs_static_min": r.low,
                  "cost_vs_static_max": r.high, "cost_vs_static_stdev": r.stdev,
                  "worst_seed": r.worst_seed, "jct_p95_vs_static_mean": r.jct_p95_vs_static,
                  "jobs_lost": r.jobs_lost} for r in rows],
    }
