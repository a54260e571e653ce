"""A Bind is complete on its own: the MIG slices it books follow from its slots and the node."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.catalog.gpus import default_gpu_catalog
from gpufleet.decisions import Bind, MigSlot
from gpufleet.placement import PlacementResult, get_policy
from gpufleet.placement.mig import bind_masks
from gpufleet.state import FleetState, ResourceRequest


def mig_state() -> FleetState:
    state = FleetState()
    state.add_node("n", gpu_model="A100-40GB", num_gpus=2, cpu_milli=96000,
                   memory_mib=1 << 20, gpu_memory_mib=40960, mig_gpus=[0, 1])
    state.add_node("plain", gpu_model="V100-16GB", num_gpus=1, cpu_milli=8000,
                   memory_mib=1 << 16, gpu_memory_mib=16384)
    return state


def test_masks_by_hand() -> None:
    cat = default_gpu_catalog()
    bind = Bind("j#0", "n", mig=(MigSlot(1, "3g.20gb", 4), MigSlot(0, "1g.5gb", 6)))
    assert bind_masks(mig_state(), bind, cat) == ((1, 0b1111 << 4, 3), (0, 1 << 6, 1))
    assert bind_masks(mig_state(), Bind("k#0", "plain", gpus=(0,)), cat) == ()
    with pytest.raises(ValueError, match="no MIG"):
        bind_masks(mig_state(), Bind("x#0", "plain", mig=(MigSlot(0, "1g.5gb", 0),)), cat)


@pytest.mark.parametrize("profile", ["1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb"])
def test_masks_from_the_bind_match_the_placement(profile: str) -> None:
    state = mig_state()
    req = ResourceRequest(cpu_milli=1000, memory_mib=1024, num_gpu=1, mig_profile=profile)
    res = get_policy("bestfit").place(state, req, np.random.default_rng(0))
    assert isinstance(res, PlacementResult)
    bind = res.to_bind(state, "j#0")
    assert bind.mig == res.mig and len(bind.mig) == 1
    (slot,) = bind.mig
    masks = bind_masks(state, bind, default_gpu_catalog())
    (g, mask, compute), = masks
    assert g == slot.gpu and compute == int(profile[0])
    slices = {"1g.5gb": 1, "2g.10gb": 2, "3g.20gb": 4, "7g.40gb": 8}[profile]  # A100 memory
    assert mask == ((1 << slices) - 1) << slot.start
    state.allocate(req, bind, masks)  # the slices the Bind names are now taken
    assert int(state.mig_used[state.index["n"], g]) & mask == mask
