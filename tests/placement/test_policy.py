"""Policies through the public contract: place → apply, refusals as data, MIG, topology, CUDA."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.catalog.gpus import default_gpu_catalog
from gpufleet.decisions import Bind
from gpufleet.errors import InputError
from gpufleet.placement import (
    DEFAULT_POLICY,
    PlacementResult,
    Status,
    Unschedulable,
    get_policy,
    list_policies,
)
from gpufleet.placement.mig import bind_masks
from gpufleet.state import FleetState, NodeInfo, ResourceRequest

from .conftest import REQUESTS, random_cluster


def test_registry_names_and_unknown_name() -> None:
    names = list_policies()
    for required in (
        "random",
        "dotprod",
        "bestfit",
        "gpupacking",
        "gpuclustering",
        "fgd",
        "spread",
        DEFAULT_POLICY,
    ):
        assert required in names
    with pytest.raises(InputError, match="valid: random"):
        get_policy("best-fit-ish")


@pytest.mark.parametrize("name", list_policies())
def test_every_policy_places_validly_and_never_mutates(name: str) -> None:
    state = random_cluster(7, nodes=30, fill=60)
    policy = get_policy(name)
    rng = np.random.default_rng(0)
    for i in range(60):
        req = REQUESTS[i % len(REQUESTS)]
        before = state.free_milli.copy(), state.cpu_free.copy()
        res = policy.place(state, req, rng)
        assert np.array_equal(before[0], state.free_milli) and np.array_equal(
            before[1], state.cpu_free
        )
        if isinstance(res, Unschedulable):
            assert res.status in (Status.UNSCHEDULABLE, Status.UNSCHEDULABLE_AND_UNRESOLVABLE)
            continue
        assert len(res.gpus) == req.num_gpu
        for g in res.gpus:
            assert state.free_milli[res.row, g] >= res.milli_per_gpu
        bind = res.to_bind(state, f"j{i}")
        state.allocate(req, bind, bind_masks(state, bind, default_gpu_catalog()))


def test_same_seed_same_decisions() -> None:
    out = []
    for _ in range(2):
        state = random_cluster(3)
        policy = get_policy("fgd")
        rng = np.random.default_rng(11)
        out.append([policy.place(state, r, rng) for r in REQUESTS])
    assert out[0] == out[1]


def _fleet() -> FleetState:
    s = FleetState(max_gpus=8, capacity=4)
    s.add_node(
        "k80", gpu_model="K80", num_gpus=8, cpu_milli=32000, memory_mib=1 << 18, cuda_driver=11080
    )
    s.add_node(
        "p3",
        gpu_model="V100-16GB",
        num_gpus=8,
        cpu_milli=64000,
        memory_mib=1 << 18,
        nvlink_domains=[0, 0, 0, 0, 1, 1, 1, 1],
        cuda_driver=12040,
        gpu_memory_mib=16384,
    )
    s.add_node(
        "mig",
        gpu_model="A100-40GB",
        num_gpus=1,
        cpu_milli=8000,
        memory_mib=1 << 16,
        mig_gpus=[0],
        cuda_driver=12040,
    )
    s.add_node(
        "tainted",
        gpu_model="T4",
        num_gpus=1,
        cpu_milli=8000,
        memory_mib=1 << 16,
        info=NodeInfo(name="tainted", taints=frozenset({"gpu=spot:NoSchedule"})),
    )
    return s


def test_unschedulable_now_vs_never() -> None:
    s = _fleet()
    policy = get_policy("bestfit")
    rng = np.random.default_rng(0)
    never = policy.place(s, ResourceRequest(cpu_milli=1_000_000), rng)
    assert isinstance(never, Unschedulable) and never.never
    assert "insufficient CPU" in never.reason
    req = ResourceRequest(cpu_milli=60000, num_gpu=8)
    first = policy.place(s, req, rng)
    assert isinstance(first, PlacementResult) and s.nodes[first.row].name == "p3"
    s.allocate(req, first.to_bind(s, "big"))
    again = policy.place(s, req, rng)
    assert isinstance(again, Unschedulable) and not again.never


def test_cuda_k80_is_never_for_cuda12() -> None:
    s = _fleet()
    req = ResourceRequest(num_gpu=1, min_cuda=12000, gpu_models=frozenset({"K80"}))
    res = get_policy("bestfit").place(s, req, np.random.default_rng())
    assert isinstance(res, Unschedulable) and res.never and "CUDA" in res.reason
    ok = get_policy("bestfit").place(
        s,
        ResourceRequest(num_gpu=1, min_cuda=11000, gpu_models=frozenset({"Tesla-K80"})),
        np.random.default_rng(),
    )
    assert isinstance(ok, PlacementResult) and s.nodes[ok.row].name == "k80"


def test_taints_need_tolerations() -> None:
    s = _fleet()
    want_t4 = ResourceRequest(num_gpu=1, gpu_models=frozenset({"T4"}))
    res = get_policy("bestfit").place(s, want_t4, np.random.default_rng())
    assert isinstance(res, Unschedulable) and "untolerated taint" in res.reason
    tol = ResourceRequest(
        num_gpu=1, gpu_models=frozenset({"T4"}), tolerations=frozenset({"gpu=spot:NoSchedule"})
    )
    res = get_policy("bestfit").place(s, tol, np.random.default_rng())
    assert isinstance(res, PlacementResult) and s.nodes[res.row].name == "tainted"


def test_gpu_memory_filter() -> None:
    s = _fleet()
    res = get_policy("bestfit").place(
        s, ResourceRequest(num_gpu=1, gpu_memory_mib=20000), np.random.default_rng()
    )
    assert isinstance(res, Unschedulable) and "GPU memory" in res.reason


def test_mig_follows_placement_rules() -> None:
    """Two 1g.5gb then a 3g.20gb: the 3g lands on a legal start (0 or 4) clear of the 1g's, and
    the two 1g's are packed into one half so that it can; a second 3g.20gb then cannot fit."""
    s = _fleet()
    policy = get_policy(DEFAULT_POLICY)
    rng = np.random.default_rng(0)
    starts = []
    for i, prof in enumerate(["1g.5gb", "1g.5gb", "3g.20gb"]):
        req = ResourceRequest(cpu_milli=100, mig_profile=prof)
        res = policy.place(s, req, rng)
        assert isinstance(res, PlacementResult) and s.nodes[res.row].name == "mig"
        (m,) = res.mig
        starts.append(m.start)
        bind = res.to_bind(s, f"m{i}")
        assert bind.mig[0].profile == prof and bind.gpus == ()
        s.allocate(req, bind, bind_masks(s, bind, default_gpu_catalog()))
    assert starts[2] in (0, 4)
    half = range(starts[2], starts[2] + 4)
    assert starts[0] not in half and starts[1] not in half and starts[0] != starts[1]
    res = policy.place(s, ResourceRequest(mig_profile="3g.20gb"), rng)
    assert isinstance(res, Unschedulable) and not res.never
    never = policy.place(s, ResourceRequest(mig_profile="9g.99gb"), rng)
    assert isinstance(never, Unschedulable) and never.never


