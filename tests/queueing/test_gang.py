from __future__ import annotations

import numpy as np

from gpufleet.placement import PlacementResult, Unschedulable, get_policy
from gpufleet.queueing.gang import gang_zones, place_gang
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


def zoned_fleet(per_zone: dict[str, int]) -> FleetState:
    from gpufleet.state import NodeInfo

    st = FleetState()
    for zone, n in per_zone.items():
        for i in range(n):
            name = f"{zone}-{i}"
            st.add_node(name, gpu_model="V100-16GB", num_gpus=8, cpu_milli=64000,
                        memory_mib=488 * 1024, gpu_memory_mib=16384,
                        info=NodeInfo(name=name, zone=zone))
    return st


def test_gang_lands_in_one_zone_fullest_that_fits_first() -> None:
    """Zones a (1 node), b (2 nodes), c (3 nodes): a 2-node gang fits b and c; b is tried
    first (least free GPUs that still hold the gang) and takes it."""
    st = zoned_fleet({"a": 1, "b": 2, "c": 3})
    req = ResourceRequest(cpu_milli=32000, memory_mib=96 * 1024, num_gpu=8)
    assert gang_zones(st, req, 2) == ["b", "c"]
    for name in ("spread", "bestfit"):
        got = place_gang(st, req, 2, get_policy(name), np.random.default_rng(0), "g")
        assert isinstance(got, list)
        assert {st.nodes[r.row].zone for r in got} == {"b"}
    # three replicas fit only c; four fit no zone although six nodes are free in total
    got3 = place_gang(st, req, 3, get_policy("spread"), np.random.default_rng(0), "g")
    assert isinstance(got3, list) and {st.nodes[r.row].zone for r in got3} == {"c"}
    no = place_gang(st, req, 4, get_policy("spread"), np.random.default_rng(0), "g")
    assert isinstance(no, Unschedulable) and "no zone" in no.reason


def test_gang_zone_tried_in_turn_when_the_fullest_one_fails_on_cpu() -> None:
    """Zone b has the GPUs in total but its CPUs are taken: the gang goes to c."""
    st = zoned_fleet({"b": 2, "c": 3})
    cpu_hog = ResourceRequest(cpu_milli=60000, memory_mib=1024, num_gpu=0)
    from gpufleet.decisions import Bind

    st.allocate(cpu_hog, Bind("hog", "b-0", ()), ())
    req = ResourceRequest(cpu_milli=32000, memory_mib=96 * 1024, num_gpu=8)
    got = place_gang(st, req, 2, get_policy("bestfit"), np.random.default_rng(0), "g")
    assert isinstance(got, list) and {st.nodes[r.row].zone for r in got} == {"c"}


def test_single_zone_fleet_is_not_pinned() -> None:
    st = fleet(2)
    req = ResourceRequest(cpu_milli=32000, memory_mib=96 * 1024, num_gpu=8)
    assert gang_zones(st, req, 2) == [None]
