"""Where the pods of nodes being removed can go: the other nodes' free room, then one new node.

Shared by the consolidation methods (to build a command) and by ``Command.validate`` (to re-check
it), so a command is re-validated by the very rule that produced it.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.provisioning.binpack import Bin, NodeShape, pack
from gpufleet.provisioning.disruption.views import NodeView, PodView


def pack_into(pods: Sequence[PodView], nodes: Sequence[NodeView]) -> list[PodView]:
    """Pods that do not fit the free room of ``nodes``: on-demand-only pods are packed first
    into on-demand nodes, spot-tolerant ones then anywhere."""
    on_demand = [n.bin() for n in nodes if not n.spot]
    spot = [n.bin() for n in nodes if n.spot]
    strict = [p for p in pods if not p.spot_ok]
    loose = [p for p in pods if p.spot_ok]
    _, left_s = pack([p.request for p in strict], None, on_demand)
    _, left_l = pack([p.request for p in loose], None, spot + on_demand)
    return [strict[i] for i in sorted(left_s)] + [loose[i] for i in sorted(left_l)]


def fits_elsewhere(cand: NodeView, nodes: Sequence[NodeView]) -> bool:
    """Every pod of ``cand`` fits the free space of the other nodes it may run on."""
    return not pack_into(cand.pods, [n for n in nodes if n.name != cand.name])


def fits_new_node(pods: Sequence[PodView], shape: NodeShape) -> bool:
    """All of ``pods`` fit one empty node of ``shape``."""
    _, rest = pack([p.request for p in pods], None, [Bin.empty(shape)])
    return not rest
