"""MIG packing in the provisioner: slices under NVIDIA's start-offset rules, the same choice as
placement, and the compute share a MIG instance counts for."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.catalog.gpus import default_gpu_catalog
from gpufleet.placement import PlacementResult, get_policy
from gpufleet.placement.mig import bind_masks
from gpufleet.provisioning import Bin, NodeShape, fits_shape, gpu_milli_of, pack
from gpufleet.state import FleetState, ResourceRequest

A100_1 = NodeShape("A100-40GB", 1, 12000, 96256, 40960, 12040, mig_compute=7)
A100_8 = NodeShape("A100-40GB", 8, 96000, 1179648, 40960, 12040, mig_compute=7)
A100_8_WHOLE = NodeShape("A100-40GB", 8, 96000, 1179648, 40960, 12040)
A100_80_1 = NodeShape("A100-80GB", 1, 16000, 128000, 81920, 12040, mig_compute=7)


def mig(profile: str, cpu: int = 1000) -> ResourceRequest:
    return ResourceRequest(cpu_milli=cpu, memory_mib=1024, num_gpu=1, mig_profile=profile)


@pytest.mark.parametrize(
    ("profile", "milli"),
    [("1g.5gb", 142), ("2g.10gb", 285), ("3g.20gb", 428), ("7g.40gb", 1000), ("1g.6gb", 250)],
)
def test_compute_share(profile: str, milli: int) -> None:
    # 1 of 7 compute slices = 1000 // 7; A30's 1g.6gb is 1 of 4
    assert gpu_milli_of(mig(profile)) == milli


def test_seven_1g_fill_a_gpu_the_eighth_opens_a_node() -> None:
    bins, left = pack([mig("1g.5gb")] * 8, A100_1)
    assert not left and len(bins) == 2
    assert bins[0].mig_used == [0b1111111] and bins[0].mig_compute_used == [7]
    assert bins[1].mig_compute_used == [1]


def test_start_offsets_not_slice_counts_decide() -> None:
    # 3g.20gb may start at 0 or 4 only: two per GPU, the third needs another GPU although a
    # 1g.5gb (compute 1) still fits beside the first two
    b = Bin.empty(A100_1)
    assert b.take(mig("3g.20gb")) and b.take(mig("3g.20gb"))
    assert b.mig_used == [0xFF] and b.mig_compute_used == [6]
    assert not b.take(mig("3g.20gb"))
    assert not b.take(mig("1g.5gb"))  # every memory slice is taken
    # 3g then 4g: the 3g goes to start 4 (keeps the 4g's only start, 0, open)
    b = Bin.empty(A100_1)
    assert b.take(mig("3g.20gb")) and b.take(mig("4g.20gb"))
    assert b.mig_used == [0xFF] and b.mig_compute_used == [7]


def test_mig_and_whole_gpus_never_share_a_node_shape() -> None:
    assert fits_shape(mig("1g.5gb"), A100_8)
    assert not fits_shape(mig("1g.5gb"), A100_8_WHOLE)
    assert not fits_shape(ResourceRequest(num_gpu=1), A100_8)
    assert not fits_shape(ResourceRequest(num_gpu=1, gpu_milli=500), A100_8)
    assert fits_shape(ResourceRequest(cpu_milli=1000), A100_8)  # CPU-only pods fit anywhere
    assert not fits_shape(mig("1g.5gb"), A100_80_1)  # the 80GB A100 has no 1g.5gb
    b = Bin.empty(A100_8)
    assert not b.take(ResourceRequest(num_gpu=1))


def test_mixed_profiles_pack_like_hand_worked() -> None:
    # 2×3g.20gb + 1×4g.20gb + 3×1g.5gb on 1-GPU MIG nodes, largest first:
    # GPU A: 4g@0 + 3g@4 (compute 7); GPU B: 3g + three 1g (compute 6): two nodes
    reqs = [mig("1g.5gb")] * 3 + [mig("3g.20gb")] * 2 + [mig("4g.20gb")]
    bins, left = pack(reqs, A100_1)
    assert not left and len(bins) == 2
    assert sorted(b.mig_compute_used[0] for b in bins) == [6, 7]


def test_same_choice_as_placement() -> None:
    """The provisioner's bin and placement agree slot for slot on a random profile stream."""
    rng = np.random.default_rng(0)
    profiles = ["1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "1g.10gb"]
    for _ in range(20):
        state = FleetState()
        state.add_node("n", gpu_model="A100-40GB", num_gpus=2, cpu_milli=96000,
                       memory_mib=1 << 20, gpu_memory_mib=40960, mig_gpus=[0, 1])
        b = Bin.empty(NodeShape("A100-40GB", 2, 96000, 1 << 20, 40960, mig_compute=7))
        policy = get_policy("bestfit")
        for k in range(12):
            req = mig(str(rng.choice(profiles)))
            res = policy.place(state, req, rng)
            took = b.take(req)
            assert took == isinstance(res, PlacementResult)
            if took:
                bind = res.to_bind(state, f"j{k}")
                state.allocate(req, bind, bind_masks(state, bind, default_gpu_catalog()))
            assert b.mig_used == [int(x) for x in state.mig_used[0, :2]]
            assert b.mig_compute_used == [int(x) for x in state.mig_compute_used[0, :2]]
