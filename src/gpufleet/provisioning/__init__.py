"""Provisioning: grow the fleet for pending work, shrink it when nodes are not needed."""

from gpufleet.provisioning.binpack import (
    MIG_CONFIG,
    MIG_CONFIG_LABEL,
    Bin,
    NodeShape,
    fits_shape,
    gpu_milli_of,
    pack,
)
from gpufleet.provisioning.disruption import Command, DisruptionPolicy, NodeView, PodView
from gpufleet.provisioning.scale_up import (
    InFlight,
    Offer,
    PendingPod,
    PriceScores,
    ScaleUpPolicy,
    ScaleUpReply,
    Unprovisioned,
    one_zone,
    score,
)
from gpufleet.provisioning.zones import on_demand_zone

__all__ = [
    "MIG_CONFIG",
    "MIG_CONFIG_LABEL",
    "Bin",
    "Command",
    "DisruptionPolicy",
    "InFlight",
    "NodeShape",
    "NodeView",
    "Offer",
    "PendingPod",
    "PodView",
    "PriceScores",
    "ScaleUpPolicy",
    "ScaleUpReply",
    "Unprovisioned",
    "fits_shape",
    "gpu_milli_of",
    "on_demand_zone",
    "one_zone",
    "pack",
    "score",
]
