"""A streamed workload (``sim.job_table``): the same run as the list, in memory that follows
the jobs in flight."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gpufleet.config import scenarios_named
from gpufleet.queueing.teams.settings import TeamsSettings
from gpufleet.sim.batch import run_one
from gpufleet.sim.runner import Simulation
from gpufleet.sim.summary import TIMING
from gpufleet.traces.jobs import JobSpec
from gpufleet.traces.synthetic import SyntheticStream, SyntheticWorkload, generate

PARAMS = SyntheticWorkload(jobs=600, days=1)
TEAMS = TeamsSettings.model_validate({"queues": [
    {"name": name, "gpus": gpus, "cohort": "lab"}
    for name, gpus in (("vision", 12), ("nlp", 8), ("speech", 4), ("recsys", 4))]})


class Stream:
    """A list read as a stream: what the simulator sees of ``SyntheticStream``."""

    def __init__(self, jobs: list[JobSpec]) -> None:
        self.jobs = jobs

    def __len__(self) -> int:
        return len(self.jobs)

    def __iter__(self) -> Iterator[JobSpec]:
        return iter(self.jobs)


def _figures(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in summary.items() if k not in TIMING}


@pytest.mark.parametrize("name", ["static", "gpufleet", "gpufleet-teams"])
def test_a_streamed_run_is_the_list_run_to_the_bit(name: str) -> None:
    """Every figure and every job's finish equal (the fixed fleet, spot interruptions and
    their stale events, teams' reclaim and budgets all run on streamed jobs)."""
    jobs = generate(PARAMS, 0)
    sc = scenarios_named(["static" if name == "static" else "gpufleet"])[0]
    if name == "gpufleet-teams":
        sc = sc.model_copy(update={"name": name, "teams": TEAMS})
    listed, streamed = run_one(sc, 0, jobs), run_one(sc, 0, Stream(jobs))
    assert _figures(streamed.summary) == _figures(listed.summary)
    assert streamed.finishes == listed.finishes
    assert listed.summary["jobs_finished"] == 600


def test_a_stream_holds_the_jobs_in_flight_and_forgets_the_ended() -> None:
    """3,000 jobs drawn 500 at a time: every job finishes; at most a few hundred are held at
    once, none at the end; a list holds all of them."""
    params = SyntheticWorkload(jobs=3000, days=9)
    sc = scenarios_named(["gpufleet"])[0]
    sim = Simulation(sc, 0, SyntheticStream(params, 0, chunk_jobs=500))
    s = sim.run()
    table = sim.sim.jobs
    assert s["jobs_finished"] == s["jobs_total"] == 3000 and s["jobs_lost"] == 0
    assert s["interruptions"] > 0  # stale finish events of ended jobs were met and ignored
    assert 0 < table.peak_live < 600 and table.held == 0
    assert list(table) == [] and len(table) == 3000
    assert sim.sim.life._by_id == {} and sim.sim.life._units == {}
    kept = Simulation(sc, 0, generate(SyntheticWorkload(jobs=300, days=1), 0))
    kept.run()
    assert kept.sim.jobs.held == 300


def test_a_stream_out_of_arrival_order_is_an_error_naming_the_job() -> None:
    jobs = generate(SyntheticWorkload(jobs=50, days=1), 0)
    jobs[10], jobs[30] = jobs[30], jobs[10]
    sim = Simulation(scenarios_named(["gpufleet"])[0], 0, Stream(jobs))
    with pytest.raises(ValueError, match=f"job {jobs[11].job_id}: a streamed workload must "
                                         "come in arrival order"):
        sim.run()
