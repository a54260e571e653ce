"""Headroom in the simulator (``control.headroom``): ``gpufleet-no-swap`` against
``gpufleet-plain`` (neither swaps on-demand work to spot), real runs on the first 2,000 Philly
jobs, checked for what the buffer is for (arrivals start without waiting for a node to boot),
for accounting and lost work, and that no buffer is exactly the plain run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpufleet.config import default_scenario, scenarios_named
from gpufleet.control.headroom import Headroom, HeadroomSettings
from gpufleet.control.policies import headroom
from gpufleet.sim.invariants import check_accounting
from gpufleet.sim.runner import Simulation
from gpufleet.traces.jobs import JobSpec, load_jobs

UNTIMED = ("wall_seconds", "events_per_s", "cpu_seconds")


@pytest.fixture(scope="module")
def jobs(shared_data: Path) -> list[JobSpec]:
    return load_jobs(shared_data / "philly" / "philly_jobs.csv")[:2000]


def run(name: str, jobs: list[JobSpec], cfg: HeadroomSettings | None = None) -> Simulation:
    [sc] = scenarios_named([name])
    sim = Simulation(sc, 0, jobs)
    if cfg is not None:
        sim.sim.ctl.headroom = Headroom(cfg)
    sim.run(None)
    return sim


def waits(sim: Simulation) -> np.ndarray:
    return np.array([j.first_start_s - j.spec.submit_s for j in sim.sim.jobs])


def test_arrivals_wait_less_and_nothing_is_lost(jobs: list[JobSpec]) -> None:
    plain, kept = run("gpufleet-plain", jobs), run("gpufleet-no-swap", jobs)
    p, k = plain.summary(), kept.summary()
    assert k["jobs_lost"] == 0 and k["jobs_finished"] == len(jobs)
    assert check_accounting(kept.sim) == []  # allocated ≥ useful + lost, per job and fleet
    wp, wk = waits(plain), waits(kept)
    # measured: 47 % of the jobs wait (mean 58 s) without the buffer, 23 % (25 s) with it (31 %
    # and 38 s with the Poisson buffer before 2026-12-05)
    assert (wk > 0).mean() < 0.8 * (wp > 0).mean()
    assert wk.mean() < 0.8 * wp.mean()
    assert k["jct_p50_s"] < p["jct_p50_s"]
    assert not any(u.job_id.startswith("headroom") for u in kept.sim.autoscaler.unprovisioned)


def test_no_buffer_is_the_plain_run(jobs: list[JobSpec]) -> None:
    """A buffer capped at 0 GPUs: no placeholder, no limit on disruption — every figure of
    the plain run."""
    none = run("gpufleet-no-swap", jobs, HeadroomSettings(horizon_s=190.0, max_gpus=0))
    a, b = none.summary(), run("gpufleet-plain", jobs).summary()
    assert {k: v for k, v in a.items() if k not in UNTIMED} == \
        {k: v for k, v in b.items() if k not in UNTIMED}


@pytest.mark.parametrize(("update", "horizon"), [
    ({"headroom": True}, 180.0 + 10.0),
    ({"headroom": True, "provisioning_delay_s": 300.0, "scan_interval_s": 30.0}, 330.0),
    ({"headroom": False}, None),
    ({"headroom": True, "autoscaling": False}, None),  # a fixed fleet launches nothing
])
def test_settings_follow_the_scenario(update: dict[str, object], horizon: float | None) -> None:
    got = headroom(default_scenario().model_copy(update=update))
    assert (got.cfg.horizon_s if got is not None else None) == horizon
