"""Typical tasks and the fragmentation measure, with hand-worked values."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.catalog.gpus import default_gpu_catalog
from gpufleet.decisions import Bind
from gpufleet.errors import InputError
from gpufleet.placement import typical_tasks_from
from gpufleet.placement.fragmentation import TaskTable
from gpufleet.state import FleetState, ResourceRequest

HALF = ResourceRequest(cpu_milli=2000, num_gpu=1, gpu_milli=500)
ONE = ResourceRequest(cpu_milli=4000, num_gpu=1)
CPU = ResourceRequest(cpu_milli=1000)
TWO = ResourceRequest(cpu_milli=8000, num_gpu=2)


def test_typical_tasks_cover_most_popular_first() -> None:
    reqs = [HALF] * 50 + [ONE] * 30 + [CPU] * 15 + [TWO] * 5
    got = typical_tasks_from(reqs, coverage=0.9)
    assert [r for r, _ in got] == [HALF, ONE, CPU]
    assert [round(p, 4) for _, p in got] == [
        round(50 / 95, 4),
        round(30 / 95, 4),
        round(15 / 95, 4),
    ]
    assert len(typical_tasks_from(reqs, coverage=1.0)) == 4
    with pytest.raises(InputError):
        typical_tasks_from(reqs, coverage=0)
    with pytest.raises(InputError):
        typical_tasks_from([])


def test_fragmentation_hand_worked() -> None:
    """Node: GPUs 300, 1000 idle, 6000 CPU. Tasks: half (p .5), one (p .25), cpu (p .25).

    half fits (1000 ≥ 500, CPU ok): fragment = GPUs below 500 = 300.
    one fits: fragment = 300.  cpu task: "fit" → 0, "fragment" → all idle 1300.
    F(fit) = .5·300 + .25·300 + 0 = 225;  F(fragment) = 225 + .25·1300 = 550.
    With only 3000 CPU the 'one' task no longer fits: F(fit) = 150 + .25·1300 = 475.
    """
    s = FleetState(max_gpus=2, capacity=1)
    s.add_node("a", gpu_model="T4", num_gpus=2, cpu_milli=10000, memory_mib=1 << 16)
    s.allocate(ResourceRequest(cpu_milli=4000, num_gpu=1, gpu_milli=700), Bind("x", "a", (0,), 700))
    tasks = [(HALF, 0.5), (ONE, 0.25), (CPU, 0.25)]
    cat = default_gpu_catalog()
    fit, frag = TaskTable.build(tasks, "fit"), TaskTable.build(tasks, "fragment")
    assert fit.fleet_frag(s, cat).tolist() == [225.0]
    assert frag.fleet_frag(s, cat).tolist() == [550.0]
    assert fit.frag_one([300, 1000], 6000, "T4", cat) == 225.0
    s.allocate(ResourceRequest(cpu_milli=3000), Bind("y", "a"))
    assert fit.fleet_frag(s, cat).tolist() == [475.0]
    assert fit.frag_one([300, 1000], 3000, "T4", cat) == 475.0


def test_model_constraint_makes_all_idle_fragment() -> None:
    s = FleetState(max_gpus=2, capacity=1)
    s.add_node("a", gpu_model="T4", num_gpus=2, cpu_milli=10000, memory_mib=1 << 16)
    v100_only = ResourceRequest(cpu_milli=1, num_gpu=1, gpu_models=frozenset({"V100M16"}))
    table = TaskTable.build([(v100_only, 1.0)], "fit")
    assert table.fleet_frag(s, default_gpu_catalog()).tolist() == [2000.0]
    np.testing.assert_equal(
        table.frag_one([1000, 1000], 10000, "T4", default_gpu_catalog()), 2000.0
    )
