"""Gang admission: a multi-node job gets every replica placed, in one zone, or none.

Each replica is placed with the (pure) placement policy against the state *as it would be* after
the earlier replicas, so two replicas never claim the same GPUs. The trial allocations (one
``queueing.statement.Statement``) are undone before returning: the caller sees an unchanged
state and a list of placements to apply — the same contract as a single placement call.

One zone: the replicas of a distributed training job exchange gradients every step, so they run
in one cluster placement group, which AWS (and every cloud) confines to one availability zone.
On a fleet spread over zones the gang is tried zone by zone (``gang_zones``: zones with enough
free GPUs, fullest first — best fit, so large empty zones stay free for larger gangs), each
replica pinned to the zone through ``ResourceRequest.zone`` (a node-affinity the placement
filters honour); the first zone that takes every replica wins.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from gpufleet.placement import PlacementResult, Unschedulable
from gpufleet.placement.mig import bind_masks
from gpufleet.placement.policy import Policy
from gpufleet.queueing.statement import Statement
from gpufleet.state import GPU_MILLI, FleetState, ResourceRequest


def gang_zones(state: FleetState, req: ResourceRequest, replicas: int) -> list[str | None]:
    """Zones to try a gang in, in order; ``[None]`` when the fleet has at most one zone (no
    pinning needed) and ``[]`` when no zone has the free GPUs the gang needs in total."""
    rows = np.flatnonzero(state.active[: state.n])
    zones = state.zone_id[rows]
    ids = np.unique(zones)
    if ids.size <= 1:
        return [None]
    need = replicas * req.num_gpu * (req.gpu_milli if req.is_shared else GPU_MILLI) \
        if req.mig_profile is None else 0
    free = np.where(state.free_milli[rows] > 0, state.free_milli[rows], 0).sum(axis=1)
    out = []
    for zid in ids.tolist():
        have = int(free[zones == zid].sum())
        if have >= need:
            name = state.zone_names[zid] if zid >= 0 else ""
            out.append((have, name))
    return [name for _, name in sorted(out)]


def place_gang(
    state: FleetState,
    req: ResourceRequest,
    replicas: int,
    policy: Policy,
    rng: np.random.Generator,
    job_id: str = "gang",
) -> list[PlacementResult] | Unschedulable:
    zones = gang_zones(state, req, replicas) if replicas > 1 else [None]
    if not zones:
        return Unschedulable(f"no zone has the {replicas} replicas' GPUs free")
    last: Unschedulable | None = None
    for zone in zones:
        pinned = req if zone is None else replace(req, zone=zone)
        got = _place_all(state, pinned, replicas, policy, rng, job_id)
        if isinstance(got, list):
            return got
        last = got
    assert last is not None
    if len(zones) > 1:
        n, inner = len(zones), last  # the text is written when read (``Unschedulable``)
        return Unschedulable(lambda: f"in none of {n} zones: {inner.reason}",
                             lambda: inner.status)
    return last


def _place_all(
    state: FleetState,
    req: ResourceRequest,
    replicas: int,
    policy: Policy,
    rng: np.random.Generator,
    job_id: str,
) -> list[PlacementResult] | Unschedulable:
    placed: list[PlacementResult] = []
    with Statement(state) as trial:  # every replica's trial allocation is undone on return
        for r in range(replicas):
            res = policy.place(state, req, rng)
            if not isinstance(res, PlacementResult):
                return _replica_refused(r + 1, replicas, res)
            bind = res.to_bind(state, f"{job_id}#{r}")
            trial.allocate(req, bind, bind_masks(state, bind, policy.catalog))
            placed.append(res)
        return placed


def _replica_refused(k: int, replicas: int, res: Unschedulable) -> Unschedulable:
    """Replica ``k`` found no node; the text is written when read (``Unschedulable``)."""
    return Unschedulable(lambda: f"replica {k}/{replicas}: {res.reason}", lambda: res.status)
