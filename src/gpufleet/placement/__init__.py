"""Placement: which node (and which GPUs / MIG slice) a pod goes to.

A kube-scheduler-style framework — filters, weighted scorers, tie-breakers, a GPU picker — over the
NumPy arrays of :class:`~gpufleet.state.FleetState`, with the FGD paper's baselines reproduced and
our own default policy. See ``docs/placement.md``.
"""

from gpufleet.placement.policy import Policy
from gpufleet.placement.registry import (
    DEFAULT_POLICY,
    describe_policies,
    get_policy,
    list_policies,
    register,
)
from gpufleet.placement.result import PlacementResult, Status, Unschedulable
from gpufleet.placement.typical import DEFAULT_TYPICAL_TASKS, typical_tasks_from

__all__ = [
    "DEFAULT_POLICY",
    "DEFAULT_TYPICAL_TASKS",
    "PlacementResult",
    "Policy",
    "Status",
    "Unschedulable",
    "describe_policies",
    "get_policy",
    "list_policies",
    "register",
    "typical_tasks_from",
]
