"""Recovery strategies: what a job does when its node gets a termination notice.

A registry of named strategies (SkyPilot's ``recovery_strategy.py`` habit: a decorator registry,
one default, an unknown name fails listing the valid ones) — but each strategy is a pure function
of a :class:`NoticeView`; the provider's notice length and the clock come in as data, nothing is
called. Each returns a ``Requeue`` decision that the driver applies.

Example sequences (notice 120 s, checkpoint cost 30 s, last checkpoint at 3,000 s of work, now
at 3,400 s of work):

* ``checkpoint-requeue`` (default): 30 ≤ 120 → write a checkpoint now, resume from 3,400 s, ahead
  of new work, on any fitting node. With a 5-minute checkpoint cost the notice is too short: it
  resumes from 3,000 s (400 s of work lost).
* ``restart-from-zero`` (the static baseline): resume from 0 s, queued like new work.
* ``failover-on-demand``: like ``checkpoint-requeue``, and after ``max_spot_interruptions``
  notices the job is pinned to on-demand capacity (SkyPilot's FAILOVER then "on-demand" mode).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from gpufleet.decisions import Requeue
from gpufleet.registry import Registry


@dataclass(frozen=True, slots=True)
class NoticeView:
    """What a strategy may know about one job at a notice."""

    job_id: str
    checkpointable: bool
    work_done_s: float  # progress at the notice
    last_checkpoint_s: float  # progress saved by the last completed checkpoint
    checkpoint_cost_s: float
    notice_s: float  # time until the node is gone
    interruptions: int  # including this one
    on_spot: bool = True


class RecoveryStrategy(Protocol):
    @property
    def name(self) -> str:
        """The strategy's registry name (read-only: strategies are frozen)."""
        ...

    def on_notice(self, view: NoticeView) -> Requeue: ...


DEFAULT_RECOVERY = "checkpoint-requeue"
Factory = Callable[[], RecoveryStrategy]
STRATEGIES: Registry[Factory] = Registry(
    "recovery strategy", field="recovery", default=DEFAULT_RECOVERY
)
register = STRATEGIES.register


def get_recovery_strategy(name: str = DEFAULT_RECOVERY) -> RecoveryStrategy:
    return STRATEGIES.get(name)()


def list_recovery_strategies() -> list[str]:
    return STRATEGIES.names()


def _resume_point(v: NoticeView) -> tuple[float, bool]:
    """(progress kept, whether to checkpoint now)."""
    if not v.checkpointable:
        return 0.0, False
    if v.checkpoint_cost_s <= v.notice_s:
        return v.work_done_s, True
    return v.last_checkpoint_s, False


@register("checkpoint-requeue")
@dataclass(frozen=True)
class CheckpointRequeue:
    name: str = "checkpoint-requeue"

    def on_notice(self, view: NoticeView) -> Requeue:
        resume, now = _resume_point(view)
        why = "checkpointed at notice" if now else "resumed from last checkpoint"
        return Requeue(view.job_id, from_checkpoint=resume > 0, reason=why, resume_work_s=resume,
                       checkpoint_now=now, ahead_of_new_work=True)


@register("restart-from-zero")
@dataclass(frozen=True)
class RestartFromZero:
    name: str = "restart-from-zero"

    def on_notice(self, view: NoticeView) -> Requeue:
        return Requeue(view.job_id, from_checkpoint=False, reason="restart from zero")


@register("failover-on-demand")
@dataclass(frozen=True)
class FailoverOnDemand:
    max_spot_interruptions: int = 2
    name: str = "failover-on-demand"

    def on_notice(self, view: NoticeView) -> Requeue:
        resume, now = _resume_point(view)
        pin = view.on_spot and view.interruptions >= self.max_spot_interruptions
        why = "pinned to on-demand after repeated notices" if pin else "requeued"
        return Requeue(view.job_id, from_checkpoint=resume > 0, reason=why, resume_work_s=resume,
                       checkpoint_now=now, ahead_of_new_work=True, on_demand_only=pin)
