"""Right-sized nodes for pods that cannot move: a long job that cannot be moved does not strand
a large node.

Why: consolidation can only empty a node whose pods it can move. A pod that cannot move — it
cannot checkpoint (or the fleet does not let it), or it is one replica of a gang — keeps its
node alive until it ends. If it lands on a node much larger than itself, every other GPU of
that node is paid for until then, whether anything uses it or not. Measured on the synthetic
``short-heavy`` shape (docs/simulator.md): one 1-GPU, 72-hour job without checkpoints held a
p3.16xlarge for 72 h ($1,766 of an $8,100 run), and such placements decided ±20 % of a run's
bill.

The rule: a pod that cannot move and whose work left exceeds the fleet's scale-down horizon
(``scale_down_unneeded_s``: it would outlive the time after which an idle node is removed) may
only use nodes of at most ``max(2 × its GPUs, the smallest node that fits it)`` GPUs — at most
half of such a node can sit behind it, and a pod no small node can hold is not refused
everything. A deadline job that cannot wait for a new node (``control.deadline.urgent``) takes
whatever room there is. Placement keeps it off larger nodes (an eligibility mask), and
scale-up launches and counts booting capacity for it within the same cap, so the two agree.
It applies only where the fleet can launch a right-sized node (autoscaling); a fixed fleet
places as before. Both drivers apply it (:func:`cap_for`): the live one reads the work left
from ``gpufleet.io/duration`` (a pod without it is not capped) and whether the pod can move
from consolidation's rule.

Example: a 1-GPU job without checkpoints, 72 h left, scale-down after 600 s, p3 types of 1, 4
and 8 GPUs → cap max(2, 1) = 2 GPUs: only a p3.2xlarge. The same job with checkpoints → no
cap (consolidation can move it). A 1-GPU A100 job where the smallest A100 node has 8 GPUs →
cap 8.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from gpufleet.state import FleetState, ResourceRequest


def pins_node(checkpoints: bool, replicas: int, work_left_s: float, unneeded_s: float) -> bool:
    """Whether a pod would hold its node past the scale-down horizon with nobody able to move
    it: it cannot checkpoint or is a gang's replica, and has more work left than
    ``unneeded_s``."""
    return (not checkpoints or replicas > 1) and work_left_s > unneeded_s


def replica_gpus(req: ResourceRequest) -> int:
    """GPUs one replica occupies (a fraction of one GPU is still that GPU; a MIG slice: one)."""
    return 1 if req.mig_profile is not None else req.num_gpu


def node_gpu_cap(req: ResourceRequest, fitting_node_gpus: Iterable[int]) -> int | None:
    """The largest node (in GPUs) the pod may use: ``max(2 × its GPUs, the smallest node that
    fits it)``; None when it asks no GPU (a CPU pod strands no GPU) or nothing fits it."""
    g = replica_gpus(req)
    sizes = list(fitting_node_gpus)
    if g == 0 or not sizes:
        return None
    return max(2 * g, min(sizes))


def cap_for(req: ResourceRequest, checkpoints: bool, replicas: int, work_left_s: float | None,
            unneeded_s: float, urgent: bool, fitting_node_gpus: Iterable[int]) -> int | None:
    """The rule in one call, for a driver: the largest node (GPUs) the pod may use, or None
    (any node) when it can move, has no more work left than ``unneeded_s`` (or states none:
    ``work_left_s`` None), or is an urgent deadline job."""
    if urgent or work_left_s is None or not pins_node(checkpoints, replicas, work_left_s,
                                                      unneeded_s):
        return None
    return node_gpu_cap(req, fitting_node_gpus)


def rows_within(state: FleetState, cap: int) -> np.ndarray:
    """The eligibility mask of the rows whose node has at most ``cap`` GPUs."""
    return state.num_gpus[: state.n] <= cap
