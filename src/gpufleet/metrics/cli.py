"""``gpufleet exporter``: dcgm-exporter-compatible GPU metrics, from NVML or a simulated fleet."""

from __future__ import annotations

import enum
import signal
import threading
from types import FrameType
from typing import Annotated

import typer
from rich.console import Console

from gpufleet.cli_app import app, err_console, friendly_errors
from gpufleet.metrics.exporter import SimulatorUnavailable, serve_nvml, serve_sim
from gpufleet.metrics.nvml import NvmlUnavailable

console = Console(stderr=True)


class Source(enum.StrEnum):
    nvml = "nvml"
    sim = "sim"


def _stop_on_signals(stop: threading.Event) -> None:
    """SIGTERM/SIGINT end the exporter cleanly (exit 0), as a service manager expects."""

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


@app.command("exporter")
@friendly_errors
def exporter(
    source: Annotated[
        Source, typer.Option(help="nvml: this machine's GPUs; sim: a simulated fleet.")
    ] = Source.nvml,
    port: Annotated[int, typer.Option(help="TCP port (dcgm-exporter's default).")] = 9400,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    speed: Annotated[
        float, typer.Option(help="sim only: simulated seconds per wall-clock second.")
    ] = 60.0,
    interval: Annotated[
        float, typer.Option(help="sim only: wall seconds between simulation steps.")
    ] = 1.0,
    seed: Annotated[int, typer.Option(help="sim only: random seed of the simulation.")] = 0,
) -> None:
    """Serve /metrics with dcgm-exporter's names and labels (plus gpufleet_* for --source sim)."""
    stop = threading.Event()
    _stop_on_signals(stop)

    def ready(line: str) -> None:
        console.print(line, highlight=False, soft_wrap=True)

    if source is Source.nvml:
        try:
            serve_nvml(host, port, stop, ready)
        except NvmlUnavailable as exc:
            err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(code=1) from None
    else:
        try:
            serve_sim(host, port, stop, ready, speed=speed, interval_s=interval, seed=seed)
        except SimulatorUnavailable as exc:
            err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(code=1) from None
