"""Which zone an on-demand node goes to: a pure function of prices and the current fleet.

Assumptions (docs/simulator.md repeats them): on-demand capacity is always available — a launch
never fails (the clouds' on-demand "insufficient capacity" errors exist for scarce GPUs, but no
public trace of them exists to replay); the zone is the cheapest one for the instance type, and
among equally priced zones (the catalog has one on-demand price per type, so all of them) the
one with the fewest current on-demand nodes of that type — EC2 Auto Scaling's balancing across
availability zones — then the zone listed first.

Example: p3.16xlarge in zones a, b, c at 24.48 $/h with 2, 0 and 1 on-demand nodes → b; with
2, 1, 1 → b (fewest, then listed first).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def on_demand_zone(
    zones: Sequence[str], prices: Mapping[str, float], nodes: Mapping[str, int]
) -> str:
    """The zone for the next on-demand node: cheapest, then fewest nodes, then list order.

    ``prices``: USD/hour per zone (a zone without a price is not offered); ``nodes``: current
    on-demand nodes of the type per zone (missing = 0).
    """
    offered = [(prices[z], nodes.get(z, 0), i, z) for i, z in enumerate(zones) if z in prices]
    if not offered:
        raise ValueError("no zone offers the instance type on demand")
    return min(offered)[3]
