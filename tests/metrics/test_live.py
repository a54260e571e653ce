"""run_paced: simulated time follows wall time x speed, with an injected clock (no sleeping)."""

from __future__ import annotations

import threading

import pytest

from gpufleet.metrics.live import run_paced
from gpufleet.metrics.snapshot import FleetSnapshot

from .conftest import fleet_snapshot


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.t += seconds


class ScriptedSim:
    """A simulation whose work ends at ``end_s``; each step may cost wall time."""

    def __init__(self, clock: FakeClock, end_s: float, step_cost_s: float = 0.0) -> None:
        self.now = 0.0
        self.end_s = end_s
        self.clock = clock
        self.step_cost_s = step_cost_s
        self.targets: list[float] = []

    def run_until(self, t_s: float) -> bool:
        self.targets.append(t_s)
        self.clock.t += self.step_cost_s
        self.now = min(t_s, self.end_s)
        return t_s < self.end_s

    def snapshot(self) -> FleetSnapshot:
        return fleet_snapshot(time_s=self.now)


def test_sim_time_tracks_wall_time_times_speed() -> None:
    clock = FakeClock()
    sim = ScriptedSim(clock, end_s=500.0)
    seen: list[float] = []
    n = run_paced(sim, 60.0, lambda s: seen.append(s.time_s), 2.0, clock=clock, sleep=clock.sleep)
    # ticks every 2 wall s -> 120 sim s per tick; 500 s of work needs 5 ticks (600 >= 500)
    assert sim.targets == [120.0, 240.0, 360.0, 480.0, 600.0]
    assert seen == [0.0, 120.0, 240.0, 360.0, 480.0, 500.0]
    assert n == 6
    assert clock.t == 1010.0


def test_slow_steps_catch_up_without_bursts() -> None:
    clock = FakeClock()
    sim = ScriptedSim(clock, end_s=10_000.0, step_cost_s=2.5)  # each step overruns a 1 s tick
    run_paced(sim, 10.0, lambda s: None, 1.0, clock=clock, sleep=clock.sleep)
    # wall 1000 -> tick 1 at 1001: target 10, step ends 1003.5; missed ticks 2, 3 are skipped,
    # tick 4 at 1004: target 40, ends 1006.5; tick 7 at 1007: target 70; ... (never behind)
    assert sim.targets[:4] == [10.0, 40.0, 70.0, 100.0]
    gaps = [b - a for a, b in zip(sim.targets, sim.targets[1:], strict=False)]
    assert min(gaps) >= 10.0  # no burst of back-to-back zero-length steps


def test_stop_event_ends_the_loop() -> None:
    clock = FakeClock()
    sim = ScriptedSim(clock, end_s=1e9)
    stop = threading.Event()
    count = 0

    def on_snapshot(_: FleetSnapshot) -> None:
        nonlocal count
        count += 1
        if count == 3:
            stop.set()

    assert run_paced(sim, 1.0, on_snapshot, 1.0, stop=stop, clock=clock, sleep=clock.sleep) == 3


@pytest.mark.parametrize(("speed", "interval"), [(0.0, 1.0), (-1.0, 1.0), (1.0, 0.0)])
def test_rejects_non_positive_speed_or_interval(speed: float, interval: float) -> None:
    with pytest.raises(ValueError, match="must be > 0"):
        run_paced(ScriptedSim(FakeClock(), 1.0), speed, lambda s: None, interval)


def test_real_clock_paces_in_real_time() -> None:
    import time

    clock = FakeClock()  # only as the sim's wall-cost sink; the pacer uses the real clock
    sim = ScriptedSim(clock, end_s=30.0)
    t0 = time.monotonic()
    run_paced(sim, 100.0, lambda s: None, 0.1)
    elapsed = time.monotonic() - t0
    assert 0.25 <= elapsed < 2.0  # 30 sim s at 100x = 0.3 wall s
