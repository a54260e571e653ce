"""The on-demand → spot swap in the simulator (``control.spot_swap``, on in ``gpufleet``):
real runs on the shared availability traces, checked for accounting, lost work and the knobs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpufleet.config import default_scenario, scenarios_named
from gpufleet.control.policies import spot_swap_settings
from gpufleet.control.spot_swap import SwapSettings
from gpufleet.sim.invariants import check_accounting
from gpufleet.sim.runner import Simulation
from gpufleet.traces.jobs import JobSpec
from gpufleet.traces.synthetic import SyntheticWorkload, generate


@pytest.fixture(scope="module")
def jobs() -> list[JobSpec]:
    """200 long, checkpointable jobs over half a day: long-lived on-demand nodes to swap."""
    return generate(SyntheticWorkload(jobs=200, days=0.5, long_median_s=7200.0,
                                      checkpointable_share=1.0), seed=0)


def run(name: str, jobs: list[JobSpec], cfg: SwapSettings | None = None) -> Simulation:
    [sc] = scenarios_named([name])
    sim = Simulation(sc, 0, jobs)
    if cfg is not None:
        sim.sim.ctl.spot_swap = cfg
    sim.run(None)
    return sim


def test_swaps_move_work_to_spot_and_lose_nothing(shared_data, jobs) -> None:
    # gpufleet keeps headroom too: against gpufleet-no-swap only the swap differs
    plain, swap = run("gpufleet-no-swap", jobs), run("gpufleet", jobs)
    p, s = plain.summary(), swap.summary()
    assert p["spot_swaps"] == 0 and s["spot_swaps"] > 0
    assert s["jobs_lost"] == 0 and s["jobs_finished"] == len(jobs)
    assert check_accounting(swap.sim) == []  # allocated ≥ useful + lost, per job and fleet
    # each swap gracefully preempts the node's pods: they are interruptions, not losses
    assert s["interruptions"] >= s["spot_swaps"]
    assert s["spot_share_gpu_hours"] > p["spot_share_gpu_hours"]
    assert s["cost_usd"] < p["cost_usd"]


def test_no_swap_look_in_a_scan_whose_disruption_acted(shared_data, jobs) -> None:
    """``control.spot_swap.swap_look``: one disruption command per scan. Every scan whose
    emptiness or consolidation found a command skips the swap look; where that look could
    have swapped (``swap_owed``) the next scan comes one interval later at the latest
    (``ScanClock.swap_deferred``, the live loop's next cycle). The other scans look."""
    [sc] = scenarios_named(["gpufleet"])
    sim = Simulation(sc, 0, jobs)
    cluster = sim.sim
    scan = cluster.autoscaler
    disrupt, swap, owed = scan._disrupt, scan._spot_swap, scan._swap_owed
    scans: list[list[str]] = []
    times: list[float] = []

    def disrupt_logged(room: tuple[int, float] | None = None) -> bool:
        found = disrupt(room)
        scans.append(["acted" if found else "quiet"])
        times.append(cluster.now)
        return found

    def swap_logged(cfg: SwapSettings) -> None:
        scans[-1].append("swap look")
        swap(cfg)

    def owed_logged(cfg: SwapSettings) -> bool:
        got = owed(cfg)
        scans[-1].append("owed" if got else "not owed")
        return got

    scan._disrupt = disrupt_logged  # type: ignore[method-assign]
    scan._spot_swap = swap_logged  # type: ignore[method-assign]
    scan._swap_owed = owed_logged  # type: ignore[method-assign]
    sim.run(None)
    kinds = {tuple(s) for s in scans}
    # the run exercises every case; never at the node cap here
    assert kinds == {("quiet", "swap look"), ("acted", "owed"), ("acted", "not owed")}
    interval = sc.scan_interval_s
    assert all(later - t <= interval for s, t, later in zip(scans, times, times[1:], strict=False)
               if s == ["acted", "owed"])


def test_payback_knob_is_read(shared_data, jobs) -> None:
    """A payback nothing can meet: no swap, and the run is gpufleet-no-swap's."""
    never = run("gpufleet", jobs, replace(SwapSettings(), payback=1e12))
    plain = run("gpufleet-no-swap", jobs)
    a, b = never.summary(), plain.summary()
    assert a["spot_swaps"] == 0
    assert a["cost_usd"] == b["cost_usd"] and a["jct_p95_s"] == b["jct_p95_s"]


@pytest.mark.parametrize(("update", "on"), [
    ({"spot_swap": True}, True),
    ({"spot_swap": False}, False),
    ({"spot_swap": True, "spot": False}, False),  # nothing to swap to
    ({"spot_swap": True, "autoscaling": False}, False),  # a fixed fleet launches nothing
    ({"spot_swap": True, "checkpointing": False}, False),  # no pod may move
])
def test_settings_follow_the_scenario(update: dict[str, bool], on: bool) -> None:
    assert (spot_swap_settings(default_scenario().model_copy(update=update)) is not None) == on
