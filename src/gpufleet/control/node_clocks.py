"""Whether a node is empty or underused, and since when: the clocks emptiness and consolidation
wait on (``scale_down_unneeded_s``), one rule for both drivers.

* **empty**: no pod of its own on the node (DaemonSet and mirror pods do not count: they go
  with the node);
* **underused**: it has pods but its GPU allocation is below ``utilization_threshold`` of its
  GPUs (Cluster Autoscaler's ``scale-down-utilization-threshold``); an empty node is *not*
  underused — emptiness removes it, and its underused clock starts only when a pod arrives;
* **busy**: anything else.

The simulator sees every pod arrive and leave, so it keeps the clocks on those events
(``sim.nodes``) with :func:`idle_state`; the live driver is level-triggered and re-reads the
fleet every cycle, so it keeps them in :class:`SinceClock` (in memory: a restarted controller
starts them again, which only ever delays a scale-down).

Example (threshold 0.5): a 4-GPU node with pods holding 1,500 milli-GPU → underused (1,500 <
2,000); with 2,000 → busy (the threshold itself is not below it); with no pod → empty.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

from gpufleet.state import GPU_MILLI


class Idle(Enum):
    EMPTY = "empty"
    UNDERUSED = "underused"
    BUSY = "busy"


def idle_state(pods: int, alloc_milli: float, gpus: int, threshold: float) -> Idle:
    """The node's state with ``pods`` pods of its own holding ``alloc_milli`` milli-GPU of its
    ``gpus`` GPUs."""
    if pods == 0:
        return Idle.EMPTY
    if alloc_milli < threshold * GPU_MILLI * gpus:
        return Idle.UNDERUSED
    return Idle.BUSY


@dataclass
class SinceClock:
    """Since when each node has been in one state (empty, or underused), kept across cycles."""

    since: dict[str, float] = field(default_factory=dict)

    def update(self, nodes: Iterable[str], holding: Iterable[str],
               now: float) -> dict[str, float | None]:
        """Each of ``nodes`` → since when it has been in the state (None: it is not);
        ``holding``: those in the state now. A node in the state keeps its start time, one out
        of it loses it, and nodes not listed are forgotten."""
        names = set(nodes)
        held = set(holding)
        out: dict[str, float | None] = {}
        for n in names:
            if n in held:
                out[n] = self.since.setdefault(n, now)
            else:
                self.since.pop(n, None)
                out[n] = None
        for gone in set(self.since) - names:
            del self.since[gone]
        return out

    def forget(self, node: str) -> None:
        """The node is gone (terminated): its clock must not carry over to a new node of the
        same name."""
        self.since.pop(node, None)
