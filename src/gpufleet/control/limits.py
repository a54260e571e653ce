"""Which nodes the autoscaler may add, and which it looks at when it consolidates.

*Node cap* (``max_nodes``, Cluster Autoscaler's ``--max-nodes-total``): scale-up plans nothing
once the live fleet (booting nodes count) is at the cap, and a ``Launch`` of several nodes stops
at it — except a gang's (``Launch.all_or_none``), which launches whole or not at all: part of a
gang's nodes would sit idle until scale-down took them back, and the next scan would launch
part of them again, for ever (:func:`within_cap`). Pods that are here come before the headroom
buffer's placeholders (:func:`launches_under_cap`). Consolidation may only *replace* a node with
a cheaper one (which briefly adds one) while the fleet is below the cap — at the cap it can
still delete.

*Consolidation set*: the underused candidates plus every node that could take their pods. A
ready node with free GPU share is in it; a full node is not (it can neither be emptied cheaply
nor receive anything). A node is a *candidate* once it has been underused for ``unneeded_s``;
any other node in the set is there for its room only. Example (unneeded 600 s, now 1000): node
a underused since 300 is a candidate, node b underused since 900 and node c busy but with room
are room only, a full node d is left out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from gpufleet.decisions import Launch
from gpufleet.provisioning import PendingPod
from gpufleet.state import GPU_MILLI


def launch_room(live: int, max_nodes: int) -> int:
    """How many more nodes may be launched with ``live`` nodes up or booting (0 at the cap or
    above it: a cap lowered under a running fleet launches nothing, it deletes nothing)."""
    return max(0, max_nodes - live)


def within_cap(launches: Sequence[Launch], room: int) -> list[Launch]:
    """The launches a node cap with ``room`` more nodes lets through, in order: each cut to the
    room left, an all-or-none one (a gang's nodes) skipped whole when it does not fit, and the
    room it would have taken left to the launches after it. Example, room 3: [2 nodes, a gang
    of 2, 3 nodes] → [2 nodes, 1 node]."""
    out: list[Launch] = []
    for x in launches:
        if room <= 0:
            break
        if x.count <= room:
            out.append(x)
        elif not x.all_or_none:
            out.append(replace(x, count=room))
        else:
            continue
        room -= out[-1].count
    return out


def launches_under_cap(plan: Callable[[Sequence[PendingPod]], Sequence[Launch]],
                       pods: Sequence[PendingPod], holders: Sequence[PendingPod],
                       room: int) -> tuple[list[Launch], bool]:
    """Scale-up's launches under a node cap with ``room`` more nodes, real pods before the
    headroom buffer's placeholder pods (``holders``, ``control.headroom``), and whether the
    cap held back a launch that real pods asked for. ``plan``: scale-up's launches for a list
    of pending pods.

    Planned together (a placeholder may share a node with a real pod) while the cap lets every
    launch through; otherwise the pods alone, then the placeholders in the room they leave —
    none while the cap holds back a launch of the pods. A buffer — nodes for pods that may
    come — never takes the room of pods that are here: a gang held back by a placeholder's node
    would wait for it for ever. While real launches are held back, the driver also lets
    disruption take the buffer's idle nodes (``spare_gpus`` with no buffer), so the room comes
    back."""
    asked = list(plan([*pods, *holders]))
    got = within_cap(asked, room)
    if got == asked:
        return got, False
    asked = list(plan(pods)) if holders else asked
    got = within_cap(asked, room)
    held = got != asked
    left = room - sum(x.count for x in got)
    if holders and left > 0 and not held:
        got += within_cap(plan(holders), left)
    return got, held


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
