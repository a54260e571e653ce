"""Where a job's price of delay comes from, and when a latency-sensitive job may go to spot
(``control.value_of_time``), as case tables."""

from __future__ import annotations

import pytest

from gpufleet.config import Scenario
from gpufleet.control.value_of_time import (
    Delay,
    DelayDefaults,
    resolve,
    spot_eligible,
    with_delay,
)
from gpufleet.queueing.teams.settings import QueueSettings, TeamsSettings
from gpufleet.state import ResourceRequest
from gpufleet.traces.jobs import JobSpec

# the module docstring's example: scenario v 2; team vision v 10 and latency-sensitive;
# team audio latency-sensitive only
DEFAULTS = DelayDefaults(2.0, {"vision": (10.0, True), "audio": (None, True)})


@pytest.mark.parametrize(("own_v", "own_ls", "team", "want"), [
    (40.0, None, "vision", Delay(40.0, True)),    # the job's v, the team's mark
    (None, None, "vision", Delay(10.0, True)),    # both the team's
    (None, False, "vision", Delay(10.0, False)),  # the job says not sensitive: it wins
    (0.0, None, "vision", Delay(0.0, True)),      # a stated 0 is a value, not "unset"
    (None, None, "audio", Delay(2.0, True)),      # the team sets no v: the scenario's
    (None, None, "other", Delay(2.0, False)),     # no team entry: the scenario's, not sensitive
    (None, None, None, Delay(2.0, False)),
    (7.0, True, "other", Delay(7.0, True)),
])
def test_resolve_most_specific_first(own_v: float | None, own_ls: bool | None,
                                     team: str | None, want: Delay) -> None:
    assert resolve(own_v, own_ls, team, DEFAULTS) == want


@pytest.mark.parametrize(("sensitive", "v", "known", "want"), [
    (False, 0.0, True, True),
    (False, 0.0, False, True),
    (True, 0.0, True, False),   # its delay would count as free: never on spot
    (True, 10.0, True, True),   # the spot rule with its v decides
    (True, 10.0, False, False),  # a risk the rule cannot weigh (no stated work)
])
def test_spot_eligible(sensitive: bool, v: float, known: bool, want: bool) -> None:
    assert spot_eligible(sensitive, v, known) is want


def _job(**kw: object) -> JobSpec:
    return JobSpec("j", 0.0, 60.0, ResourceRequest(num_gpu=1), **kw)  # type: ignore[arg-type]


def test_the_scenario_and_its_teams_are_the_defaults() -> None:
    sc = Scenario(name="s", value_of_time_usd_per_gpu_hour=2.0, teams=TeamsSettings(queues=(
        QueueSettings(name="vision", value_of_time_usd_per_gpu_hour=10.0,
                      latency_sensitive=True),
        QueueSettings(name="plain", gpus=4.0))))
    d = DelayDefaults.of(sc)
    assert d == DelayDefaults(2.0, {"vision": (10.0, True)})
    assert with_delay(_job(tenant="vision"), d).value_of_time_usd_per_gpu_hour == 10.0
    assert with_delay(_job(tenant="vision"), d).latency_sensitive is True
    assert with_delay(_job(tenant="plain"), d).value_of_time_usd_per_gpu_hour == 2.0
    assert with_delay(_job(tenant="plain", value_of_time_usd_per_gpu_hour=5.0),
                      d).value_of_time_usd_per_gpu_hour == 5.0


def test_with_nothing_set_the_job_is_the_same_object() -> None:
    """A scenario with v = 0 and no team settings leaves every job as loaded: the runs are the
    runs without a value of time. The default scenario's v (3) is written into a job stating
    none."""
    job = _job()
    free = Scenario(name="s", value_of_time_usd_per_gpu_hour=0.0)
    assert with_delay(job, DelayDefaults.of(free)) is job
    assert not DelayDefaults.of(free).any
    priced = with_delay(job, DelayDefaults.of(Scenario(name="s")))
    assert (priced.value_of_time_usd_per_gpu_hour, priced.latency_sensitive) == (3.0, False)
    # settings that resolve to what the job already carries leave it too
    stated = _job(value_of_time_usd_per_gpu_hour=2.0, latency_sensitive=False)
    assert with_delay(stated, DelayDefaults(2.0)) is stated


@pytest.mark.parametrize("bad", [-1.0, float("inf"), float("nan"), 2e6])
def test_the_settings_are_finite_and_not_negative(bad: float) -> None:
    with pytest.raises(ValueError, match="value_of_time_usd_per_gpu_hour"):
        Scenario(name="s", value_of_time_usd_per_gpu_hour=bad)
    with pytest.raises(ValueError, match="value_of_time_usd_per_gpu_hour"):
        QueueSettings(name="q", value_of_time_usd_per_gpu_hour=bad)
