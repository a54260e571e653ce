"""The p3 node shapes and offers the scale-up tests work their numbers on (list prices of
us-east-1; spot at the snapshot's p3.2xlarge price and a round 8.0 for the p3.16xlarge)."""

from __future__ import annotations

from gpufleet.decisions import CapacityType
from gpufleet.provisioning import NodeShape, Offer

P3_2X = NodeShape("V100-16GB", 1, 8000, 61 * 1024, 16384, 12040)
P3_16X = NodeShape("V100-16GB", 8, 64000, 488 * 1024, 16384, 12040)
OFFERS = [
    Offer("p3.2xlarge", CapacityType.ON_DEMAND, P3_2X, 3.06, "us-east-1a"),
    Offer("p3.16xlarge", CapacityType.ON_DEMAND, P3_16X, 24.48, "us-east-1a"),
    Offer("p3.2xlarge", CapacityType.SPOT, P3_2X, 0.918),
    Offer("p3.16xlarge", CapacityType.SPOT, P3_16X, 8.0),
]
