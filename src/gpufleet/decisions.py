"""Decisions: what a policy asks a driver to do, as plain frozen data.

Policies never touch the world; they return these and the driver (simulator or live controller)
applies them and reports the world's reaction back as events. Keeping them small and immutable is
what lets one policy code path serve both drivers and makes decisions easy to log and assert on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum


class CapacityType(StrEnum):
    """Karpenter's ``karpenter.sh/capacity-type`` values."""

    SPOT = "spot"
    ON_DEMAND = "on-demand"


@dataclass(frozen=True, slots=True)
class MigSlot:
    """One MIG instance to create/use: profile name (``3g.20gb``) at a memory-slice offset."""

    gpu: int
    profile: str
    start: int


@dataclass(frozen=True, slots=True)
class Bind:
    """Place ``job_id`` on ``node``: ``gpus`` (indices) at ``milli_per_gpu`` each, or MIG slots."""

    job_id: str
    node: str
    gpus: tuple[int, ...] = ()
    milli_per_gpu: int = 1000
    mig: tuple[MigSlot, ...] = ()


class Cause(StrEnum):
    """Why a running pod is evicted: the live controller counts disruptions by it
    (``gpufleet_pod_disruptions_total``); ``reason`` says the particulars."""

    PREEMPTION = "preemption"  # a higher-priority pod takes its room (queueing.preemption)
    GANG_ROOM = "gang-room"  # a pod group's room, evicting priced below waiting (control.gang_room)
    QUOTA_RECLAIM = "quota-reclaim"  # its team borrowed over quota; the lender wants it back
    BUDGET_DRAIN = "budget-drain"  # its team's hold-and-drain budget is spent
    DEADLINE_MOVE = "deadline-move"  # off spot to meet its deadline (control.deadline)
    SWAP = "swap"  # its on-demand node is swapped for spot (control.spot_swap)
    INTERRUPTION = "interruption"  # its node has an interruption notice (spot reclaim, ...)
    CONSOLIDATION = "consolidation"  # its node is consolidated away


@dataclass(frozen=True, slots=True)
class Preempt:
    """Evict ``job_id``'s running pods (``reason``: for events and logs); ``cause`` is the
    kind of move, not part of the decision's identity (two evictions of one job are one)."""

    job_id: str
    reason: str
    cause: Cause = field(default=Cause.PREEMPTION, compare=False)


@dataclass(frozen=True, slots=True)
class Launch:
    """Ask the cloud for ``count`` nodes of ``instance_type`` in ``zone`` on ``capacity_type``.

    ``max_price`` is the spot bid, where the strategy makes one (Aliyun ``SpotWithPriceLimit``,
    AWS's optional max price; None: pay the market price, capped at on-demand). ``mig_config``
    names the mig-manager config the nodes boot with (``nvidia.com/mig.config``; None: no MIG).
    ``all_or_none``: the nodes are one gang's, of no use to it in part — a node cap that leaves
    room for fewer launches none of them (``control.limits.within_cap``).
    """

    instance_type: str
    zone: str
    capacity_type: CapacityType
    count: int = 1
    max_price: Decimal | None = None
    reason: str = ""
    mig_config: str | None = None
    all_or_none: bool = False


@dataclass(frozen=True, slots=True)
class Terminate:
    """Drain and delete ``node``; ``only_if_empty``: skip it if pods landed there since the
    decision (emptiness consolidation deletes only empty nodes)."""

    node: str
    reason: str = ""
    only_if_empty: bool = False


@dataclass(frozen=True, slots=True)
class Requeue:
    """An interrupted job goes back to the queue (a recovery strategy's answer to a notice).

    ``resume_work_s``: the progress it restarts from; ``checkpoint_now``: spend the checkpoint
    cost before leaving the node (the work up to the notice is kept); ``ahead_of_new_work``:
    queued ahead of jobs that have not run yet; ``on_demand_only``: pinned to on-demand from now.
    """

    job_id: str
    from_checkpoint: bool
    reason: str = ""
    resume_work_s: float = 0.0
    checkpoint_now: bool = False
    ahead_of_new_work: bool = False
    on_demand_only: bool = False


@dataclass(frozen=True, slots=True)
class Pin:
    """Restrict a job to one capacity type (``None``: any it tolerates again). The deadline
    controller pins a job whose slack ran out to on-demand; a pinned job goes ahead of older
    work (``gpufleet.control.queue``) and no longer tolerates spot."""

    job_id: str
    capacity_type: CapacityType | None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Refuse:
    """Leave ``job_id`` pending, saying why: the scheduling cycle's answer for a unit it could
    not place (the live driver writes ``message`` on the pod's ``PodScheduled=False`` condition
    and one Event per new message; the simulator has no one to tell). ``never``: no node of
    this fleet could ever host it, as opposed to "not now"."""

    job_id: str
    message: str
    never: bool = False


@dataclass(frozen=True, slots=True)
class Cordon:
    """Mark ``node`` unschedulable (before draining it, or when its instance is going away)."""

    node: str
    reason: str = ""


Decision = Bind | Preempt | Launch | Terminate | Requeue | Pin | Refuse | Cordon
