"""A pod's deadline, read into the job model the control layer's deadline guard decides on.

* ``gpufleet.io/deadline``: when the pod must be done, RFC 3339 with a UTC offset
  (``2026-12-04T01:00:00Z``, ``2026-12-04T02:00:00+01:00``);
* ``gpufleet.io/duration`` (optional): the seconds of work it needs (``"3600"``). Without it the
  guard knows only the deadline and counts no work (it then protects the node's boot time
  alone).

Both are fields of :mod:`.pod_fields`: a value that does not parse refuses the pod with a message
naming the annotation, the value and what was expected (the scheduler writes it as the
PodScheduled condition and a FailedScheduling Event): a deadline pod silently treated as one
without would be gambled on spot.

The guard (:func:`gpufleet.control.deadline.pending_pin`) is the simulator's: a live pod is a job
that loses its work on a reclaim (a pod's checkpointing is not declared), so it may go on spot
only while a rerun from zero still fits — ``deadline − now ≥ 2·duration + provisioning_delay``
— and is pinned to on-demand once it does not (unless even a fresh node cannot make it). A
pinned pod no longer tolerates spot: placement keeps it off spot nodes and scale-up launches
on-demand for it. It is level-triggered: each cycle asks again from the pod and the clock.

Example (provisioning delay 10 s): duration 600 s, deadline in 900 s → 900 < 1,210: pinned
(and not hopeless: 900 ≥ 610); deadline in 3,600 s → spot allowed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpufleet.control.deadline import DeadlineView, GuardConfig, pending_pin
from gpufleet.traces.jobs import JobSpec

if TYPE_CHECKING:
    from gpufleet.k8s.translate.pods import PodInfo

# the safety net's tick: unused for pods, which are never checkpointing jobs (module doc)
NO_TICK_S = 0.0


def deadline_view(p: PodInfo, spot_ok: bool) -> DeadlineView | None:
    """The pod as the guard's job (submitted when created); None without a deadline."""
    if p.deadline_s is None or p.request is None:
        return None
    spec = JobSpec(job_id=p.key, submit_s=p.created_s, duration_s=p.work_s or 0.0,
                   request=p.request, checkpointable=False, interruptible=spot_ok,
                   deadline_s=p.deadline_s, restart_overhead_s=0.0)
    return DeadlineView(spec, pending=p.pending, running=bool(p.node_name),
                        on_demand_only=False, on_spot=False, done_s=0.0)


def pinned_on_demand(p: PodInfo, spot_ok: bool, cfg: GuardConfig | None, now: float) -> bool:
    """Whether the guard pins the pending pod to on-demand now (``cfg`` None: guards off; a pod
    that does not tolerate spot has nothing to be moved off)."""
    if cfg is None or not spot_ok:
        return False
    v = deadline_view(p, spot_ok)
    return v is not None and pending_pin(v, now, cfg, NO_TICK_S) is not None
