"""One packing experiment, exactly as ``shared/benchmarks/packing-protocol.md`` states it.

Per seed: shuffle the trace's pods, append uniform clones until the requested GPU total would pass
the largest load (130% of capacity), try every pod once in order (a pod that fits nowhere is
skipped), and after every attempt record arrived and allocated milli. Arrived load x% buckets the
events (``round(arrived / (capacity/100))``, half to even); allocation at x is the mean over the
bucket. Fragmentation is measured against the trace's typical tasks as each bucket closes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from gpufleet.catalog.gpus import GpuCatalog, default_gpu_catalog
from gpufleet.errors import InputError
from gpufleet.placement.fragmentation import TaskTable
from gpufleet.placement.mig import bind_masks
from gpufleet.placement.registry import get_policy
from gpufleet.placement.result import PlacementResult
from gpufleet.placement.typical import TypicalTasks, typical_tasks_from
from gpufleet.state import ResourceRequest
from gpufleet.traces.openb import OpenbNode, build_fleet


@dataclass(frozen=True)
class SeedResult:
    policy: str
    seed: int
    alloc_pct: np.ndarray  # allocation % at arrived load x = index (NaN where no event)
    frag_ratio_pct: dict[int, float]
    wall_seconds: float
    decisions: int
    failed: int

    def unallocated_pct(self, load: int) -> float:
        return float(100.0 - self.alloc_pct[load])


def arrival_sequence(
    pods: Sequence[ResourceRequest], capacity_milli: int, seed: int, max_load_pct: int
) -> list[ResourceRequest]:
    """Shuffled trace, then uniform clones until the next one would pass ``max_load_pct``."""
    if capacity_milli <= 0:
        raise InputError("the fleet has no GPU; the benchmark fills GPU capacity", field="gpu")
    if not any(p.total_gpu_milli > 0 for p in pods):
        # every clone would add 0 milli: the loop below would never reach the limit
        raise InputError("no pod asks for a GPU; the benchmark fills GPU capacity",
                         field="num_gpu")
    rng = np.random.default_rng(seed)
    seq = [pods[i] for i in rng.permutation(len(pods))]
    total = sum(p.total_gpu_milli for p in seq)
    limit = capacity_milli * max_load_pct / 100
    while True:
        clone = pods[int(rng.integers(len(pods)))]
        if total + clone.total_gpu_milli > limit:
            break
        seq.append(clone)
        total += clone.total_gpu_milli
    return seq


def run_seed(
    policy_name: str,
    nodes: Sequence[OpenbNode],
    pods: Sequence[ResourceRequest],
    seed: int,
    loads: Sequence[int],
    *,
    typical: TypicalTasks | None = None,
    max_load_pct: int | None = None,
    limit: int | None = None,
    catalog: GpuCatalog | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> SeedResult:
    """Fill a fresh fleet with one seed's arrival sequence under one policy."""
    catalog = catalog or default_gpu_catalog()
    typical = typical or typical_tasks_from(pods)
    metric = TaskTable.build(typical, cpu_tasks="fit")
    state = build_fleet(nodes, catalog)
    capacity = state.gpu_capacity_milli()
    unit = capacity / 100
    top = max_load_pct or max(loads)
    seq = arrival_sequence(pods, capacity, seed, top)
    if limit is not None:
        seq = seq[:limit]
    policy = get_policy(policy_name, typical_tasks=typical, tie_seed=seed)
    rng = np.random.default_rng([seed, 0x9E3779B9])
    wanted = set(loads)
    frag: dict[int, float] = {}

    def frag_ratio() -> float:
        f = metric.fleet_frag(state, catalog).sum()
        idle = capacity - state.gpu_allocated_milli()
        return float(100.0 * f / idle) if idle else 0.0

    arrived = np.empty(len(seq))
    used = np.empty(len(seq))
    got = 0
    alloc = 0
    failed = 0
    bucket = -1
    t0 = time.perf_counter()
    for i, req in enumerate(seq):
        x_bucket = round((got + req.total_gpu_milli) / unit)
        if x_bucket != bucket:
            if bucket in wanted:
                frag[bucket] = frag_ratio()
            bucket = x_bucket
        res = policy.place(state, req, rng)
        got += req.total_gpu_milli
        if isinstance(res, PlacementResult):
            bind = res.to_bind(state, f"p{i}")
            state.allocate(req, bind, bind_masks(state, bind, catalog))
            alloc += req.total_gpu_milli
        else:
            failed += 1
        arrived[i] = got
        used[i] = alloc
        if on_progress is not None and i % 256 == 255:
            on_progress(256)
    if bucket in wanted:
        frag[bucket] = frag_ratio()
    wall = time.perf_counter() - t0
    if on_progress is not None:
        on_progress(len(seq) % 256)
    xs = np.round(arrived / unit).astype(np.int64)  # numpy rounds half to even
    size = max(int(xs.max()) + 1, max(loads) + 1)
    sums = np.bincount(xs, weights=used / unit, minlength=size)
    counts = np.bincount(xs, minlength=size)
    with np.errstate(invalid="ignore", divide="ignore"):
        curve = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    return SeedResult(policy_name, seed, curve, frag, wall, len(seq), failed)