def test_topology_keeps_four_gpus_in_one_nvlink_quad() -> None:
    s = _fleet()
    policy = get_policy(DEFAULT_POLICY)
    rng = np.random.default_rng(0)
    one = ResourceRequest(num_gpu=1, gpu_models=frozenset({"V100-16GB"}))
    res = policy.place(s, one, rng)
    assert isinstance(res, PlacementResult)
    s.allocate(one, res.to_bind(s, "one"))
    four = ResourceRequest(num_gpu=4, gpu_models=frozenset({"V100-16GB"}))
    res = policy.place(s, four, rng)
    assert isinstance(res, PlacementResult)
    doms = {int(s.nvlink_domain[res.row, g]) for g in res.gpus}
    assert len(doms) == 1


def test_default_policy_keeps_cores_next_to_idle_gpus() -> None:
    """Four G2 nodes, three with all GPUs taken. A CPU-only pod leaves FGD's ΔF at 0 on every
    node (CPU stays above every typical task's need), so FGD's tie order decides; ours must pick
    a GPU-full node whatever the tie seed, keeping the idle node's cores for its GPUs' pods."""
    typical = [(ResourceRequest(cpu_milli=8000, num_gpu=1), 1.0)]
    whole = ResourceRequest(cpu_milli=8000, num_gpu=8)
    picked_idle_by_fgd = 0
    for seed in range(16):
        s = FleetState(max_gpus=8, capacity=4)
        for i in range(4):
            s.add_node(f"n{i}", gpu_model="G2", num_gpus=8, cpu_milli=96000, memory_mib=1 << 19)
        for i in (0, 1, 3):
            s.allocate(whole, Bind(f"w{i}", f"n{i}", tuple(range(8)), 1000))
        cpu_pod = ResourceRequest(cpu_milli=16000)
        ours = get_policy(DEFAULT_POLICY, typical_tasks=typical, tie_seed=seed)
        res = ours.place(s, cpu_pod, np.random.default_rng(seed))
        assert isinstance(res, PlacementResult) and res.row != 2
        fgd = get_policy("fgd", typical_tasks=typical, tie_seed=seed)
        base = fgd.place(s, cpu_pod, np.random.default_rng(seed))
        assert isinstance(base, PlacementResult)
        picked_idle_by_fgd += base.row == 2
    assert picked_idle_by_fgd > 0  # FGD alone does strand the idle node's GPUs


