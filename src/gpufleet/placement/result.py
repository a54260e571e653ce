"""What a placement call returns: a placement, or an expected "no" as data.

Following the kube-scheduler framework, a "no" carries a :class:`Status` that separates
*unschedulable now* (the fleet is full; wait or scale up) from *never schedulable* (no node of this
fleet could host it even empty; scaling the same node types will not help) — the simulator and the
provisioner act differently on the two. Internal faults are exceptions, never a Status.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from gpufleet.decisions import Bind, MigSlot
from gpufleet.state import FleetState


class Status(Enum):
    SUCCESS = "success"
    UNSCHEDULABLE = "unschedulable"
    UNSCHEDULABLE_AND_UNRESOLVABLE = "never-schedulable"


@dataclass(frozen=True, slots=True)
class PlacementResult:
    row: int
    gpus: tuple[int, ...]
    milli_per_gpu: int
    mig: tuple[MigSlot, ...] = ()  # MIG slots; their masks follow from the Bind (bind_masks)

    def to_bind(self, state: FleetState, job_id: str) -> Bind:
        node = state.nodes[self.row].name
        if self.mig:
            return Bind(job_id=job_id, node=node, gpus=(), milli_per_gpu=0, mig=self.mig)
        return Bind(job_id=job_id, node=node, gpus=self.gpus, milli_per_gpu=self.milli_per_gpu)


@dataclass(frozen=True, slots=True, eq=False)
class Unschedulable:
    """``why``: the reason, or a function that writes it. The simulator asks for the status
    only, millions of times per trace; kube's "0/N nodes are available: …" text is written
    when someone reads ``reason`` (an event, a log line), not on every refusal."""

    why: str | Callable[[], str]
    status: Status = Status.UNSCHEDULABLE

    @property
    def reason(self) -> str:
        return self.why if isinstance(self.why, str) else self.why()

    @property
    def never(self) -> bool:
        return self.status is Status.UNSCHEDULABLE_AND_UNRESOLVABLE

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Unschedulable):
            return NotImplemented
        return self.status is other.status and self.reason == other.reason

    def __hash__(self) -> int:
        return hash((self.status, self.reason))

    def __repr__(self) -> str:
        return f"Unschedulable(reason={self.reason!r}, status={self.status})"
