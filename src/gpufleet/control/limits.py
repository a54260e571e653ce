"""Which nodes the autoscaler may add, and which it looks at when it consolidates.

*Node cap* (``max_nodes``, Cluster Autoscaler's ``--max-nodes-total``): scale-up plans nothing
once the live fleet (booting nodes count) is at the cap, a ``Launch`` of several nodes stops at
it, and consolidation may only *replace* a node with a cheaper one (which briefly adds one)
while the fleet is below it — at the cap it can still delete.

*Consolidation set*: the underused candidates plus every node that could take their pods. A
ready node with free GPU share is in it; a full node is not (it can neither be emptied cheaply
nor receive anything). A node is a *candidate* once it has been underused for ``unneeded_s``;
any other node in the set is there for its room only. Example (unneeded 600 s, now 1000): node
a underused since 300 is a candidate, node b underused since 900 and node c busy but with room
are room only, a full node d is left out.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpufleet.state import GPU_MILLI


def launch_room(live: int, max_nodes: int) -> int:
    """How many more nodes may be launched with ``live`` nodes up or booting (0 at the cap or
    above it: a cap lowered under a running fleet launches nothing, it deletes nothing)."""
    return max(0, max_nodes - live)


def may_launch(live: int, max_nodes: int) -> bool:
    """Whether one more node may be launched with ``live`` nodes up or booting."""
    return launch_room(live, max_nodes) > 0


def consolidation_set(
    nodes: Iterable[tuple[str, bool, int, int, float | None]], now: float, unneeded_s: float
) -> list[tuple[str, bool]]:
    """(name, room_only) for the nodes a consolidation look considers, in the given order.
    ``nodes``: (name, ready, allocated milli-GPU, GPUs, underused since or None)."""
    return [
        (name, since is None or now - since < unneeded_s)
        for name, ready, alloc, gpus, since in nodes
        if ready and alloc < GPU_MILLI * gpus
    ]