def test_never_is_recomputed_when_nodes_join_leave_or_the_eligible_set_narrows() -> None:
    """``never`` is kept per (request, join/leave history, active mask): each of those moving
    must give a fresh answer. Case table on one 8-GPU request:
    no 8-GPU node → never; one joins → placeable; it fills → not never; it leaves → never again;
    only the small nodes eligible (``only_eligible``) → never."""
    from gpufleet.control.placing import only_eligible

    s = FleetState()
    s.add_node("small", gpu_model="T4", num_gpus=1, cpu_milli=8000, memory_mib=1 << 16)
    policy = get_policy("bestfit")
    rng = np.random.default_rng(0)
    req = ResourceRequest(cpu_milli=1000, num_gpu=8)
    res = policy.place(s, req, rng)
    assert isinstance(res, Unschedulable) and res.never
    s.add_node("big", gpu_model="V100", num_gpus=8, cpu_milli=64000, memory_mib=1 << 18)
    first = policy.place(s, req, rng)
    assert isinstance(first, PlacementResult) and s.nodes[first.row].name == "big"
    s.allocate(req, first.to_bind(s, "j1"))
    full = policy.place(s, req, rng)
    assert isinstance(full, Unschedulable) and not full.never
    s.release(req, first.to_bind(s, "j1"))
    with only_eligible(s, np.array([True, False])):
        narrowed = policy.place(s, req, rng)
    assert isinstance(narrowed, Unschedulable) and narrowed.never
    assert isinstance(policy.place(s, req, rng), PlacementResult)
    s.remove_node("big")
    gone = policy.place(s, req, rng)
    assert isinstance(gone, Unschedulable) and gone.never


def test_a_refusal_finds_its_status_only_when_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulator never reads a refusal's status; the empty-fleet filter pass behind
    ``never`` runs once, on the first read, and with the rows refused on (the eligible set
    restored since): one 8-GPU request, a 1-GPU node eligible only → never."""
    from gpufleet.control.placing import only_eligible
    from gpufleet.placement.policy import Policy

    s = FleetState()
    s.add_node("small", gpu_model="T4", num_gpus=1, cpu_milli=8000, memory_mib=1 << 16)
    s.add_node("big", gpu_model="V100", num_gpus=8, cpu_milli=64000, memory_mib=1 << 18)
    calls: list[int] = []
    real = Policy._never
    monkeypatch.setattr(Policy, "_never", lambda self, view: calls.append(1) or real(self, view))
    policy = get_policy("bestfit")
    with only_eligible(s, np.array([True, False])):
        res = policy.place(s, ResourceRequest(cpu_milli=1000, num_gpu=8), np.random.default_rng(0))
    assert isinstance(res, Unschedulable) and calls == []
    assert res.status is Status.UNSCHEDULABLE_AND_UNRESOLVABLE and res.never
    assert "no node fits even when empty" in res.reason
    assert calls == [1]
