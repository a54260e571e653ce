"""Fixed-fleet sizing: which node groups a non-autoscaled cluster has, and how many nodes.

One node group per kind of GPU the jobs need: jobs with the same model constraint share a
group, and MIG jobs (with sharing on) get their own group of MIG-mode nodes, sized for their
compute share; unconstrained jobs join the biggest constrained group of their MIG kind. A
workload of one kind (Philly, the default) is one group.

Each group is of the cheapest per-GPU instance type that fits its biggest job (and offers its
MIG profiles), preferring one on which every job's replica fits, with ``fixed_nodes`` nodes or
enough for a quantile of the group's concurrent demand (``sizing.demand_quantile_milli``). On a
spot fleet the first nodes, enough for the peak demand of jobs that may not go on spot (their
admitted request does not tolerate it: not interruptible, or unable to checkpoint —
``control.admission``), are on-demand; the rest want spot.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpufleet.catalog.gpus import default_gpu_catalog
from gpufleet.catalog.instances import InstanceType
from gpufleet.control.admission import tolerates_spot
from gpufleet.control.sizing import demand_quantile_milli, peak_demand_milli
from gpufleet.errors import InputError
from gpufleet.provisioning.binpack import NodeShape, fits_shape
from gpufleet.state import GPU_MILLI, ResourceRequest
from gpufleet.traces.jobs import JobSpec


@dataclass(frozen=True, slots=True)
class NodeGroup:
    """``nodes`` nodes of ``instance_type``; the first ``on_demand_nodes`` on-demand."""

    instance_type: InstanceType
    mig: bool
    nodes: int
    on_demand_nodes: int


def fixed_fleet(
    jobs: list[tuple[JobSpec, ResourceRequest]], types: list[InstanceType], *, sharing: bool,
    spot: bool, fixed_nodes: int | None, quantile: float,
) -> list[NodeGroup]:
    """Node groups for ``jobs`` (each with its admitted request), in a stable order."""
    pools: dict[tuple[bool, frozenset[str]], list[int]] = {}
    for i, (_, r) in enumerate(jobs):
        pools.setdefault((r.mig_profile is not None, r.gpu_models or frozenset()), []).append(i)
    if not pools:
        pools[(False, frozenset())] = []
    if len(pools) > 1 and frozenset() in {k[1] for k in pools}:
        # unconstrained jobs go with the biggest constrained group of their MIG kind
        for mig in (False, True):
            loose = pools.pop((mig, frozenset()), None)
            if loose is None:
                continue
            same = [k for k in pools if k[0] == mig]
            if not same:
                pools[(mig, frozenset())] = loose
                continue
            pools[max(same, key=lambda k: (len(pools[k]), sorted(k[1])))].extend(loose)
    out = []
    for mig, models in sorted(pools, key=lambda k: (k[0], sorted(k[1]))):
        specs = [jobs[i][0] for i in pools[(mig, models)]]
        reqs = {jobs[i][1] for i in pools[(mig, models)]}
        strict = [jobs[i][0] for i in pools[(mig, models)] if not tolerates_spot(jobs[i][1])]
        out.append(_group(mig, models, specs, reqs, types, sharing, spot, fixed_nodes, quantile,
                          strict))
    return out


def _group(
    mig: bool, models: frozenset[str], jobs: list[JobSpec], reqs: set[ResourceRequest],
    types: list[InstanceType], sharing: bool, spot: bool, fixed_nodes: int | None,
    quantile: float, strict: list[JobSpec],
) -> NodeGroup:
    cat = default_gpu_catalog()
    biggest = max((j.request.whole_gpus for j in jobs), default=1)
    # the admitted requests: in a MIG group every one names its profile (the group's key)
    profiles = {r.mig_profile for r in reqs if r.mig_profile is not None}
    cands = [
        t for t in types
        if t.gpus >= biggest and (not models or t.gpu_model in models)
        and all(cat.mig_profile(t.gpu_model, p) for p in profiles)
    ]
    if not cands:
        raise InputError(f"no instance type offers {biggest} GPUs of {sorted(models)}")
    # prefer a type every job's replica fits (CPU, memory, GPU memory), else the cheapest
    roomy = [t for t in cands if all(fits_shape(r, NodeShape.of(t, mig)) for r in reqs)]
    it = min(roomy or cands, key=lambda t: (float(t.usd_per_hour) / t.gpus, -t.gpus, t.name))
    n = fixed_nodes or max(1, math.ceil(
        demand_quantile_milli(jobs, sharing, quantile) / (GPU_MILLI * it.gpus)))
    n_od = 0
    if spot:  # at least one on-demand node where some job may not go on spot (CPU-only too)
        n_od = max(1 if strict else 0,
                   math.ceil(peak_demand_milli(strict, sharing) / (GPU_MILLI * it.gpus)))
    return NodeGroup(it, mig, n, n_od)
