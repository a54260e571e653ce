"""Gang admission: a multi-node job gets every replica placed, or none.

Each replica is placed with the (pure) placement policy against the state *as it would be* after
the earlier replicas, so two replicas never claim the same GPUs. The trial allocations are undone
before returning: the caller sees an unchanged state and a list of placements to apply — the same
contract as a single placement call.
"""

from __future__ import annotations

import numpy as np

from gpufleet.placement import PlacementResult, Unschedulable
from gpufleet.state import FleetState, ResourceRequest


def place_gang(
    state: FleetState,
    req: ResourceRequest,
    replicas: int,
    policy: object,
    rng: np.random.Generator,
    job_id: str = "gang",
) -> list[PlacementResult] | Unschedulable:
    placed: list[PlacementResult] = []
    binds = []
    try:
        for r in range(replicas):
            res = policy.place(state, req, rng)  # type: ignore[attr-defined]
            if not isinstance(res, PlacementResult):
                return Unschedulable(f"replica {r + 1}/{replicas}: {res.reason}")
            bind = res.to_bind(state, f"{job_id}#{r}")
            masks = res.mig_masks()
            state.allocate(req, bind, masks)
            binds.append((bind, masks))
            placed.append(res)
        return placed
    finally:
        for bind, masks in reversed(binds):
            state.release(req, bind, masks)
