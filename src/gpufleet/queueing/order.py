"""Who goes next: priority, then deadline jobs short of slack, then recovered work, then FIFO.

The queue order is a sort key so a driver can keep its pending list sorted incrementally
(``bisect.insort``) instead of re-sorting a large queue on every event. Within a priority, jobs
requeued after an interruption go ahead of new work: they already paid for queueing once and
hold checkpoints that age. Ahead of both go jobs the driver marks ``urgent``: deadline jobs whose
slack has run out so that they were pinned to on-demand — otherwise the on-demand node launched
for one is taken, when it boots, by whichever older job fits it first.

A scheduling pass walks the queue in order and lets later jobs start when an earlier one does not
fit (backfill). Two rules keep the pass cheap and fair:

* once a *shape* (same request, same constraints) has failed in a pass, later jobs of that shape
  are skipped without another placement call — they cannot fit either; the pass stops as soon as
  every shape present in the queue has failed;
* ``starvation_s``: a head job that has waited longer than this stops backfill altogether, so a
  stream of small jobs cannot starve a big gang forever (a reservation without a runtime
  estimate). ``None`` (default) = pure backfill, which autoscaling makes safe: the provisioner
  launches capacity for the head job anyway.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

# (-priority, urgent?, requeued?, enqueued_s, seq): the tuple compares in that order.
QueueKey = tuple[int, int, int, float, int]

JobId = TypeVar("JobId")  # a driver's handle on a job: the simulator's index, a live pod group id
Shape = TypeVar("Shape", bound=Hashable)  # equal shapes cannot fit where the other failed


def queue_key(
    priority: int, requeued: bool, enqueued_s: float, seq: int, urgent: bool = False
) -> QueueKey:
    """Sort key: higher priority first, then urgent, then requeued work, then arrival order."""
    return (-priority, 0 if urgent else 1, 0 if requeued else 1, enqueued_s, seq)


@dataclass(slots=True)
class PassResult(Generic[JobId, Shape]):
    started: list[JobId] = field(default_factory=list)
    blocked: set[Shape] = field(default_factory=set)
    stopped_for: JobId | None = None  # job id of a starving head that stopped backfill


@dataclass(frozen=True, slots=True)
class BackfillPass:
    starvation_s: float | None = None

    def run(
        self,
        ordered: Iterable[tuple[JobId, Shape, float]],
        now: float,
        try_place: Callable[[JobId], bool],
        shapes_present: int,
        blocked: set[Shape] | None = None,
    ) -> PassResult[JobId, Shape]:
        """Walk ``(job_id, shape, enqueued_s)`` in queue order; ``try_place`` applies a fit.

        ``blocked`` carries shapes already known not to fit (capacity has not grown since).
        """
        res: PassResult[JobId, Shape] = PassResult(blocked=set(blocked or ()))
        head_seen = False
        for job_id, shape, enqueued_s in ordered:
            if len(res.blocked) >= shapes_present:
                break
            if shape in res.blocked:
                if not head_seen:
                    head_seen = True
                    if self._starving(now, enqueued_s):
                        res.stopped_for = job_id
                        break
                continue
            if try_place(job_id):
                res.started.append(job_id)
                continue
            res.blocked.add(shape)
            if not head_seen:
                head_seen = True
                if self._starving(now, enqueued_s):
                    res.stopped_for = job_id
                    break
        return res

    def _starving(self, now: float, enqueued_s: float) -> bool:
        return self.starvation_s is not None and now - enqueued_s > self.starvation_s
