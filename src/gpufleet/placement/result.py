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
    """``why``: the reason, or a function that writes it; ``status_of``: the status, or a
    function that finds it. The simulator reads neither, millions of refusals per trace: kube's
    "0/N nodes are available: …" text is written when someone reads ``reason`` (an event, a
    log line), and whether any node could host the pod even empty (``never``: the filters run
    again on an empty fleet) when someone reads ``status``. A refusal is read in the cycle
    that got it, before the fleet's nodes change."""

    why: str | Callable[[], str]
    status_of: Status | Callable[[], Status] = Status.UNSCHEDULABLE

    @property
    def reason(self) -> str:
        return self.why if isinstance(self.why, str) else self.why()

    @property
    def status(self) -> Status:
        s = self.status_of
        return s if isinstance(s, Status) else s()

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
