"""The fit rule: hand-worked cases, and every vectorised filter == the scalar reference."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.catalog.gpus import default_gpu_catalog
from gpufleet.decisions import Bind
from gpufleet.placement import fit
from gpufleet.placement.filters import DEFAULT_FILTERS
from gpufleet.placement.fit import NodeRoom, fits
from gpufleet.placement.mig import bind_masks, choose_mig
from gpufleet.placement.view import pod_view
from gpufleet.state import FleetState, NodeInfo, ResourceRequest

SPOT = "karpenter.sh/capacity-type=spot"
GPU_TAINT = "nvidia.com/gpu=present"

# (catalog model name as a node reports it, GPUs, CPU milli, GPU memory MiB, MIG-capable)
NODE_KINDS = [
    ("T4", 2, 32000, 16384, False),
    ("V100-16GB", 8, 96000, 16384, False),
    ("Tesla-V100-SXM2-32GB", 8, 96000, 32768, False),  # an alias, as GFD labels it
    ("K80", 4, 32000, 12288, False),  # max_cuda 11.8
    ("A100-40GB", 4, 96000, 40960, True),
    ("A100-80GB", 8, 96000, 81920, True),
]

REQUESTS = [
    ResourceRequest(cpu_milli=2000),
    ResourceRequest(cpu_milli=4000, num_gpu=1, gpu_milli=300),
    ResourceRequest(cpu_milli=4000, num_gpu=1, gpu_milli=500, gpu_memory_mib=6000),
    ResourceRequest(cpu_milli=8000, num_gpu=1, gpu_memory_mib=20000),
    ResourceRequest(cpu_milli=8000, num_gpu=2, gpu_models=frozenset({"v100"})),  # alias, lower
    ResourceRequest(cpu_milli=8000, num_gpu=2, gpu_models=frozenset({"V100-32GB", "T4"})),
    ResourceRequest(cpu_milli=4000, num_gpu=1, min_cuda=12040),
    ResourceRequest(cpu_milli=4000, num_gpu=1, min_cuda=11080),
    ResourceRequest(cpu_milli=4000, num_gpu=4, tolerations=frozenset({SPOT})),
    ResourceRequest(cpu_milli=4000, num_gpu=1, tolerations=frozenset({SPOT, GPU_TAINT})),
    ResourceRequest(cpu_milli=2000, mig_profile="1g.5gb"),
    ResourceRequest(cpu_milli=2000, mig_profile="3g.40gb"),
    ResourceRequest(cpu_milli=2000, mig_profile="3g.20gb", gpu_models=frozenset({"A100"})),
    ResourceRequest(cpu_milli=64000, num_gpu=8),
    ResourceRequest(cpu_milli=1000, memory_mib=300_000, num_gpu=1),
    ResourceRequest(cpu_milli=2000, num_gpu=1, zone="a"),  # a gang replica pinned to a zone
    ResourceRequest(cpu_milli=2000, num_gpu=1, zone=""),  # pinned to nodes without a zone
]


def random_fleet(seed: int, nodes: int = 30) -> FleetState:
    """Nodes of every kind above, some tainted, some on old drivers, some GPUs in MIG mode,
    part-filled with shared pods (with GPU memory), whole-GPU pods and MIG slices."""
    rng = np.random.default_rng(seed)
    cat = default_gpu_catalog()
    s = FleetState(max_gpus=8, capacity=nodes)
    for i in range(nodes):
        model, gpus, cpu, gmem, mig_capable = NODE_KINDS[rng.integers(len(NODE_KINDS))]
        taints = frozenset(t for t in (SPOT, GPU_TAINT) if rng.random() < 0.3)
        mig_gpus = [g for g in range(gpus) if mig_capable and rng.random() < 0.5]
        s.add_node(
            f"n{i}", gpu_model=model, num_gpus=gpus, cpu_milli=cpu, memory_mib=1 << 18,
            gpu_memory_mib=gmem, cuda_driver=int(rng.choice([11040, 11080, 12040])),
            mig_gpus=mig_gpus, info=NodeInfo(f"n{i}", taints=taints, zone=("", "a", "b")[i % 3]),
        )
    for j in range(4 * nodes):
        row = int(rng.integers(nodes))
        kind = rng.random()
        if kind < 0.5:
            milli = int(rng.choice([200, 500, 700]))
            mem = int(rng.choice([0, 4000, 8000]))
            g = int(rng.integers(s.num_gpus[row]))
            ok = s.free_milli[row, g] >= milli and s.gpu_mem_free[row, g] >= mem
            if ok and not s.mig_enabled[row, g] and s.cpu_free[row] >= 2000:
                req = ResourceRequest(cpu_milli=2000, num_gpu=1, gpu_milli=milli,
                                      gpu_memory_mib=mem)
                s.allocate(req, Bind(f"j{j}", f"n{row}", (g,), milli))
        elif kind < 0.8:
            idle = np.flatnonzero((s.free_milli[row] == 1000) & ~s.mig_enabled[row])[:2]
            if len(idle) and s.cpu_free[row] >= 4000:
                req = ResourceRequest(cpu_milli=4000, num_gpu=len(idle))
                s.allocate(req, Bind(f"j{j}", f"n{row}", tuple(int(g) for g in idle)))
        else:
            prof = str(rng.choice(["1g.5gb", "3g.20gb", "1g.10gb", "3g.40gb"]))
            name = s.model_names[s.model_id[row]]
            if cat[name].mig is None or prof not in cat[name].mig.profiles:
                continue
            req = ResourceRequest(cpu_milli=1000, mig_profile=prof)
            view = pod_view(s, req, cat)
            slot = choose_mig(view, row)
            if slot is not None and s.cpu_free[row] >= 1000:
                bind = Bind(f"j{j}", f"n{row}", (), mig=(slot,))
                s.allocate(req, bind, bind_masks(s, bind, cat))
    return s


@pytest.mark.parametrize("seed", range(8))
def test_every_filter_agrees_with_the_reference(seed: int) -> None:
    state = random_fleet(seed)
    cat = default_gpu_catalog()
    seen: set[str] = set()
    for req in REQUESTS:
        view = pod_view(state, req, cat)
        masks = {f.reason: f(view) for f in DEFAULT_FILTERS}
        for row in state.rows():
            reasons = fits(req, NodeRoom.of_row(state, int(row)), cat)
            seen.update(reasons)
            for reason, mask in masks.items():
                assert bool(mask[row]) == (reason not in reasons), (req, row, reason, reasons)
    # the random fleets exercise every rule, so the agreement above is not vacuous
    assert seen == {f.reason for f in DEFAULT_FILTERS}


def _room(**kw: object) -> NodeRoom:
    base: dict[str, object] = dict(gpu_model="V100-16GB", cpu_milli=8000, memory_mib=65536,
                                   gpu_free_milli=(1000, 1000),
                                   gpu_free_memory_mib=(16384, 16384), cuda_driver=12040)
    base.update(kw)
    return NodeRoom(**base)  # type: ignore[arg-type]


CASES = [
    # (what, request, node, reasons)
    ("fits", ResourceRequest(cpu_milli=1000, num_gpu=2), _room(), []),
    ("alias names the node's model", ResourceRequest(num_gpu=1, gpu_models=frozenset({"v100"})),
     _room(), []),
    ("node reports an alias", ResourceRequest(num_gpu=1, gpu_models=frozenset({"V100-16GB"})),
     _room(gpu_model="Tesla-V100-SXM2-16GB"), []),
    ("other model", ResourceRequest(num_gpu=1, gpu_models=frozenset({"T4"})), _room(),
     [fit.MODEL_NOT_REQUESTED]),
    ("MIG pod pinned to a model", ResourceRequest(mig_profile="1g.10gb",
                                                  gpu_models=frozenset({"A100-80GB"})),
     NodeRoom.empty("A100-40GB", 1, 8000, 8000, 40960, 12040, mig_compute=7),
     [fit.MODEL_NOT_REQUESTED]),
    ("CPU pod ignores the model", ResourceRequest(cpu_milli=1, gpu_models=frozenset({"T4"})),
     _room(), []),
    ("driver too old", ResourceRequest(num_gpu=1, min_cuda=12040), _room(cuda_driver=11080),
     [fit.CUDA_UNSUPPORTED]),
    ("K80 cannot run CUDA 12 on any driver", ResourceRequest(num_gpu=1, min_cuda=12000),
     _room(gpu_model="K80"), [fit.CUDA_UNSUPPORTED]),
    ("K80 runs CUDA 11.8", ResourceRequest(num_gpu=1, min_cuda=11080), _room(gpu_model="K80"),
     []),
    ("no driver", ResourceRequest(num_gpu=1, min_cuda=11000), _room(cuda_driver=0),
     [fit.CUDA_UNSUPPORTED]),
    ("untolerated taint", ResourceRequest(num_gpu=1), _room(taints=frozenset({SPOT})),
     [fit.UNTOLERATED_TAINT]),
    ("tolerated", ResourceRequest(num_gpu=1, tolerations=frozenset({SPOT})),
     _room(taints=frozenset({SPOT})), []),
    ("one of two taints tolerated", ResourceRequest(num_gpu=1, tolerations=frozenset({SPOT})),
     _room(taints=frozenset({SPOT, GPU_TAINT})), [fit.UNTOLERATED_TAINT]),
    ("shared pod: milli on one GPU, memory on the other",
     ResourceRequest(num_gpu=1, gpu_milli=500, gpu_memory_mib=10240),
     _room(gpu_free_milli=(600, 0), gpu_free_memory_mib=(8192, 16384)),
     [fit.INSUFFICIENT_GPU]),
    ("per-GPU memory, not the node's sum", ResourceRequest(num_gpu=1, gpu_memory_mib=20000),
     _room(), [fit.INSUFFICIENT_GPU_MEMORY, fit.INSUFFICIENT_GPU]),
    ("MIG GPUs offer no milli", ResourceRequest(num_gpu=1),
     NodeRoom.empty("A100-40GB", 1, 8000, 8000, 40960, 12040, mig_compute=7),
     [fit.INSUFFICIENT_GPU]),
    ("no MIG mode", ResourceRequest(mig_profile="1g.5gb"),
     NodeRoom.empty("A100-40GB", 1, 8000, 8000, 40960, 12040), [fit.NO_MIG_SLOT]),
    ("3g.20gb: slices 0-3 and 4-7 taken by 1g at 0 and 4",
     ResourceRequest(mig_profile="3g.20gb"),
     NodeRoom("A100-40GB", 8000, 8000, (0,), (40960,), 12040, frozenset(), (True,),
              (0b00010001,), (2,), (7,)), [fit.NO_MIG_SLOT]),
    ("CPU and memory", ResourceRequest(cpu_milli=9000, memory_mib=70000), _room(),
     [fit.INSUFFICIENT_CPU, fit.INSUFFICIENT_MEMORY]),
]


@pytest.mark.parametrize(("what", "req", "node", "want"), CASES, ids=[c[0] for c in CASES])
def test_hand_worked_cases(what: str, req: ResourceRequest, node: NodeRoom,
                           want: list[str]) -> None:
    assert fits(req, node) == want


@pytest.mark.parametrize("seed", range(4))
def test_a_filter_that_does_not_apply_passes_every_node(seed: int) -> None:
    """``Filter.applies`` False lets the policy skip the filter: that is only sound if the
    filter would pass every node for that request, on any fleet. Every request of the table
    against every filter, on random fleets; the table has requests each filter skips and
    requests it checks."""
    state = random_fleet(seed)
    cat = default_gpu_catalog()
    skipped: set[str] = set()
    checked: set[str] = set()
    for req in REQUESTS:
        view = pod_view(state, req, cat)
        for f in DEFAULT_FILTERS:
            if f.applies(req):
                checked.add(f.name)
            else:
                skipped.add(f.name)
                assert f(view).all(), (f.name, req)
    always = {"cpu", "memory", "taints"}
    assert checked == {f.name for f in DEFAULT_FILTERS}
    assert skipped == {f.name for f in DEFAULT_FILTERS} - always
