"""FleetState: the arrays policies read and the mutations drivers apply."""

from __future__ import annotations

import pytest

from gpufleet.decisions import Bind
from gpufleet.state import FleetState, ResourceRequest


def _fleet() -> FleetState:
    s = FleetState(max_gpus=4, capacity=2)
    s.add_node("a", gpu_model="T4", num_gpus=2, cpu_milli=8000, memory_mib=32768)
    s.add_node(
        "b", gpu_model="A100-40GB", num_gpus=1, cpu_milli=8000, memory_mib=32768, mig_gpus=[0]
    )
    return s


def test_allocate_release_round_trip_and_shape_counts() -> None:
    s = _fleet()
    shared = ResourceRequest(cpu_milli=1000, memory_mib=1024, num_gpu=1, gpu_milli=300)
    v0 = int(s.row_version[0])
    s.allocate(shared, Bind("j1", "a", gpus=(1,), milli_per_gpu=300))
    assert s.free_milli[0, :2].tolist() == [1000, 700]
    assert s.cpu_free[0] == 7000 and s.mem_free[0] == 32768 - 1024
    assert s.shape_count[0, 0] == 1 and s.row_version[0] > v0
    whole = ResourceRequest(cpu_milli=1000, num_gpu=1)
    s.allocate(whole, Bind("j2", "a", gpus=(0,)))
    assert s.shape_count[0, 1] == 1
    assert s.gpu_allocated_milli() == 1300
    s.release(shared, Bind("j1", "a", gpus=(1,), milli_per_gpu=300))
    assert s.free_milli[0, :2].tolist() == [0, 1000] and s.shape_count[0, 0] == 0


def test_overcommit_is_rolled_back() -> None:
    s = _fleet()
    req = ResourceRequest(cpu_milli=1000, num_gpu=1, gpu_milli=600)
    s.allocate(req, Bind("j1", "a", gpus=(0,), milli_per_gpu=600))
    with pytest.raises(ValueError, match="overcommits"):
        s.allocate(req, Bind("j2", "a", gpus=(0,), milli_per_gpu=600))
    assert s.free_milli[0, 0] == 400 and s.cpu_free[0] == 7000


def test_mig_conflict_changes_nothing_and_mig_counts_as_allocated() -> None:
    s = _fleet()
    req = ResourceRequest(cpu_milli=500, mig_profile="3g.20gb")
    bind = Bind("m1", "b", gpus=())
    assert s.gpu_allocated_milli() == 0  # an empty MIG GPU is idle, not allocated
    s.allocate(req, bind, [(0, 0b1111, 3)])
    assert s.gpu_allocated_milli() == 3 * 1000 // 7
    with pytest.raises(ValueError, match="already used"):
        s.allocate(req, Bind("m2", "b"), [(0, 0b0011, 2)])
    assert s.cpu_free[1] == 7500 and s.mig_compute_used[1, 0] == 3
    s.release(req, bind, [(0, 0b1111, 3)])
    assert s.mig_used[1, 0] == 0 and s.gpu_allocated_milli() == 0


def test_widening_keeps_rows_and_new_arrays() -> None:
    s = _fleet()
    s.add_node("big", gpu_model="K80", num_gpus=16, cpu_milli=64000, memory_mib=1 << 20)
    assert s.max_gpus == 16 and s.shape_count.shape[1] == 17
    assert s.free_milli[0, :4].tolist() == [1000, 1000, -1, -1]
    assert s.gpu_capacity_milli() == 19000
    s.remove_node("big")
    assert s.gpu_capacity_milli() == 3000
