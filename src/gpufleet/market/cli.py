"""``gpufleet bench spot-deadline``: the NSDI'24 spot-vs-on-demand-under-deadline benchmark."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from gpufleet.cli_app import bench_app, friendly_errors
from gpufleet.errors import InputError
from gpufleet.market.deadline import DEFAULT_DEADLINE_POLICY
from gpufleet.market.deadline.bench.protocol import (
    ALL_SETTINGS,
    Setting,
    check_policies,
    default_traces,
    load_traces,
    render,
    run_setting,
)
from gpufleet.optiontypes import FormatOption, finite
from gpufleet.outputpaths import with_parent, writable_file
from gpufleet.tables import OutputFormat, print_tables

# A year of work or deadline is far past any spot trace (each run needs max(80 h, D) of trace);
# 10,000 starts x an 80 h window at a 1-minute gap is ~50 MB of windows per trace.
MAX_HOURS = 8760.0
MAX_STARTS = 10_000


@bench_app.command("spot-deadline")
@friendly_errors
def spot_deadline(
    trace: list[Path] = typer.Option(  # noqa: B008
        None, "--trace", help="Availability trace JSON (repeatable); default: the six "
        "aws-02-15-2023 V100 zones under the shared data folder."),
    policy: list[str] = typer.Option(  # noqa: B008
        None, "--policy", help="Policy name (repeatable): on_demand, greedy, up, optimal, "
        f"ours (= {DEFAULT_DEADLINE_POLICY}); default: ours alone."),
    task_hours: float = typer.Option(
        48.0, "--task-hours", help=f"Work C in hours (0 < C <= {MAX_HOURS:g}).",
        parser=finite(0, MAX_HOURS, low_open=True)),
    deadline_hours: float = typer.Option(
        60.0, "--deadline-hours", help=f"Deadline D in hours (0 < D <= {MAX_HOURS:g}).",
        parser=finite(0, MAX_HOURS, low_open=True)),
    overhead_hours: float = typer.Option(
        0.2, "--overhead-hours", help=f"Overhead d in hours (0..{MAX_HOURS:g}).",
        parser=finite(0, MAX_HOURS)),
    starts: int = typer.Option(
        300, "--starts", help=f"Start points per trace (1..{MAX_STARTS:,})."),
    all_settings: bool = typer.Option(
        False, "--all-settings", help="Run the protocol's six settings (D 52/60/70 h × "
        "d 0.2/0.05 h, C 48 h) instead of the one given."),
    json_out: Path | None = typer.Option(None, "--json", help="Write results as JSON here."),  # noqa: B008
    fmt: FormatOption = OutputFormat.table,
) -> None:
    """Spot, on-demand or wait under a deadline: policies vs. the omniscient optimum."""
    if json_out is not None:  # before the work: an unwritable path must not waste the run
        writable_file(json_out, "--json")
    if not 1 <= starts <= MAX_STARTS:
        raise InputError(f"got {starts}; expected 1..{MAX_STARTS:,} starts", field="starts")
    names = check_policies(policy or ["ours"])
    if all_settings:
        settings: tuple[Setting, ...] = ALL_SETTINGS
    else:
        for name, v in (("task-hours", task_hours), ("deadline-hours", deadline_hours)):
            if not v > 0:
                raise InputError(f"got {v}; expected > 0", field=name)
        if not overhead_hours >= 0:
            raise InputError(f"got {overhead_hours}; expected >= 0", field="overhead-hours")
        settings = (Setting(task_hours, deadline_hours, overhead_hours),)
    traces = load_traces(trace or default_traces())
    availability = {t.name: t.availability for t in traces}
    console = Console()
    info = console if fmt is OutputFormat.table else Console(stderr=True)  # stdout: the document
    results = []
    tables = []
    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                  console=info, transient=True) as progress:
        bar = progress.add_task("spot-deadline", total=len(settings) * len(traces) * len(names))
        for setting in settings:
            res = run_setting(traces, setting, names, starts,
                              on_step=lambda what: progress.update(bar, advance=1,
                                                                   description=what))
            results.extend(res)
            tables.append(render(res, setting, availability))
            if fmt is OutputFormat.table:  # each setting as it completes
                print_tables(tables[-1:], fmt, progress.console)
    if fmt is not OutputFormat.table:
        print_tables(tables, fmt, console)
    if json_out is not None:
        doc = {"results": [r.to_json() for r in results]}
        with_parent(json_out).write_text(json.dumps(doc, indent=1))
        info.print(f"wrote {json_out}")
