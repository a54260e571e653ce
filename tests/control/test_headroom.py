"""Headroom: the buffer's size, its placeholders and what disruption may take, as case tables
with hand-worked numbers (``control.headroom``'s docstring example is the first row of each)."""

from __future__ import annotations

import math

import pytest

from gpufleet.control.headroom import (
    PLACEHOLDER,
    ArrivalRate,
    Headroom,
    HeadroomSettings,
    buffer_gpus,
    free_gpus,
    launch_wanted,
    placeholders,
    poisson_quantile,
    spare_gpus,
)
from gpufleet.decisions import Bind
from gpufleet.state import GPU_MILLI, FleetState, NodeInfo, ResourceRequest

CORDON = "node.kubernetes.io/unschedulable:NoSchedule"
CFG = HeadroomSettings(horizon_s=180 + 10)  # 1 h window, 0.9 quantile, at most 64 GPUs


@pytest.mark.parametrize(("mean", "q", "cap", "want", "why"), [
    (1.9, 0.9, 64, 4, "CDF 0.150, 0.434, 0.704, 0.874, 0.956: 4 is the first ≥ 0.9"),
    (1.9, 0.95, 64, 4, "0.956 ≥ 0.95"),
    (1.9, 0.96, 64, 5, "0.956 < 0.96; at 5 the CDF is 0.987"),
    (1.0, 0.9, 64, 2, "CDF 0.368, 0.736, 0.920"),
    (0.1, 0.9, 64, 0, "P(0) = e^-0.1 = 0.905 already"),
    (0.0, 0.9, 64, 0, "no arrivals seen: no buffer"),
    (100.0, 0.9, 64, 64, "the cap bounds the buffer (and the loop)"),
])
def test_poisson_quantile(mean: float, q: float, cap: int, want: int, why: str) -> None:
    assert poisson_quantile(mean, q, cap) == want, why


@pytest.mark.parametrize(("arrivals", "now", "want_rate", "want_buffer", "why"), [
    # 36 GPUs over the last hour: 0.01 GPU/s × 190 s = 1.9 → 4
    ([(100.0 * k, 1.0) for k in range(36)], 3599.0, 0.01, 4, "the docstring example"),
    # the same arrivals an hour later: those at or before now − 3600 have left the window
    ([(100.0 * k, 1.0) for k in range(36)], 3600.0 + 1000.0, 25 / 3600, 3,
     "25 left (1100..3500 s): 25/3600 × 190 = 1.319 → CDF 0.267, 0.620, 0.853, 0.955"),
    # GPUs, not jobs, are the Poisson unit: an 8-GPU arrival counts as 8 independent ones
    ([(0.0, 8.0)], 10.0, 8 / 3600, 1, "one 8-GPU job: 0.422 mean → CDF 0.656, 0.932"),
    ([(0.0, 8.0)], 3600.0, 0.0, 0, "an hour later it is forgotten: the fleet may reach zero"),
    ([], 50.0, 0.0, 0, "nothing seen"),
])
def test_rate_and_buffer(arrivals: list[tuple[float, float]], now: float, want_rate: float,
                         want_buffer: int, why: str) -> None:
    hr = Headroom(CFG)
    for t, g in arrivals:
        hr.arrived(t, g)
    assert hr.rate.gpus_per_s(now) == pytest.approx(want_rate), why
    assert hr.buffer(now) == want_buffer, why
    assert buffer_gpus(want_rate, CFG) == want_buffer, why


def test_rate_window_forgets_in_time_order() -> None:
    r = ArrivalRate(window_s=100.0)
    r.arrived(0.0, 2.0)
    r.arrived(50.0, 0.5)  # a fractional pod counts its share
    assert r.gpus_per_s(99.0) == pytest.approx(2.5 / 100)
    assert r.gpus_per_s(120.0) == pytest.approx(0.5 / 100)
    assert r.gpus_per_s(150.0) == 0.0


@pytest.mark.parametrize(("buffer", "free", "want_pods", "want_spare", "why"), [
    (4, 1.5, 3, -2.5, "the docstring example: 4 − 1.5 rounded up; disruption takes nothing"),
    (4, 4.0, 0, 0.0, "exactly covered: no placeholder, nothing to spare"),
    (4, 12.0, 0, 8.0, "an idle 8-GPU node above the buffer may go"),
    (0, 0.0, 0, math.inf, "no buffer: no placeholder, and disruption runs as without one"),
    (3, 0.0, 3, -3.0, "nothing free"),
])
def test_placeholders_and_spare(buffer: int, free: float, want_pods: int, want_spare: float,
                                why: str) -> None:
    pods = placeholders(buffer, free)
    assert len(pods) == want_pods, why
    assert spare_gpus(buffer, free) == want_spare, why
    for p in pods:  # 1 whole GPU, spot allowed, launch now; distinct objects (scale-up's rule)
        assert (p.job_id, p.request.num_gpu, p.spot_ok, p.waited_s) == \
            (PLACEHOLDER, 1, True, math.inf)
    assert len({id(p) for p in pods}) == len(pods)


@pytest.mark.parametrize(("buffer", "free", "booting", "want"), [
    (4, 1.5, 0.0, True),  # 2.5 short, nothing coming
    (4, 1.5, 8.0, False),  # an 8-GPU node boots: it covers the shortfall
    (4, 1.5, 2.5, False),  # exactly covered once it is up
    (4, 1.5, 2.0, True),
    (0, 0.0, 0.0, False),
])
def test_launch_wanted(buffer: int, free: float, booting: float, want: bool) -> None:
    assert launch_wanted(buffer, free, booting) == want


def test_free_gpus_counts_whole_gpus_on_open_nodes() -> None:
    """Two 4-GPU nodes: on "a" one GPU is taken and one holds a half-GPU pod (2 wholly free);
    "b" is cordoned (4 free, closed to arrivals); a 2-GPU MIG node offers slices, not GPUs."""
    st = FleetState()
    st.add_node("a", gpu_model="V100", num_gpus=4, cpu_milli=32000, memory_mib=65536)
    st.add_node("b", gpu_model="V100", num_gpus=4, cpu_milli=32000, memory_mib=65536,
                info=NodeInfo("b", taints=frozenset({CORDON})))
    st.add_node("m", gpu_model="A100-40GB", num_gpus=2, cpu_milli=32000, memory_mib=65536,
                mig_gpus=[0, 1])
    st.allocate(ResourceRequest(num_gpu=1), Bind("j1", "a", (0,), GPU_MILLI))
    st.allocate(ResourceRequest(num_gpu=1, gpu_milli=500), Bind("j2", "a", (1,), 500))
    assert free_gpus(st) == 2 + 4
    assert free_gpus(st, [CORDON]) == 2
    assert free_gpus(st, ["some-other-taint:NoSchedule"]) == 2 + 4  # unknown: closes nothing
