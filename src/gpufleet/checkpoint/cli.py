"""``gpufleet run``: the local supervisor (see :mod:`gpufleet.checkpoint.supervisor`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from gpufleet.checkpoint.notices import DEFAULT_POLL_S, PROVIDERS, make_watcher
from gpufleet.checkpoint.supervisor import RunConfig, Supervisor
from gpufleet.cli_app import app, friendly_errors
from gpufleet.errors import InputError

_console = Console(stderr=True, highlight=False, soft_wrap=True)


@app.command(
    "run",
    context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True},
)
@friendly_errors
def run(
    cmd: Annotated[list[str], typer.Argument(metavar="-- CMD...", help="The training command.")],
    restart: Annotated[
        bool, typer.Option("--restart", help="Restart when the job exits 'preempted' (75).")
    ] = False,
    max_restarts: Annotated[
        int, typer.Option("--max-restarts", help="Restarts before giving up.")
    ] = 10,
    notice_url: Annotated[
        str | None,
        typer.Option(
            "--notice-url", help="Metadata service base URL to poll for preemption notices."
        ),
    ] = None,
    provider: Annotated[
        str | None,
        typer.Option("--provider", help=f"Notice format: {', '.join(PROVIDERS)} (default aws)."),
    ] = None,
    grace: Annotated[
        float,
        typer.Option("--grace", help="Seconds between SIGTERM and SIGKILL (capped by the notice)."),
    ] = 30.0,
    poll: Annotated[
        float, typer.Option("--poll", help="Notice poll interval, seconds.")
    ] = DEFAULT_POLL_S,
    status_dir: Annotated[
        Path | None,
        typer.Option(
            "--status-dir", help="Keep per-attempt status files here (default: temp dir)."
        ),
    ] = None,
) -> None:
    """Run CMD, forward preemption notices as SIGTERM, restart it when it exits preempted."""
    if poll <= 0:
        raise InputError(f"--poll must be > 0 s, got {poll}", field="poll")
    watcher = None
    if notice_url is not None or provider is not None:
        watcher = make_watcher(provider or "aws", notice_url)
    cfg = RunConfig(
        cmd=tuple(cmd),
        restart=restart,
        max_restarts=max_restarts,
        grace_s=grace,
        watcher=watcher,
        poll_s=poll,
        status_dir=status_dir,
    )
    rc = Supervisor(cfg, out=lambda line: _console.print(line, markup=False)).run()
    raise typer.Exit(code=rc)
