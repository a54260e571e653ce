"""``gpufleet simulate``: replay a workload under each scenario and compare them side by side;
``gpufleet sweep``: the same over a grid of workloads × seeds × scenarios (``sim.sweep``)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from gpufleet.cli_app import app, friendly_errors
from gpufleet.collector import tune_collector
from gpufleet.config import (
    Scenario,
    default_scenarios,
    load_scenarios,
    scenarios_named,
    static_scenario,
)
from gpufleet.errors import InputError
from gpufleet.metrics.exporter import MAX_SPEED
from gpufleet.optiontypes import MAX_PORT, MAX_SEED, FormatOption, finite, parse_seeds
from gpufleet.outputpaths import writable_dir
from gpufleet.sim.frontier import frontier as frontier_of
from gpufleet.sim.frontier import frontier_table
from gpufleet.sim.report import add_relative, side_table, view_tables
from gpufleet.sim.report_html import write_outputs
from gpufleet.sim.team_report import team_tables
from gpufleet.tables import OutputFormat, print_tables

if TYPE_CHECKING:
    from gpufleet.metrics.fleet import FleetMetrics
    from gpufleet.traces.jobs import JobSource

console = Console()
err_console = Console(stderr=True)

NOTES = (
    "utilisation = allocated GPU-time / provisioned (billed) GPU-time; recovery = notice → "
    "running again; jobs lost = jobs that never finished.",
    "static: fixed on-demand cluster sized for the workload's peak, whole GPUs, spread "
    "placement, no autoscaling, spot or checkpoints. static-p99: the same sized at the p99 of "
    "concurrent demand (jobs queue when full). static-reserved: static-p99 at the 1-year "
    "commitment rate (catalog/data/commitments.yaml).",
    "leave-one-out: gpufleet without each lever; chain: static, then +autoscaling+packing, "
    "+sharing, +spot, +checkpointing (= gpufleet). late > 5 min: share of jobs finishing more "
    "than 5 minutes later than under static (matched by job id); delay vs static: finish "
    "here − finish under static per job (negative: earlier); time not running: JCT − the "
    "job's own run time (queueing, lost work, restarts).",
)


def _scenarios(path: Path | None, only: str | None = None) -> list[Scenario]:
    if only is not None:
        names = [n.strip() for n in only.split(",") if n.strip()]
        if path is not None:
            by = {s.name: s for s in _scenarios(path)}
            bad = [n for n in names if n not in by]
            if bad:
                raise InputError(f"scenario {bad[0]!r} is not in the file; it has: "
                                 f"{', '.join(by)}", path=path, field="only")
            scs = [by[n] for n in names]
        else:
            scs = scenarios_named(names)
        if not any(s.name == "static" for s in scs):
            scs.insert(0, static_scenario())
        return scs
    if path is None:
        return default_scenarios()
    scs = load_scenarios(path)
    if not any(s.name == "static" for s in scs):
        scs.insert(0, static_scenario())
    return scs


def _bind(port: int) -> FleetMetrics:
    """Listen on 127.0.0.1:PORT now, before any loading or simulating: a busy port or one this
    user may not bind is a one-line error naming --serve-metrics, not a traceback after work."""
    from prometheus_client import CollectorRegistry

    from gpufleet.metrics.exporter import start_server
    from gpufleet.metrics.fleet import FleetMetrics

    registry = CollectorRegistry()
    metrics = FleetMetrics(registry)
    start_server(registry, "127.0.0.1", port, option="--serve-metrics")
    return metrics


def _progress(console: Console) -> Progress:
    """A bar per row: done of total, time elapsed and an estimate of the time remaining."""
    return Progress(
        TextColumn("{task.description:<20}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), console=console)


def _serve(
    metrics: FleetMetrics, port: int, speed: float, seed: int, jobs: JobSource, scenario: Scenario
) -> None:
    from gpufleet.metrics.live import run_paced
    from gpufleet.sim.runner import Simulation

    console.print(
        f"serving simulated fleet metrics on http://127.0.0.1:{port}/metrics at {speed:g}× "
        f"(scenario {scenario.name}); Ctrl-C stops"
    )
    sim = Simulation(scenario, seed=seed, jobs=jobs)
    try:
        run_paced(sim, speed, metrics.update, interval_s=1.0)
    except KeyboardInterrupt:
        console.print("stopped")


@app.command("simulate")
@friendly_errors
def simulate(
    trace: Annotated[
        Path | None,
        typer.Option(help="workload: Philly CSV, gpufleet CSV or YAML (default: synthetic)"),
    ] = None,
    synthetic: Annotated[
        str | None,
        typer.Option("--synthetic", metavar="KEY=VALUE,...",
                     help="synthetic workload instead of the embedded default: the default "
                     "generator with these parameters changed, drawn as the replay reads it "
                     "(memory follows the jobs in flight, not the trace), e.g. "
                     "jobs=1000000,days=1500 (the default's load for 1,500 days)"),
    ] = None,
    scenario: Annotated[
        Path | None,
        typer.Option(help="scenario YAML (default: baselines, gpufleet, leave-one-out, chain)"),
    ] = None,
    only: Annotated[
        str | None,
        typer.Option(help="run only these scenarios (comma-separated names, built-in or from "
                     "--scenario; e.g. the single-lever ones: packing,spot); static is added"),
    ] = None,
    seed: Annotated[
        int,
        typer.Option(help="seed for the workload and every random choice", min=0, max=MAX_SEED),
    ] = 0,
    out: Annotated[Path, typer.Option(help="output folder")] = Path("out/simulate"),
    serve_metrics: Annotated[
        int | None,
        typer.Option(help="serve the gpufleet scenario's metrics on 127.0.0.1:PORT, paced",
                     min=1, max=MAX_PORT, metavar="PORT"),
    ] = None,
    speed: Annotated[
        float,
        typer.Option(help=f"simulated seconds per wall second (0 < speed <= {MAX_SPEED:g})",
                     parser=finite(0, MAX_SPEED, low_open=True)),
    ] = 600.0,
    workers: Annotated[
        int | None,
        typer.Option(help="scenarios run side by side in this many processes (default: one "
                     "per CPU; 1: one after another in this process)", min=1, max=256),
    ] = None,
    frontier: Annotated[
        str | None,
        typer.Option(metavar="V1,V2,...",
                     help="the cost-lateness frontier instead of the scenario set: static, "
                     "and the gpufleet scenario (from --scenario, else built-in) once per "
                     "value of time ($ per GPU-hour of delay; its own and 0 added), and "
                     "the point to choose, e.g. 0,1,3,10,30,100"),
    ] = None,
    fmt: FormatOption = OutputFormat.table,
) -> None:
    """Replay a workload under the baseline and gpufleet scenarios; write summary + report."""
    from gpufleet.sim.batch import run_all
    from gpufleet.sim.feasibility import PHILLY_FIELDS, check_runnable
    from gpufleet.sim.frontier import frontier_scenarios, parse_values
    from gpufleet.sim.runner import check_names, scenario_types
    from gpufleet.sim.sweep import synthetic_workload
    from gpufleet.traces.jobs import load_jobs, sniff_format
    from gpufleet.traces.synthetic import SyntheticStream, generate

    values = parse_values(frontier) if frontier is not None else None
    if values is not None and (only is not None or serve_metrics is not None):
        raise InputError("--frontier runs static and the gpufleet scenario at each value of "
                         "time: give it without --only and --serve-metrics", field="--frontier")
    # Outputs first: a port or folder we cannot use must fail before minutes of simulation.
    metrics = _bind(serve_metrics) if serve_metrics is not None else None
    if metrics is None:
        writable_dir(out, "--out")
    if trace is not None and synthetic is not None:
        raise InputError("a workload is given twice: give --trace or --synthetic",
                         field="--trace/--synthetic")
    drawn = synthetic_workload(synthetic) if synthetic is not None else None
    jobs: JobSource
    if trace is not None:
        jobs = load_jobs(trace)
    elif drawn is not None and drawn.params is not None:
        jobs = SyntheticStream(drawn.params, seed)
    else:
        jobs = generate(seed=seed)
    if not jobs:
        raise InputError("the workload has no jobs", path=trace)
    scenarios = _scenarios(scenario, only)
    base: Scenario | None = None
    points: list[Scenario] = []
    if values is not None:
        base = next((s for s in scenarios if s.name == "gpufleet"), None)
        if base is None:
            raise InputError("--frontier varies the scenario named gpufleet; the file has "
                             f"none: {', '.join(s.name for s in scenarios)}", path=scenario,
                             field="--frontier")
        points = frontier_scenarios(base, values)
        scenarios = [next(s for s in scenarios if s.name == "static"), *points]
    philly = trace is not None and sniff_format(trace) == "philly"
    for sc in scenarios:
        check_names(sc, scenario)
        try:
            types = scenario_types(sc, jobs)
        except InputError as exc:  # the workload asks for GPUs the scenario's provider lacks
            raise InputError(f"scenario {sc.name!r}: {exc.detail}", path=trace,
                             field=exc.field) from None
        check_runnable(jobs, sc, types, trace, PHILLY_FIELDS if philly else None)
    if serve_metrics is not None and metrics is not None:
        chosen = next((s for s in scenarios if s.name == "gpufleet"), scenarios[-1])
        _serve(metrics, serve_metrics, speed, seed, jobs, chosen)
        return
    workload = (str(trace) if trace else f"{drawn.label} (seed {seed})" if drawn is not None
                else f"synthetic default (seed {seed})")
    # a machine format is the only thing on stdout: progress and notes go to stderr
    info = console if fmt is OutputFormat.table else err_console
    info.print(f"workload: {workload}: {len(jobs):,} jobs; {len(scenarios)} scenarios")
    tune_collector()
    t0 = time.perf_counter()
    with _progress(info) as progress:
        tasks = {sc.name: progress.add_task(sc.name, total=len(jobs)) for sc in scenarios}

        def cb(name: str, done: float, total: float) -> None:
            progress.update(tasks[name], completed=done)

        outcomes = run_all(jobs, scenarios, seed, workers, cb)
        derived = {name: o.summary["derived_from"] for name, o in outcomes.items()
                   if "derived_from" in o.summary}
        for name, source in derived.items():  # not run: provably the same run as ``source``
            progress.update(tasks[name], completed=len(jobs), description=f"{name} = {source}")
    summaries = {name: o.summary for name, o in outcomes.items()}
    series = {name: o.series for name, o in outcomes.items()}
    finishes = {name: o.finishes for name, o in outcomes.items()}
    models = {o.spot_model for o in outcomes.values()}
    wall = time.perf_counter() - t0
    add_relative(summaries, finishes, {j.job_id: j.tenant for j in jobs})
    meta = {"workload": workload, "jobs": len(jobs), "seed": seed,
            "spot_model": ", ".join(sorted(m for m in models if m != "none")) or "none",
            # rows not run because they provably repeat another run (gpufleet.sim.batch)
            "derived_rows": derived}
    settings = {sc.name: sc.model_dump(mode="json", exclude_defaults=True) for sc in scenarios}
    front = frontier_of(summaries, points, base) if base is not None else None
    js, rep = write_outputs(out, summaries, series, wall, meta, NOTES, settings, front)
    tables = [side_table(summaries, f"{workload}: scenarios side by side"),
              *view_tables(summaries), *team_tables(summaries),
              *([frontier_table(front)] if front is not None else [])]
    print_tables(tables, fmt, console)
    for name, summary in summaries.items():  # jobs the run stopped queueing (sim.progress)
        for job_id, why in list(summary.get("given_up", {}).items())[:5]:
            info.print(f"[yellow]{name}: gave up on job {job_id}: {why}[/]", highlight=False)
    info.print(f"wrote {js} and {rep} in {wall:.1f} s")


@app.command("sweep")
@friendly_errors
def sweep(
    trace: Annotated[
        list[Path] | None,
        typer.Option("--trace", help="workload file (repeatable): Philly CSV, gpufleet CSV or "
                     "YAML; the same jobs under every seed"),
    ] = None,
    synthetic: Annotated[
        list[str] | None,
        typer.Option("--synthetic", metavar="KEY=VALUE,...",
                     help="synthetic workload (repeatable), drawn under each seed: the default "
                     "generator with these parameters changed, e.g. jobs=500,days=1 (tuples "
                     "with /: gpu_count_weights=4/2/1/1/0/0), or 'default'. Without --trace "
                     "or --synthetic: the embedded default"),
    ] = None,
    seeds: Annotated[
        str, typer.Option(help="seeds: a range like 0-4 or a list like 0,1,7 (each seed "
                          "draws a synthetic workload and every random choice)"),
    ] = "0-4",
    scenario: Annotated[
        Path | None,
        typer.Option(help="scenario YAML (default: the built-in scenarios)"),
    ] = None,
    only: Annotated[
        str | None,
        typer.Option(help="run only these scenarios (comma-separated names, built-in or from "
                     "--scenario); static is added. Default without --scenario: "
                     "static,gpufleet,gpufleet-no-spot; with it: every scenario in the file"),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(help="runs side by side in this many local processes (default: one per "
                     "CPU; 1: one after another in this process)", min=1, max=256),
    ] = None,
    ray: Annotated[
        str | None,
        typer.Option("--ray", metavar="ADDRESS",
                     help="run each simulation as a task on the Ray cluster at ADDRESS "
                     "(HOST:PORT, ray://HOST:PORT or auto) instead of local processes; needs "
                     "pip install 'gpufleet[ray]' here and gpufleet on the cluster"),
    ] = None,
    out: Annotated[Path, typer.Option(help="output folder (sweep.json)")] = Path("out/sweep"),
    fmt: FormatOption = OutputFormat.table,
) -> None:
    """Simulate a grid of workloads × seeds × scenarios; tabulate each scenario over the seeds."""
    from gpufleet.sim.feasibility import PHILLY_FIELDS, check_runnable
    from gpufleet.sim.runner import check_names, scenario_types
    from gpufleet.sim.sweep import (
        DEFAULT_SCENARIOS,
        MAX_SEEDS,
        Run,
        Workload,
        default_workload,
        grid,
        grid_tables,
        groups_of,
        run_grid,
        run_local,
        seeds_text,
        sweep_document,
        synthetic_workload,
        trace_workload,
    )
    from gpufleet.traces.jobs import JobSpec, sniff_format

    if ray is not None and workers is not None:
        raise InputError("--workers sets local processes; with --ray the cluster schedules "
                         "the runs: give one of them", field="--workers")
    seed_list = parse_seeds(seeds, MAX_SEEDS)
    workloads = [*(trace_workload(p) for p in trace or ()),
                 *(synthetic_workload(s) for s in synthetic or ())] or [default_workload()]
    if len({w.label for w in workloads}) < len(workloads):
        raise InputError("a workload is given twice", field="--trace/--synthetic")
    scenarios = _scenarios(scenario, only if only is not None or scenario is not None
                           else ",".join(DEFAULT_SCENARIOS))
    for sc in scenarios:
        check_names(sc, scenario)
    writable_dir(out, "--out")
    if ray is not None:
        from gpufleet.sim.sweep_ray import check_reachable, host_port, require_ray, run_ray

        host_port(ray)  # the address's form, then Ray, then the cluster: before any work
        require_ray()
        check_reachable(ray)
        execute, where = run_ray(ray), f"Ray cluster at {ray}"
    else:
        n = workers or os.cpu_count() or 1
        execute, where = run_local(n), "this process" if n == 1 else f"{n} local processes"

    def check(w: Workload, jobs: list[JobSpec]) -> None:
        philly = w.trace is not None and sniff_format(w.trace) == "philly"
        for sc in scenarios:
            try:
                types = scenario_types(sc, jobs)
            except InputError as exc:  # the workload asks for GPUs the provider lacks
                raise InputError(f"scenario {sc.name!r}: {exc.detail}", path=w.trace,
                                 field=exc.field) from None
            check_runnable(jobs, sc, types, w.trace, PHILLY_FIELDS if philly else None)

    info = console if fmt is OutputFormat.table else err_console
    groups = groups_of(workloads, seed_list, scenarios, check)
    info.print(f"{len(workloads)} workload(s) × {len(seed_list)} seed(s) "
               f"({seeds_text(seed_list)}) × {len(scenarios)} scenarios, on {where}")
    tune_collector()
    t0 = time.perf_counter()
    with _progress(info) as progress:
        totals: dict[str, int] = {}
        for g in groups:
            label = g.workload.label
            totals[label] = totals.get(label, 0) + len(g.plan.order)
        tasks = {label: progress.add_task(label, total=n) for label, n in totals.items()}

        def done(run: Run) -> None:
            progress.advance(tasks[groups[run.group].workload.label])

        cell_list = run_grid(groups, scenarios, execute, done)
    wall = time.perf_counter() - t0
    rows = grid(cell_list)
    doc = sweep_document(groups, cell_list, rows, where, wall)
    js = out / "sweep.json"
    out.mkdir(parents=True, exist_ok=True)
    js.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    print_tables(grid_tables(rows), fmt, console)
    info.print(f"wrote {js}: {len(cell_list)} cells in {wall:.1f} s")
