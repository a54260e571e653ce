"""Drive a simulation in scaled real time so Prometheus and Grafana can watch it "live".

The simulator itself never reads a clock; this driver does, and only here. Simulated time is tied
to elapsed wall time (``sim_t = start + elapsed * speed``) rather than advanced by a fixed step per
tick, so a slow step or a slow scrape does not make the simulation drift behind: the next step
simply catches up. Clock and sleep are injectable for tests.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Protocol

from gpufleet.metrics.snapshot import FleetSnapshot


class PacedSimulation(Protocol):
    """The part of ``gpufleet.sim.runner.Simulation`` the pacer needs."""

    @property
    def now(self) -> float: ...

    def run_until(self, t_s: float) -> bool: ...

    def snapshot(self) -> FleetSnapshot: ...


def run_paced(
    sim: PacedSimulation,
    speed: float,
    on_snapshot: Callable[[FleetSnapshot], None],
    interval_s: float,
    *,
    stop: threading.Event | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] | None = None,
) -> int:
    """Advance ``sim`` at ``speed`` simulated seconds per wall second until its work is done.

    Every ``interval_s`` wall seconds the simulation is run up to the matching simulated time and
    ``on_snapshot`` receives a fresh snapshot (one first, before any time passes, so an exporter
    has data at once). Returns the number of snapshots delivered. ``stop`` ends the loop early;
    by default the wait is ``stop.wait`` so a stop request interrupts it at once.
    """
    if not (math.isfinite(speed) and speed > 0):  # nan passes a plain `<= 0` test
        raise ValueError(f"speed must be > 0 simulated seconds per wall second, got {speed}")
    if not (math.isfinite(interval_s) and interval_s > 0):
        raise ValueError(f"interval_s must be > 0 seconds, got {interval_s}")
    stop = stop if stop is not None else threading.Event()
    wait = sleep if sleep is not None else stop.wait

    start_wall = clock()
    start_sim = sim.now
    on_snapshot(sim.snapshot())
    delivered = 1
    tick = 0
    while not stop.is_set():
        tick += 1
        delay = start_wall + tick * interval_s - clock()
        if delay > 0:
            wait(delay)
            if stop.is_set():
                break
        target = start_sim + (clock() - start_wall) * speed
        more = sim.run_until(target)
        on_snapshot(sim.snapshot())
        delivered += 1
        if not more:
            break
        # Fell behind (a step took longer than an interval)? Skip the missed ticks, don't burst.
        tick = max(tick, int((clock() - start_wall) / interval_s))
    return delivered
