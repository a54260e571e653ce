"""Admission rules, worked by hand: MIG narrowing, the exclusive baseline, spot toleration."""

from __future__ import annotations

import pytest

from gpufleet.control.admission import (
    SPOT_TAINT,
    effective_request,
    mig_models,
    request_now,
    tolerates_spot,
)
from gpufleet.errors import InputError
from gpufleet.state import GPU_MILLI, ResourceRequest
from gpufleet.traces.jobs import JobSpec


def _spec(req: ResourceRequest, interruptible: bool = True) -> JobSpec:
    return JobSpec("j", 0.0, 60.0, req, interruptible=interruptible)


def test_fractional_request_is_kept_with_sharing_and_rounded_up_without() -> None:
    req = ResourceRequest(num_gpu=1, gpu_milli=250)
    assert effective_request(_spec(req), sharing=True, spot=False).gpu_milli == 250
    assert effective_request(_spec(req), sharing=False, spot=False).gpu_milli == GPU_MILLI


def test_mig_request_is_narrowed_to_models_offering_the_profile() -> None:
    req = ResourceRequest(num_gpu=1, mig_profile="1g.10gb")
    models = mig_models(req)
    assert models and all("A100" in m or "H100" in m for m in models)
    shared = effective_request(_spec(req), sharing=True, spot=False)
    assert shared.mig_profile == "1g.10gb" and shared.gpu_models == models
    whole = effective_request(_spec(req), sharing=False, spot=False)
    assert whole.mig_profile is None and whole.gpu_milli == GPU_MILLI
    assert whole.num_gpu == 1 and whole.gpu_models == models


def test_unknown_mig_profile_is_bad_input() -> None:
    with pytest.raises(InputError, match="no catalogued GPU offers MIG profile"):
        effective_request(_spec(ResourceRequest(num_gpu=1, mig_profile="9g.1tb")), True, False)


def test_only_interruptible_jobs_on_a_spot_fleet_tolerate_spot() -> None:
    req = ResourceRequest(num_gpu=1)
    assert tolerates_spot(effective_request(_spec(req), sharing=True, spot=True))
    assert not tolerates_spot(effective_request(_spec(req), sharing=True, spot=False))
    assert not tolerates_spot(effective_request(_spec(req, interruptible=False), True, True))


def test_a_pin_to_on_demand_drops_the_toleration_only_while_it_holds() -> None:
    req = ResourceRequest(num_gpu=1, tolerations=frozenset({SPOT_TAINT, "other"}))
    assert request_now(req, on_demand_only=False) is req
    pinned = request_now(req, on_demand_only=True)
    assert pinned.tolerations == frozenset({"other"})
    assert request_now(ResourceRequest(num_gpu=1), on_demand_only=True).tolerations == frozenset()


def test_a_job_that_cannot_checkpoint_stays_off_spot() -> None:
    # a reclaim would cost it all its work: no toleration, so it neither asks scale-up for spot
    # nor fills a spot node launched for others; on a fleet without checkpointing, no job does
    req = ResourceRequest(num_gpu=1)
    no_ckpt = JobSpec("j", 0.0, 60.0, req, checkpointable=False)
    assert not tolerates_spot(effective_request(no_ckpt, sharing=True, spot=True))
    assert not tolerates_spot(effective_request(_spec(req), True, True, checkpointing=False))
    assert tolerates_spot(effective_request(_spec(req), True, True, checkpointing=True))


@pytest.mark.parametrize(("sensitive", "v", "tolerates"), [
    (None, None, True),    # not stated: as before
    (False, 0.0, True),
    (True, None, False),   # latency-sensitive, no price on its delay: never on spot
    (True, 0.0, False),
    (True, 10.0, True),    # with one, the spot rule decides with it (market.spot_cost)
])
def test_a_latency_sensitive_job_tolerates_spot_only_with_a_value_of_time(
        sensitive: bool | None, v: float | None, tolerates: bool) -> None:
    job = JobSpec("j", 0.0, 60.0, ResourceRequest(num_gpu=1), latency_sensitive=sensitive,
                  value_of_time_usd_per_gpu_hour=v)
    assert tolerates_spot(effective_request(job, sharing=True, spot=True)) is tolerates


def test_rules_run_once_per_request_shape_and_keep_an_unchanged_request() -> None:
    """Two jobs with equal requests get equal effective requests (the second from the memo);
    a request the rules leave alone comes back as the very object given; every lever pair
    still gives its own answer."""
    a, b = ResourceRequest(num_gpu=1, gpu_milli=250), ResourceRequest(num_gpu=1, gpu_milli=250)
    assert effective_request(_spec(a), True, False) is a
    assert effective_request(_spec(b), True, False) is b
    ra, rb = (effective_request(_spec(r), False, True) for r in (a, b))
    assert ra == rb and ra.gpu_milli == GPU_MILLI and SPOT_TAINT in ra.tolerations
    assert SPOT_TAINT not in effective_request(_spec(a, interruptible=False), False, True
                                               ).tolerations
    assert effective_request(_spec(a), False, False).gpu_milli == GPU_MILLI
    with pytest.raises(InputError, match="job j2"):
        effective_request(JobSpec("j2", 0.0, 60.0, ResourceRequest(num_gpu=1,
                                                                   mig_profile="9g.9gb")),
                          True, False)
