"""``gpufleet simulate``: replay a workload under each scenario and compare them side by side."""

from __future__ import annotations

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
)

from gpufleet.cli_app import app, friendly_errors
from gpufleet.config import (
    Scenario,
    default_scenarios,
    load_scenarios,
    scenarios_named,
    static_scenario,
)
from gpufleet.errors import InputError
from gpufleet.metrics.exporter import MAX_SPEED
from gpufleet.optiontypes import MAX_PORT, MAX_SEED, FormatOption, finite
from gpufleet.outputpaths import writable_dir
from gpufleet.sim.report import add_relative, side_table, view_tables
from gpufleet.sim.report_html import write_outputs
from gpufleet.sim.team_report import team_tables
from gpufleet.tables import OutputFormat, print_tables

if TYPE_CHECKING:
    from gpufleet.metrics.fleet import FleetMetrics

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
    "than 5 minutes later than under static (matched by job id).",
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


def _serve(
    metrics: FleetMetrics, port: int, speed: float, seed: int, jobs: list, scenario: Scenario
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
    fmt: FormatOption = OutputFormat.table,
) -> None:
    """Replay a workload under the baseline and gpufleet scenarios; write summary + report."""
    from gpufleet.sim.batch import run_all
    from gpufleet.sim.feasibility import PHILLY_FIELDS, check_runnable
    from gpufleet.sim.runner import check_names, scenario_types
    from gpufleet.traces.jobs import load_jobs, sniff_format
    from gpufleet.traces.synthetic import generate

    # Outputs first: a port or folder we cannot use must fail before minutes of simulation.
    metrics = _bind(serve_metrics) if serve_metrics is not None else None
    if metrics is None:
        writable_dir(out, "--out")
    jobs = load_jobs(trace) if trace is not None else generate(seed=seed)
    if not jobs:
        raise InputError("the workload has no jobs", path=trace)
    scenarios = _scenarios(scenario, only)
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
    workload = str(trace) if trace else f"synthetic default (seed {seed})"
    # a machine format is the only thing on stdout: progress and notes go to stderr
    info = console if fmt is OutputFormat.table else err_console
    info.print(f"workload: {workload}: {len(jobs):,} jobs; {len(scenarios)} scenarios")
    t0 = time.perf_counter()
    with Progress(
        TextColumn("{task.description:<20}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), console=info,
    ) as progress:
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
    add_relative(summaries, finishes)
    meta = {"workload": workload, "jobs": len(jobs), "seed": seed,
            "spot_model": ", ".join(sorted(m for m in models if m != "none")) or "none",
            # rows not run because they provably repeat another run (gpufleet.sim.batch)
            "derived_rows": derived}
    settings = {sc.name: sc.model_dump(mode="json", exclude_defaults=True) for sc in scenarios}
    js, rep = write_outputs(out, summaries, series, wall, meta, NOTES, settings)
    tables = [side_table(summaries, f"{workload}: scenarios side by side"),
              *view_tables(summaries), *team_tables(summaries)]
    print_tables(tables, fmt, console)
    for name, summary in summaries.items():  # jobs the run stopped queueing (sim.progress)
        for job_id, why in list(summary.get("given_up", {}).items())[:5]:
            info.print(f"[yellow]{name}: gave up on job {job_id}: {why}[/]", highlight=False)
    info.print(f"wrote {js} and {rep} in {wall:.1f} s")
