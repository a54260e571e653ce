"""Headroom: the buffer's size, its placeholders and what disruption may take, as case tables
with hand-worked numbers (``control.headroom``'s docstring example is the first row of each)."""

from __future__ import annotations

import math

import pytest

from gpufleet.control.headroom import (
    PLACEHOLDER,
    Arrivals,
    Headroom,
    HeadroomSettings,
    buffer_gpus,
    demand_quantile,
    free_gpus,
    launch_wanted,
    min_sample,
    placeholders,
    poisson_quantile,
    spare_gpus,
)
from gpufleet.decisions import Bind
from gpufleet.state import GPU_MILLI, FleetState, NodeInfo, ResourceRequest

CORDON = "node.kubernetes.io/unschedulable:NoSchedule"
CFG = HeadroomSettings(horizon_s=180 + 10)  # 1 h window, 0.9 quantile, at most 64 GPUs


# the docstring example: nine lone 1-GPU jobs, then a 4-GPU and a 2-GPU one 10 s apart
DOC = [(300.0 * k, 1.0) for k in range(9)] + [(2500.0, 4.0), (2510.0, 2.0)]
SPARSE = [(0.0, 1.0), (10.0, 2.0), (20.0, 1.0), (500.0, 4.0), (3000.0, 1.0)]


@pytest.mark.parametrize(("demands", "q", "cap", "want", "why"), [
    ([1.0] * 9 + [5.0, 7.0], 0.9, 64, 5, "the docstring example: 9.9 of 11 → the 10th"),
    ([1.0, 1.0, 3.0, 4.0, 4.0], 0.5, 64, 3, "2.5 of 5 → the 3rd"),
    ([1.0, 1.0, 3.0, 4.0, 4.0], 0.4, 64, 1, "exactly 2 of 5 → the 2nd (no float rounding up)"),
    ([float(k) for k in range(1, 11)], 0.9, 64, 9, "0.9 × 10 = 9.000000000000002 → the 9th"),
    ([0.25, 0.5], 0.9, 64, 1, "fractional demands round up to whole GPUs"),
    ([100.0], 0.9, 64, 64, "the cap bounds the buffer"),
    ([], 0.9, 64, 0, "nothing seen: no buffer"),
])
def test_demand_quantile(demands: list[float], q: float, cap: int, want: int, why: str) -> None:
    assert demand_quantile(demands, q, cap) == want, why


@pytest.mark.parametrize(("q", "want"), [(0.9, 10), (0.5, 2), (0.95, 20), (0.99, 100)])
def test_min_sample(q: float, want: int) -> None:
    assert min_sample(q) == want  # ⌈1 / (1 − q)⌉, with no float rounding up at 0.9 or 0.95


@pytest.mark.parametrize(("mean", "q", "cap", "want", "why"), [
    (0.475, 0.9, 64, 1, "the sparse case below: CDF 0.622, 0.917"),
    (0.7917, 0.9, 64, 2, "the docstring's Poisson aside: CDF 0.453, 0.812, 0.954"),
    (1.9, 0.9, 64, 4, "CDF 0.150, 0.434, 0.704, 0.874, 0.956: 4 is the first ≥ 0.9"),
    (1.9, 0.95, 64, 4, "0.956 ≥ 0.95"),
    (1.9, 0.96, 64, 5, "0.956 < 0.96; at 5 the CDF is 0.987"),
    (1.0, 0.9, 64, 2, "CDF 0.368, 0.736, 0.920 (the live capacity loop's one arrival)"),
    (0.1, 0.9, 64, 0, "P(0) = e^-0.1 = 0.905 already"),
    (0.0, 0.9, 64, 0, "no arrivals seen: no buffer"),
    (100.0, 0.9, 64, 64, "the cap bounds the buffer (and the loop)"),
])
def test_poisson_quantile(mean: float, q: float, cap: int, want: int, why: str) -> None:
    assert poisson_quantile(mean, q, cap) == want, why


@pytest.mark.parametrize(("arrivals", "now", "want_demands", "want_buffer", "why"), [
    (DOC, 2600.0, [1.0] * 9 + [5.0, 7.0], 5, "the docstring example"),
    # an hour after 0 s the first 1-GPU job has left: ten arrivals still, 9 of 10 → the 9th
    (DOC, 3600.0, [1.0] * 8 + [5.0, 7.0], 5, "0 s leaves at 3,600 s; 10 left: the 9th is 5"),
    # at 3,900 s the 300 s one has left too: nine, below the sample: the Poisson rule on the
    # window's 13 GPUs: 13/3600 × 190 = 0.686 → CDF 0.504, 0.849, 0.967 → 2
    (DOC, 3900.0, [1.0] * 7 + [5.0, 7.0], 2, "nine arrivals: the Poisson rule"),
    # five arrivals (needing 1, 3, 4, 4, 1) are too few: 9 GPUs an hour, mean 0.475 → 1, not
    # the largest demand's 4
    (SPARSE, 3100.0, [1.0, 1.0, 3.0, 4.0, 4.0], 1, "sparse: the Poisson rule"),
    (SPARSE, 6600.0, [], 0, "an hour after the last: forgotten, the fleet may reach zero"),
    # the horizon is (at − 190, at]: 190 s apart, one does not count the other; a burst at
    # one instant: each job needed the GPUs of those before it and its own
    ([(0.0, 3.0), (190.0, 1.0), (200.0, 1.0)] + [(300.0, 1.0)] * 7, 400.0,
     [3.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0], 8,
     "0 s alone: 3; 190 s alone: 1; 200 s with 190 s: 2; the burst of seven at 300 s with "
     "190 s and 200 s: 3 … 9; ten demands: the 9th sorted is 8"),
])
def test_demands_and_buffer(arrivals: list[tuple[float, float]], now: float,
                            want_demands: list[float], want_buffer: int, why: str) -> None:
    hr = Headroom(CFG)
    for t, g in arrivals:
        hr.arrived(t, g)
    assert hr.arrivals.demands(now) == pytest.approx(sorted(want_demands)), why
    assert hr.buffer(now) == want_buffer, why
    assert buffer_gpus(hr.arrivals, now, CFG) == want_buffer, why


def test_sample_is_kept_until_an_arrival_joins_or_leaves() -> None:
    d = Arrivals(window_s=100.0, horizon_s=30.0)
    d.arrived(0.0, 2.0)
    d.arrived(20.0, 0.5)  # a fractional pod counts its share: 2 + 0.5
    first = d.demands(50.0)
    assert first == [2.0, 2.5]
    assert d.demands(60.0) is first  # nothing joined or left: the same sorted list
    assert d.gpus_per_s(60.0) == pytest.approx(2.5 / 100)
    assert d.demands(100.0) == [2.5]  # the 0 s arrival left at 100 s
    assert d.gpus_per_s(100.0) == pytest.approx(0.5 / 100)
    d.arrived(120.0, 1.0)  # 20 s is outside its horizon (90 s, 120 s]
    assert d.demands(120.0) == [1.0]  # 20 s has left the window at 120 s
    assert d.demands(220.0) == []
    assert d.gpus_per_s(220.0) == 0.0


@pytest.mark.parametrize(("buffer", "free", "want_pods", "want_spare", "why"), [
    (5, 1.5, 4, -3.5, "the docstring example: 5 − 1.5 rounded up; disruption takes nothing"),
    (4, 1.5, 3, -2.5, "4 − 1.5 rounded up"),
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
