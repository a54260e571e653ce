"""The value of time in the simulator (``control.value_of_time``): the same workload with delay
free (v = 0) and dear (v = 1000 $/GPU-h) — the dear run keeps its work off spot and in place,
so fewer reclaims and swaps and fewer late jobs."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.config import scenarios_named
from gpufleet.sim.batch import run_one
from gpufleet.sim.report import add_relative
from gpufleet.traces.jobs import JobSpec
from gpufleet.traces.synthetic import SyntheticWorkload, generate


@pytest.fixture(scope="module")
def jobs() -> list[JobSpec]:
    """200 long, checkpointable jobs over half a day (``tests/sim/test_spot_swap.py``'s):
    long-lived on-demand nodes to swap, spot launches to reclaim."""
    return generate(SyntheticWorkload(jobs=200, days=0.5, long_median_s=7200.0,
                                      checkpointable_share=1.0), seed=0)


def test_a_dear_delay_gives_fewer_reclaims_and_swaps_and_fewer_late_jobs(
        shared_data, jobs) -> None:
    static, base = scenarios_named(["static", "gpufleet"])
    free = base.model_copy(update={"value_of_time_usd_per_gpu_hour": 0.0})
    dear = free.model_copy(update={"name": "gpufleet-dear-delay",
                                   "value_of_time_usd_per_gpu_hour": 1000.0})
    outs = {sc.name: run_one(sc, 0, jobs) for sc in (static, free, dear)}
    s: dict[str, dict[str, Any]] = {n: dict(o.summary) for n, o in outs.items()}
    add_relative(s, {n: o.finishes for n, o in outs.items()})
    f, d = s["gpufleet"], s["gpufleet-dear-delay"]
    assert f["spot_reclaims"] + f["spot_swaps"] > 0  # the free run uses spot and swaps
    assert d["spot_reclaims"] + d["spot_swaps"] < f["spot_reclaims"] + f["spot_swaps"]
    assert d["late_over_5min_share"] < f["late_over_5min_share"]
    assert d["jobs_finished"] == f["jobs_finished"] == len(jobs)
