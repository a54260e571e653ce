from __future__ import annotations

import numpy as np

from gpufleet.placement import PlacementResult, Unschedulable, get_policy
from gpufleet.queueing.gang import place_gang
from gpufleet.state import FleetState, ResourceRequest


def fleet(nodes: int) -> FleetState:
    st = FleetState()
    for i in range(nodes):
        st.add_node(f"n{i}", gpu_model="V100-16GB", num_gpus=8, cpu_milli=64000,
                    memory_mib=488 * 1024, gpu_memory_mib=16384)
    return st


def test_gang_all_or_nothing_and_state_untouched() -> None:
    st = fleet(2)
    req = ResourceRequest(cpu_milli=32000, memory_mib=96 * 1024, num_gpu=8)
    before = st.free_milli.copy()
    pol = get_policy("bestfit")
    got = place_gang(st, req, 2, pol, np.random.default_rng(0), "g")
    assert isinstance(got, list) and len(got) == 2
    assert all(isinstance(r, PlacementResult) for r in got)
    assert {r.row for r in got} == {0, 1}  # replicas never share the same GPUs
    assert (st.free_milli == before).all()
    no = place_gang(st, req, 3, pol, np.random.default_rng(0), "g")
    assert isinstance(no, Unschedulable) and "replica 3/3" in no.reason
    assert (st.free_milli == before).all()
