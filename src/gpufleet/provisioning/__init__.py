"""Provisioning: grow the fleet for pending work, shrink it when nodes are not needed."""

from gpufleet.provisioning.binpack import Bin, NodeShape, fits_shape, pack
from gpufleet.provisioning.disruption import Command, DisruptionPolicy, NodeView, PodView
from gpufleet.provisioning.scale_up import InFlight, Offer, PendingPod, ScaleUpPolicy, score

__all__ = [
    "Bin",
    "Command",
    "DisruptionPolicy",
    "InFlight",
    "NodeShape",
    "NodeView",
    "Offer",
    "PendingPod",
    "PodView",
    "ScaleUpPolicy",
    "fits_shape",
    "pack",
    "score",
]
