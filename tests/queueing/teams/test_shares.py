"""GPU-equivalents: worked by hand from the catalog (A100/H100: 7 compute slices, A30: 4)."""

from __future__ import annotations

import pytest

from gpufleet.catalog.gpus import default_gpu_catalog
from gpufleet.queueing.teams.shares import gpu_equivalent_milli, mig_share_milli
from gpufleet.state import ResourceRequest

CAT = default_gpu_catalog()


@pytest.mark.parametrize(
    ("req", "model", "milli"),
    [
        (ResourceRequest(num_gpu=1), None, 1000),
        (ResourceRequest(num_gpu=8), None, 8000),
        (ResourceRequest(num_gpu=1, gpu_milli=250), None, 250),  # a quarter, not a whole GPU
        (ResourceRequest(num_gpu=0), None, 0),  # CPU-only
        # 1g.5gb on A100-40GB: 1/7 compute = 142.857 → 143
        (ResourceRequest(num_gpu=1, mig_profile="1g.5gb"), "A100-40GB", 143),
        # 3g.20gb: 3/7 = 428.57 → 429; 7g.40gb: the whole GPU
        (ResourceRequest(num_gpu=1, mig_profile="3g.20gb"), "A100-40GB", 429),
        (ResourceRequest(num_gpu=1, mig_profile="7g.40gb"), "A100-40GB", 1000),
        # 1g.10gb has twice 1g.5gb's memory but one compute slice: the same share
        (ResourceRequest(num_gpu=1, mig_profile="1g.10gb"), "A100-40GB", 143),
        # A30: 4 compute slices, 2g.12gb = 2/4
        (ResourceRequest(num_gpu=1, mig_profile="2g.12gb"), "A30", 500),
    ],
)
def test_gpu_equivalents(req: ResourceRequest, model: str | None, milli: int) -> None:
    assert gpu_equivalent_milli(req, CAT, model) == milli


def test_unplaced_mig_takes_the_largest_share_over_models_offering_it() -> None:
    # 2g.10gb exists on A100-40GB only (2/7 → 286); 1g.6gb on A30 only (1/4 → 250)
    assert mig_share_milli(CAT, "2g.10gb") == 286
    assert mig_share_milli(CAT, "1g.6gb") == 250


def test_unknown_profile_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"offers MIG profile '9g\.99gb'"):
        mig_share_milli(CAT, "9g.99gb")
    with pytest.raises(ValueError, match="GPU model T4 offers"):
        mig_share_milli(CAT, "1g.5gb", "T4")
