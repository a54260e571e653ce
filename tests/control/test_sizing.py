"""Fixed-fleet sizing: the time-weighted quantile of concurrent demand, worked by hand."""

from __future__ import annotations

import pytest

from gpufleet.control.sizing import demand_quantile_milli
from gpufleet.state import GPU_MILLI, ResourceRequest
from gpufleet.traces.jobs import JobSpec


def job(i: int, submit: float, dur: float, gpus: int = 1, milli: int = GPU_MILLI) -> JobSpec:
    return JobSpec(job_id=f"j{i}", submit_s=submit, duration_s=dur,
                   request=ResourceRequest(cpu_milli=1000, num_gpu=gpus, gpu_milli=milli))


def test_quantiles_of_a_hand_made_demand_curve() -> None:
    # 0-100 s: 1 GPU; 100-198 s: 3 GPUs; 198-200 s: 11 GPUs (a 2-s spike); 200-300 s: 1 GPU
    jobs = [job(0, 0, 300), job(1, 100, 100, gpus=2), job(2, 198, 2, gpus=8)]
    assert demand_quantile_milli(jobs, sharing=False, q=1.0) == 11 * GPU_MILLI  # the peak
    # the spike is 2/300 = 0.67 % of the time: the p99 ignores it
    assert demand_quantile_milli(jobs, sharing=False, q=0.99) == 3 * GPU_MILLI
    # 1 GPU for 200 of 300 s: the median is 1 GPU
    assert demand_quantile_milli(jobs, sharing=False, q=0.5) == 1 * GPU_MILLI


def test_sharing_counts_fractions_and_exclusive_rounds_up() -> None:
    jobs = [job(0, 0, 100, milli=250), job(1, 0, 100, milli=250)]
    assert demand_quantile_milli(jobs, sharing=True, q=0.99) == 500
    assert demand_quantile_milli(jobs, sharing=False, q=0.99) == 2 * GPU_MILLI


@pytest.mark.parametrize("q", [0.5, 0.9, 0.99, 1.0])
def test_quantile_never_exceeds_the_peak(q: float) -> None:
    jobs = [job(i, 37.0 * i, 500 + 13 * i, gpus=1 + i % 4) for i in range(40)]
    assert demand_quantile_milli(jobs, False, q) <= demand_quantile_milli(jobs, False, 1.0)
