"""The long-running exporter processes behind ``gpufleet exporter``.

Two sources, one exposition: ``nvml`` reads this machine's GPUs at every scrape; ``sim`` runs the
embedded default simulation in scaled real time and exports its GPUs under the same DCGM names,
plus the fleet and cost metrics, so the dashboard can be tried on a laptop. Each uses its own
:class:`CollectorRegistry` (never the process-global one) so nothing but our metrics is served.
"""

from __future__ import annotations

import errno
import math
import socket
import threading
from collections.abc import Callable
from wsgiref.simple_server import WSGIServer

from prometheus_client import start_http_server
from prometheus_client.registry import CollectorRegistry

from gpufleet.errors import InputError
from gpufleet.metrics.dcgm import DcgmCollector
from gpufleet.metrics.fleet import FleetMetrics
from gpufleet.metrics.live import PacedSimulation, run_paced
from gpufleet.metrics.nvml import NvmlReader


class SimulatorUnavailable(RuntimeError):
    """``--source sim`` was asked for but this build has no simulator."""


def start_server(
    registry: CollectorRegistry, host: str, port: int, *, option: str = "--port"
) -> WSGIServer:
    """Serve ``registry`` on http://host:port/metrics from a daemon thread.

    Any failure to listen (port taken, privileged, bad host) is an InputError naming ``option``
    and the address: callers bind before doing any work, so a bad port costs nothing.
    """
    field = option.lstrip("-")
    if not 0 <= port <= 65535:
        raise InputError(f"expected a TCP port 0..65535, got {port}", field=field)
    try:
        server, _thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise InputError(
                f"{host}:{port} is already in use; pick another {option}", field=field
            ) from None
        if isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL:
            raise InputError(f"cannot listen on {host}: {exc}", field="host") from None
        raise InputError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}", field=field
        ) from None
    except (ValueError, UnicodeError) as exc:  # e.g. a host with a NUL byte or bad IDNA label
        raise InputError(f"cannot listen on {host!r}: {exc}", field="host") from None
    return server


def serve_nvml(
    host: str, port: int, stop: threading.Event, on_ready: Callable[[str], None]
) -> None:
    """Export this machine's GPUs until ``stop`` is set. Raises NvmlUnavailable without NVML."""
    with NvmlReader() as reader:
        gpus = len(reader.read())  # fail now, not at the first scrape
        registry = CollectorRegistry()
        registry.register(DcgmCollector(reader.read))
        server = start_server(registry, host, port)
        try:
            on_ready(f"exporting {gpus} GPU series from NVML on http://{host}:{port}/metrics")
            stop.wait()
        finally:
            server.shutdown()
            server.server_close()


def load_default_simulation(seed: int) -> PacedSimulation:
    """The simulator's embedded default scenario (imported late: it is a heavy dependency)."""
    try:
        from gpufleet.sim.runner import Simulation, default_scenario
    except ModuleNotFoundError as exc:
        if exc.name not in ("gpufleet.sim", "gpufleet.sim.runner"):
            raise
        raise SimulatorUnavailable(
            "the simulator (gpufleet.sim.runner) is not installed in this build; "
            "--source sim needs it"
        ) from None
    return Simulation(default_scenario(), seed=seed)


MAX_SPEED = 1e7  # simulated seconds per wall second: ~4 months of simulated time per second
MIN_INTERVAL_S = 0.01
MAX_INTERVAL_S = 3600.0


def check_pace(speed: float, interval_s: float) -> None:
    """Finite, bounded pacing: nan compares false with every bound and used to slip through
    (a nan speed exported frozen numbers; a nan or inf interval never stepped)."""
    if not (math.isfinite(speed) and 0 < speed <= MAX_SPEED):
        raise InputError(
            f"expected a positive finite speed up to {MAX_SPEED:g}, got {speed}", field="speed"
        )
    if not (math.isfinite(interval_s) and MIN_INTERVAL_S <= interval_s <= MAX_INTERVAL_S):
        raise InputError(
            f"expected a positive interval in seconds, {MIN_INTERVAL_S:g} to "
            f"{MAX_INTERVAL_S:g}, got {interval_s}",
            field="interval",
        )


def serve_sim(
    host: str,
    port: int,
    stop: threading.Event,
    on_ready: Callable[[str], None],
    *,
    speed: float,
    interval_s: float,
    seed: int,
    sim: PacedSimulation | None = None,
) -> None:
    """Run a simulation at ``speed`` x real time, exporting its metrics until ``stop`` is set.

    When the simulated work is done the final state stays exported (a dashboard keeps showing
    the end of the run) until the process is stopped.
    """
    check_pace(speed, interval_s)
    registry = CollectorRegistry()
    metrics = FleetMetrics(registry)
    server = start_server(registry, host, port)  # a busy port fails before the sim is built
    try:
        simulation = sim if sim is not None else load_default_simulation(seed)
        on_ready(
            f"exporting a simulated fleet at {speed:g}x real time on http://{host}:{port}/metrics"
        )
        # run_paced publishes a first snapshot before any time passes (snapshot() drains the
        # completed recoveries, so each snapshot must reach FleetMetrics exactly once).
        run_paced(simulation, speed, metrics.update, interval_s, stop=stop)
        if not stop.is_set():
            on_ready(f"simulation done at t={simulation.now:.0f} s; still serving its end state")
            stop.wait()
    finally:
        server.shutdown()
        server.server_close()
