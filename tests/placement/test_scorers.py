"""Scorers: hand-worked cases, and vectorised == scalar reference on random clusters."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.decisions import Bind
from gpufleet.placement import typical_tasks_from
from gpufleet.placement.filters import DEFAULT_FILTERS
from gpufleet.placement.scorers.fgd import FgdScore
from gpufleet.placement.scorers.gpu_shape import GpuClusteringScore, GpuPackingScore
from gpufleet.placement.scorers.resources import BestFitScore, DotProdScore, LeastAllocatedScore
from gpufleet.placement.scorers.stranding import StrandingScore, median_cpu_per_gpu
from gpufleet.placement.scorers.topology import NvlinkTopologyScore
from gpufleet.placement.view import pod_view
from gpufleet.state import FleetState, ResourceRequest

from .conftest import MODELS, REQUESTS, random_cluster

TYPICAL = typical_tasks_from(REQUESTS * 3 + REQUESTS[2:5])

SCORERS = [
    BestFitScore(),
    DotProdScore(),
    LeastAllocatedScore(),
    GpuPackingScore(),
    GpuClusteringScore(),
    NvlinkTopologyScore(),
    StrandingScore(TYPICAL),
    FgdScore(TYPICAL),
    FgdScore(TYPICAL, quantize=False),
    FgdScore(TYPICAL, cpu_tasks="fit"),
]


def _feasible(view) -> np.ndarray:  # type: ignore[no-untyped-def]
    mask = view.active.copy()
    for f in DEFAULT_FILTERS:
        mask &= f(view)
    return np.flatnonzero(mask)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("scorer", SCORERS, ids=lambda s: f"{s.name}")
def test_vectorised_matches_scalar_and_picks_same_node(scorer, seed: int) -> None:  # type: ignore[no-untyped-def]
    state = random_cluster(seed)
    rng = np.random.default_rng(seed)
    for req in REQUESTS:
        view = pod_view(state, req)
        rows = _feasible(view)
        if not len(rows):
            continue
        fast = scorer.score(view, rows, rng)
        slow = np.array([scorer.score_one(view, int(r)) for r in rows])
        np.testing.assert_allclose(fast, slow, rtol=0, atol=1e-9)
        # Same node under the same seeded tie-break.
        assert (
            rows[np.flatnonzero(fast == fast.max())].tolist()
            == rows[np.flatnonzero(slow == slow.max())].tolist()
        )


def _two_nodes() -> FleetState:
    s = FleetState(max_gpus=2, capacity=2)
    s.add_node("a", gpu_model="T4", num_gpus=2, cpu_milli=64000, memory_mib=1 << 16)
    s.add_node("b", gpu_model="T4", num_gpus=2, cpu_milli=64000, memory_mib=1 << 16)
    return s


def test_bestfit_and_dotprod_hand_worked() -> None:
    s = _two_nodes()
    s.allocate(
        ResourceRequest(cpu_milli=32000, num_gpu=1, gpu_milli=500), Bind("x", "a", (0,), 500)
    )
    req = ResourceRequest(cpu_milli=16000, num_gpu=1, gpu_milli=500)
    view = pod_view(s, req)
    rows = np.array([0, 1])
    # a: cpu left after 16000, gpu left after 1000 -> 1-(16000/128000*.5+1000/8000*.5)=0.875
    # b: cpu 48000, gpu 1500 -> 1-(0.1875+0.09375) = 0.71875
    assert BestFitScore().score(view, rows, np.random.default_rng()).tolist() == [87, 71]
    # dot a: (32000*16000/128000^2 + 1500*500/8000^2)/2 = (0.03125+0.01171875)/2 -> 97.85 -> 97
    # dot b: (64000*16000/128000^2 + 2000*500/8000^2)/2 = (0.0625+0.015625)/2 -> 96.09 -> 96
    assert DotProdScore().score(view, rows, np.random.default_rng()).tolist() == [97, 96]


def test_gpupacking_bands() -> None:
    s = _two_nodes()
    s.allocate(ResourceRequest(num_gpu=1, gpu_milli=300), Bind("x", "a", (0,), 300))
    rows = np.array([0, 1])
    shared = pod_view(s, ResourceRequest(num_gpu=1, gpu_milli=500))
    # a uses the GPU with 700 left: 100 - (70 // 10) = 93; b is empty: max(33 - 2, 2) = 31
    assert GpuPackingScore().score(shared, rows, None).tolist() == [93, 31]  # type: ignore[arg-type]
    whole = pod_view(s, ResourceRequest(num_gpu=1))
    assert GpuPackingScore().score(whole, rows, None).tolist() == [49, 31]  # type: ignore[arg-type]


def test_gpuclustering_bands() -> None:
    s = _two_nodes()
    s.allocate(ResourceRequest(num_gpu=1, gpu_milli=300), Bind("x", "a", (0,), 300))
    rows = np.array([0, 1])
    same = pod_view(s, ResourceRequest(num_gpu=1, gpu_milli=500))
    other = pod_view(s, ResourceRequest(num_gpu=1))
    # a: left 1700 -> 25*(8000-1700)//8000 = 19; b: 25*6000//8000 = 18
    assert GpuClusteringScore().score(same, rows, None).tolist() == [19 + 75, 18 + 25]  # type: ignore[arg-type]
    assert GpuClusteringScore().score(other, rows, None).tolist() == [19, 18 + 25]  # type: ignore[arg-type]


def test_fgd_prefers_the_gpu_that_leaves_no_crumb() -> None:
    s = FleetState(max_gpus=2, capacity=1)
    s.add_node("a", gpu_model="T4", num_gpus=2, cpu_milli=64000, memory_mib=1 << 16)
    s.allocate(ResourceRequest(num_gpu=1, gpu_milli=500), Bind("x", "a", (1,), 500))
    # Typical task: half-GPU pods. Putting another half on GPU 1 fills it (F stays 0);
    # on GPU 0 it would be fine too (500 left fits a half) — both F = 0: lowest index wins.
    half = [(ResourceRequest(cpu_milli=1000, num_gpu=1, gpu_milli=500), 1.0)]
    view = pod_view(s, ResourceRequest(cpu_milli=1000, num_gpu=1, gpu_milli=500))
    assert FgdScore(half).pick(view, 0, np.random.default_rng()) == (0,)
    # Typical task: 0.6-GPU pods. On GPU 0 a 0.5 pod leaves 500 idle that no 0.6 fits
    # (F += 500); on GPU 1 it fills the GPU (F unchanged) -> GPU 1.
    six = [(ResourceRequest(cpu_milli=1000, num_gpu=1, gpu_milli=600), 1.0)]
    assert FgdScore(six).pick(view, 0, np.random.default_rng()) == (1,)


@pytest.mark.parametrize(("quantize", "joins"), [(True, False), (False, False), (True, True)])
def test_fgd_memo_stays_exact_while_the_fleet_fills_and_drains(quantize: bool,
                                                                joins: bool) -> None:
    """The per-shape memo rescores only changed rows: after every bind and release the memoised
    node scores and GPU picks must still equal a from-scratch scorer and the scalar reference.
    ``joins``: a node joins every fourth step, so the memo grows (by doubling) while it is
    used, and the rows it grew into must come back dirty when they are taken."""
    state = random_cluster(7, fill=40)
    memo = FgdScore(TYPICAL, quantize=quantize)
    rng = np.random.default_rng(7)
    placed: list[tuple[ResourceRequest, Bind]] = []
    for step in range(60):
        if joins and step % 4 == 1:
            model, gpus, cpu = MODELS[step % len(MODELS)]  # models the fleet already has
            state.add_node(f"join{step}", gpu_model=model, num_gpus=gpus, cpu_milli=cpu,
                           memory_mib=1 << 19)
        req = REQUESTS[step % len(REQUESTS)]
        view = pod_view(state, req)
        rows = _feasible(view)
        if not len(rows):
            continue
        fast = memo.score(view, rows, rng)
        fresh = FgdScore(TYPICAL, quantize=quantize)
        np.testing.assert_array_equal(fast, fresh.score(view, rows, rng))
        slow = np.array([memo.score_one(view, int(r)) for r in rows])
        np.testing.assert_allclose(fast, slow, rtol=0, atol=1e-9)
        row = int(rows[np.argmax(fast)])
        gpus = memo.pick(view, row, rng)
        assert gpus == fresh.pick(view, row, rng)
        if req.num_gpu == 0:
            continue
        milli = req.gpu_milli if req.is_shared else 1000
        bind = Bind(f"s{step}", state.nodes[row].name, gpus, milli)
        state.allocate(req, bind)
        placed.append((req, bind))
        if step % 5 == 4:  # drain one: a row's F can also rise back
            old_req, old_bind = placed.pop(0)
            state.release(old_req, old_bind)


def test_stranding_hand_worked() -> None:
    """Three 2-GPU nodes with 64 cores; a is GPU-full, b has one idle GPU, c two. Typical whole
    pods want 16 cores per GPU (median of 8, 16, 16 and 40 cores/GPU weighted .2/.3/.2/.3: the
    cumulative .5 is reached at 16)."""
    typical = [
        (ResourceRequest(cpu_milli=8000, num_gpu=1), 0.2),
        (ResourceRequest(cpu_milli=16000, num_gpu=1), 0.3),
        (ResourceRequest(cpu_milli=32000, num_gpu=2), 0.2),
        (ResourceRequest(cpu_milli=40000, num_gpu=1), 0.3),
        (ResourceRequest(cpu_milli=1000, num_gpu=1, gpu_milli=300), 5.0),  # shared: ignored
    ]
    assert median_cpu_per_gpu(typical) == 16000
    s = FleetState(max_gpus=2, capacity=3)
    for name in "abc":
        s.add_node(name, gpu_model="T4", num_gpus=2, cpu_milli=64000, memory_mib=1 << 16)
    s.allocate(ResourceRequest(cpu_milli=1000, num_gpu=2), Bind("x", "a", (0, 1), 1000))
    s.allocate(ResourceRequest(cpu_milli=40000, num_gpu=1), Bind("y", "b", (0,), 1000))
    rows = np.array([0, 1, 2])
    scorer = StrandingScore(typical)
    # CPU-only: minus idle milli 0, 1000, 2000.
    cpu = pod_view(s, ResourceRequest(cpu_milli=8000))
    assert scorer.score(cpu, rows, None).tolist() == [0, -1000, -2000]  # type: ignore[arg-type]
    # A 1-GPU pod with 20 cores (a cannot host it; score b and c). b: 0 idle left -> 0.
    # c: 1 idle left, 44 cores // 16 = 2 fed -> 0. With 50 cores: c has 14 cores, 1 idle -> -1.
    whole = pod_view(s, ResourceRequest(cpu_milli=20000, num_gpu=1))
    assert scorer.score(whole, rows[1:], None).tolist() == [0, 0]  # type: ignore[arg-type]
    big = pod_view(s, ResourceRequest(cpu_milli=50000, num_gpu=1))
    assert scorer.score(big, rows[2:], None).tolist() == [-1]  # type: ignore[arg-type]
    shared = pod_view(s, ResourceRequest(cpu_milli=8000, num_gpu=1, gpu_milli=500))
    assert scorer.score(shared, rows, None).tolist() == [0, 0, 0]  # type: ignore[arg-type]
    assert StrandingScore([(ResourceRequest(num_gpu=1, gpu_milli=500), 1.0)]).cpu_per_gpu is None
