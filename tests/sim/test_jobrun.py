from __future__ import annotations

import pytest

from gpufleet.sim.jobrun import JobRun
from gpufleet.state import ResourceRequest
from gpufleet.traces.jobs import JobSpec


def job(duration: float, tau: float, cost: float = 30.0, overhead: float = 0.0) -> JobRun:
    spec = JobSpec("j", 0.0, duration, ResourceRequest(num_gpu=1), checkpoint_cost_s=cost)
    j = JobRun(0, spec, spec.request, 0)
    j.seg_start = 100.0
    j.ckpt_tau = tau
    j.overhead = overhead
    return j


@pytest.mark.parametrize(
    ("now", "done", "saved"),
    [
        (100.0, 0.0, 0.0),
        (700.0, 600.0, 0.0),  # inside the first chunk
        (1100.0, 1000.0, 0.0),  # chunk done, checkpoint being written
        (1130.0, 1000.0, 1000.0),  # checkpoint complete
        (1630.0, 1500.0, 1000.0),
    ],
)
def test_progress_hand_worked(now: float, done: float, saved: float) -> None:
    j = job(3500.0, 1000.0)
    assert j.progress(now) == pytest.approx((done, saved))


def test_finish_time_counts_checkpoints_but_not_after_the_last_chunk() -> None:
    # 3500 s of work, tau 1000: chunks 1000/1000/1000/500, three checkpoints of 30 s
    assert job(3500.0, 1000.0).finish_time() == pytest.approx(100 + 3500 + 90)
    # exactly 3000 s: chunks 1000×3, two checkpoints
    assert job(3000.0, 1000.0).finish_time() == pytest.approx(100 + 3000 + 60)
    # restart overhead first, no checkpoints without an interval
    assert job(500.0, float("inf"), overhead=120).finish_time() == pytest.approx(720.0)
    j = job(500.0, float("inf"), overhead=120)
    assert j.progress(200.0) == (0.0, 0.0)
