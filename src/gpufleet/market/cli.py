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


@bench_app.command("spot-deadline")
@friendly_errors
def spot_deadline(
    trace: list[Path] = typer.Option(  # noqa: B008
        None, "--trace", help="Availability trace JSON (repeatable); default: the six "
        "aws-02-15-2023 V100 zones under the shared data folder."),
    policy: list[str] = typer.Option(  # noqa: B008
        None, "--policy", help="Policy name (repeatable): on_demand, greedy, up, optimal, "
        f"ours (= {DEFAULT_DEADLINE_POLICY}); default: ours alone."),
    task_hours: float = typer.Option(48.0, "--task-hours", help="Work C in hours."),
    deadline_hours: float = typer.Option(60.0, "--deadline-hours", help="Deadline D in hours."),
    overhead_hours: float = typer.Option(0.2, "--overhead-hours", help="Overhead d in hours."),
    starts: int = typer.Option(300, "--starts", help="Start points per trace."),
    all_settings: bool = typer.Option(
        False, "--all-settings", help="Run the protocol's six settings (D 52/60/70 h × "
        "d 0.2/0.05 h, C 48 h) instead of the one given."),
    json_out: Path | None = typer.Option(None, "--json", help="Write results as JSON here."),  # noqa: B008
) -> None:
    """Spot, on-demand or wait under a deadline: policies vs. the omniscient optimum."""
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
    results = []
    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as progress:
        bar = progress.add_task("spot-deadline", total=len(settings) * len(traces) * len(names))
        for setting in settings:
            res = run_setting(traces, setting, names, starts,
                              on_step=lambda what: progress.update(bar, advance=1,
                                                                   description=what))
            results.extend(res)
            progress.console.print(render(res, setting, availability))
    if json_out is not None:
        json_out.write_text(json.dumps({"results": [r.to_json() for r in results]}, indent=1))
        console.print(f"wrote {json_out}")
