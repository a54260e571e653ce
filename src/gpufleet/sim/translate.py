"""The simulator's translation of its jobs into the scheduling cycle's inputs
(``control.cycle``): a pending job as a :class:`~gpufleet.control.pending.PendingUnit`, a
running one as preemption's, reclaim's and gang room's victims
(:class:`~gpufleet.queueing.preemption.Victim`). The Kubernetes driver translates pods into the
same types (``k8s.schedule.cycle``).
"""

from __future__ import annotations

from gpufleet.control.admission import request_now
from gpufleet.control.pending import PendingUnit
from gpufleet.control.queue import effective_shape, is_urgent
from gpufleet.control.value_of_time import value_of_time
from gpufleet.decisions import CapacityType
from gpufleet.queueing.preemption import Victim
from gpufleet.sim.jobrun import JobRun


def job_unit(j: JobRun, milli: int = 0) -> PendingUnit:
    """The simulator's translation of a pending job for ``control.cycle``: its replicas are the
    members (``job#0``…, all needed together), its place in the queue the key
    ``control.queue`` gave it (priority, urgent, requeued, enqueued time, sequence), a pin to
    on-demand its ``pin``; every node is eligible (the request's constraints say the rest).
    Its team is its tenant, ``milli`` its size in GPU-equivalents (read only under quotas),
    its value of time the one its spec carries (``control.value_of_time``)."""
    sid = j.spec.job_id
    n = j.spec.replicas
    return PendingUnit(
        sid, j.req, j.spec.priority, tuple(f"{sid}#{r}" for r in range(n)), n,
        submit_s=j.enqueued_s, seq=j.key[-1], requeued=j.requeued, urgent=is_urgent(j),
        pin=CapacityType.ON_DEMAND if j.on_demand_only else None, shape=effective_shape(j),
        team=j.spec.tenant, milli=milli, value_of_time=value_of_time(j.spec))


def job_victim(j: JobRun, milli: int = 0) -> Victim:
    """A running single-replica job as a preemption (or, under quotas, reclaim) victim (a gang
    is not torn apart)."""
    bind, masks = j.binds[0]
    return Victim(j.spec.job_id, j.spec.priority, j.bound_s, request_now(j.req, j.on_demand_only),
                  bind, masks, team=j.spec.tenant, milli=milli)


def gang_victims(j: JobRun, milli: int) -> list[Victim]:
    """A running multi-replica job as reclaim sees it: one victim per replica, all of workload
    ``job_id`` (``milli``: the whole job's), so that reclaim takes the gang whole and priority
    preemption leaves it alone. The ``Preempt`` comes back under the job's id."""
    req = request_now(j.req, j.on_demand_only)
    n = len(j.binds)
    sid = j.spec.job_id
    return [Victim(sid, j.spec.priority, j.bound_s, req, bind, masks, team=j.spec.tenant,
                   milli=milli // n + (1 if r < milli % n else 0), workload=sid)
            for r, (bind, masks) in enumerate(j.binds)]
