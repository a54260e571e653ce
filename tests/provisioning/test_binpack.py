from __future__ import annotations

from gpufleet.provisioning import Bin, NodeShape, fits_shape, pack
from gpufleet.state import ResourceRequest

P3_2X = NodeShape("V100-16GB", 1, 8000, 61 * 1024, 16384, 12040)
P3_16X = NodeShape("V100-16GB", 8, 64000, 488 * 1024, 16384, 12040)


def req(n: int = 1, milli: int = 1000, cpu: int = 4000) -> ResourceRequest:
    return ResourceRequest(cpu_milli=cpu, memory_mib=1024, num_gpu=n, gpu_milli=milli,
                           gpu_models=frozenset({"V100-16GB"}))


def test_shared_pods_share_a_gpu_best_fit() -> None:
    # 0.6 + 0.4 share one GPU; 0.5 + 0.5 the next: two 1-GPU nodes
    bins, left = pack([req(1, 600), req(1, 500), req(1, 400), req(1, 500)], P3_2X)
    assert not left and len(bins) == 2
    assert sorted(b.free[0] for b in bins) == [0, 0]


def test_whole_gpus_first_fit_decreasing() -> None:
    # 4 + 2 + 2 on one 8-GPU node, 4 + 1 on a second
    bins, left = pack([req(2), req(4), req(1), req(4), req(2)], P3_16X)
    assert not left and len(bins) == 2
    assert [sum(1 for f in b.free if f == 0) for b in bins] == [8, 5]


def test_cpu_limits_count() -> None:
    # 3 pods of 3 vCPU on a 8-vCPU node: CPU, not GPUs, forces a second node
    shape = NodeShape("V100-16GB", 4, 8000, 64 * 1024, 16384)
    bins, _ = pack([req(1, cpu=3000)] * 3, shape)
    assert len(bins) == 2


def test_fits_shape_rules() -> None:
    assert not fits_shape(req(2), P3_2X)
    assert fits_shape(req(8), P3_16X)
    t4 = ResourceRequest(num_gpu=1, gpu_models=frozenset({"T4"}))
    assert not fits_shape(t4, P3_2X)
    assert not fits_shape(ResourceRequest(num_gpu=1, min_cuda=12080), P3_2X)
    assert not fits_shape(ResourceRequest(num_gpu=1, mig_profile="1g.5gb"), P3_16X)


def test_no_new_bins_returns_leftovers() -> None:
    b = Bin.empty(P3_2X)
    bins, left = pack([req(), req()], None, [b])
    assert len(bins) == 1
    assert left in ([0], [1])


def test_bin_copy_is_independent_of_the_original() -> None:
    """A trial packing on a copy leaves the original bin as it was (every list copied)."""
    from gpufleet.provisioning.binpack import Bin, NodeShape, pack
    from gpufleet.state import ResourceRequest

    shape = NodeShape("V100-16GB", gpus=2, cpu_milli=8000, memory_mib=32768,
                      gpu_memory_mib=16384)
    orig = Bin.empty(shape)
    trial = orig.copy()
    assert trial == orig
    _, left = pack([ResourceRequest(cpu_milli=1000, memory_mib=1024, num_gpu=1)], None, [trial])
    assert left == []
    assert orig == Bin.empty(shape) and trial != orig
    assert trial.shape is orig.shape


def _reference_pack(items: list[ResourceRequest], shape: NodeShape | None,
                    bins: list[Bin]) -> tuple[list[Bin], list[int]]:
    """Plain first-fit decreasing, every item scanning every bin from the first: the oracle
    for ``pack``'s shortcuts (full bins leave the scan, an item equal to the one before it
    starts where that one went)."""
    from gpufleet.provisioning.binpack import size_key

    bins = list(bins)
    left = []
    for i in sorted(range(len(items)), key=lambda i: size_key(items[i]), reverse=True):
        placed = next((b for b in bins if b.take(items[i])), None)
        if placed is None and shape is not None and fits_shape(items[i], shape):
            placed = Bin.empty(shape)
            if placed.take(items[i]):
                bins.append(placed)
            else:
                placed = None
        if placed is None:
            left.append(i)
        else:
            placed.items.append(i)
    return bins, left


def test_pack_equals_plain_first_fit_on_random_runs_of_equal_requests() -> None:
    """Random mixes of whole, shared, CPU-only and MIG requests, in runs of equal ones (as
    placeholders and replicas come), onto fresh or partly used bins: the same bins, the same
    room left in each and the same leftovers as the oracle."""
    import random

    from gpufleet.state import ResourceRequest as R

    a100 = NodeShape("A100-40GB", 8, 96000, 1179648, 40960, 12040, mig_compute=7)
    kinds = [req(1), req(2), req(4), req(8), req(1, 500), req(1, 300), req(1, 1000, 30000),
             R(cpu_milli=6000, memory_mib=2048), R(cpu_milli=1000, num_gpu=1,
                                                     mig_profile="1g.5gb")]
    rng = random.Random(3)
    for trial in range(300):
        items = []
        for _ in range(rng.randint(1, 12)):
            k = rng.choice(kinds)
            items += [k if rng.random() < 0.5 else R(**{f: getattr(k, f)
                                                       for f in k.__dataclass_fields__})
                      ] * rng.randint(1, 6)
        shape = rng.choice([P3_16X, P3_2X, a100, None])
        seeds = [Bin.empty(rng.choice([P3_16X, P3_2X, a100])) for _ in range(rng.randint(0, 5))]
        warm = [req(rng.choice([1, 2, 4]))] * rng.randint(0, 6)
        pack(warm, None, seeds)  # some room already taken
        got, got_left = pack(items, shape, [b.copy() for b in seeds])
        want, want_left = _reference_pack(items, shape, [b.copy() for b in seeds])
        assert sorted(got_left) == sorted(want_left), trial
        assert [(b.free, b.cpu, b.mem, b.mig_used, b.mig_compute_used, b.gpu_mem, b.items)
                for b in got] == [(b.free, b.cpu, b.mem, b.mig_used, b.mig_compute_used,
                                   b.gpu_mem, b.items) for b in want], trial
