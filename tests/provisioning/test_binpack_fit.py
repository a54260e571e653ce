"""The bin-packer and placement answer "does it fit" with one rule (``placement.fit``).

Each case below is one place where the provisioning copy used to disagree with the placement
filters (the comment says what it answered before). Every case is also run through placement's
vectorised filters on a real ``FleetState`` node of the shape, so the two cannot drift again.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.placement.filters import DEFAULT_FILTERS
from gpufleet.placement.view import pod_view
from gpufleet.provisioning.binpack import Bin, NodeShape, fits_shape, pack, shape_misfits
from gpufleet.state import FleetState, NodeInfo, ResourceRequest

SPOT = "karpenter.sh/capacity-type=spot"
V100 = NodeShape("V100-16GB", 1, 8000, 61 * 1024, 16384, 12040)
V100_SPOT = NodeShape("V100-16GB", 1, 8000, 61 * 1024, 16384, 12040, taints=frozenset({SPOT}))
K80 = NodeShape("K80", 4, 32000, 244 * 1024, 12288, 12040)
A100_40_MIG = NodeShape("A100-40GB", 1, 12000, 96256, 40960, 12040, mig_compute=7)
NO_DRIVER = NodeShape("T4", 1, 8000, 16384, 16384, 0)

CASES = [
    # (what, request, shape, fits now; before: ...)
    ("alias in the request", ResourceRequest(num_gpu=1, gpu_models=frozenset({"V100"})),
     V100, True),  # before: False (exact name match only)
    ("alias in lower case", ResourceRequest(num_gpu=1, gpu_models=frozenset({"v100-16gb"})),
     V100, True),  # before: False
    ("shape names the model by an alias",
     ResourceRequest(num_gpu=1, gpu_models=frozenset({"V100-16GB"})),
     NodeShape("Tesla-V100-SXM2-16GB", 1, 8000, 61 * 1024, 16384, 12040), True),  # before: False
    ("K80 cannot run CUDA 12 whatever the driver", ResourceRequest(num_gpu=1, min_cuda=12000),
     K80, False),  # before: True (driver 12.4 >= 12.0; the model's max_cuda 11.8 ignored)
    ("K80 runs CUDA 11.8", ResourceRequest(num_gpu=1, min_cuda=11080), K80, True),
    ("a node without a driver runs no CUDA", ResourceRequest(num_gpu=1, min_cuda=11000),
     NO_DRIVER, False),  # before: True (driver 0 read as "unknown, assume fine")
    ("untolerated taint", ResourceRequest(num_gpu=1), V100_SPOT,
     False),  # before: True (taints not modelled)
    ("tolerated taint", ResourceRequest(num_gpu=1, tolerations=frozenset({SPOT})), V100_SPOT,
     True),
    ("MIG pod pinned to another model offering the same profile name",
     ResourceRequest(mig_profile="1g.10gb", gpu_models=frozenset({"A100-80GB"})),
     A100_40_MIG, False),  # before: True (the model was only checked for num_gpu > 0)
    ("MIG pod pinned by alias", ResourceRequest(mig_profile="3g.20gb",
                                                gpu_models=frozenset({"A100"})),
     A100_40_MIG, True),  # before: True
    ("MIG pod: its memory is the profile's, not gpu_memory_mib",
     ResourceRequest(num_gpu=1, mig_profile="1g.5gb", gpu_memory_mib=50_000),
     A100_40_MIG, True),  # before: False (checked against the whole GPU's memory)
    ("whole GPU on a MIG node", ResourceRequest(num_gpu=1), A100_40_MIG, False),
    ("GPU memory per GPU", ResourceRequest(num_gpu=1, gpu_memory_mib=20000), V100, False),
]


def _node_of(shape: NodeShape) -> tuple[FleetState, int]:
    state = FleetState()
    row = state.add_node(
        "n", gpu_model=shape.gpu_model, num_gpus=shape.gpus, cpu_milli=shape.cpu_milli,
        memory_mib=shape.memory_mib, gpu_memory_mib=shape.gpu_memory_mib,
        cuda_driver=shape.cuda_driver, mig_gpus=range(shape.gpus) if shape.mig else (),
        info=NodeInfo("n", taints=shape.taints), mig_compute_slices=shape.mig_compute or 7,
    )
    return state, row


@pytest.mark.parametrize(("what", "req", "shape", "want"), CASES, ids=[c[0] for c in CASES])
def test_fits_shape_is_the_placement_rule(what: str, req: ResourceRequest, shape: NodeShape,
                                          want: bool) -> None:
    assert fits_shape(req, shape) is want
    state, row = _node_of(shape)
    view = pod_view(state, req)
    placement_ok = bool(np.logical_and.reduce([f(view)[row] for f in DEFAULT_FILTERS]))
    assert placement_ok is want
    rejected = {f.reason for f in DEFAULT_FILTERS if not f(view)[row]}
    assert set(shape_misfits(req, shape)) == rejected


def test_a_booting_node_of_another_model_absorbs_no_pinned_pod() -> None:
    """Bin.take on an existing bin applies the node rules too (before: any model took it)."""
    t4 = Bin.empty(NodeShape("T4", 1, 8000, 16384, 16384, 12040))
    assert not t4.take(ResourceRequest(num_gpu=1, gpu_models=frozenset({"V100-16GB"})))
    assert t4.take(ResourceRequest(num_gpu=1, gpu_models=frozenset({"Tesla-T4"})))


def test_shared_pods_need_gpu_memory_on_the_same_gpu() -> None:
    """Two 500-milli pods of 10 GiB each fit one 16 GiB V100 by milli, not by memory
    (before: both went on it)."""
    pod = ResourceRequest(cpu_milli=1000, num_gpu=1, gpu_milli=500, gpu_memory_mib=10240)
    b = Bin.empty(V100)
    assert b.take(pod)
    assert not b.take(pod)
    assert b.free == [500] and b.gpu_mem == [16384 - 10240]
    bins, left = pack([pod, pod], V100)
    assert len(bins) == 2 and not left
    # without GPU memory asked, milli decides alone, as before
    light = ResourceRequest(cpu_milli=1000, num_gpu=1, gpu_milli=500)
    assert len(pack([light, light], V100)[0]) == 1
