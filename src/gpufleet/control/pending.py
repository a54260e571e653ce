"""What the scheduling cycle orders: a pending unit (a job, a pod, or the pending members of a
gang) in driver-neutral terms, its blocked-shape key and the request it asks for right now.

The simulator builds units from its job records (``sim.translate``), the Kubernetes driver from
pods (``k8s.schedule.cycle``); ``control.cycle`` orders and places them and ``control.reclaim``
makes room for them.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

import numpy as np

from gpufleet.control.admission import request_now
from gpufleet.decisions import CapacityType
from gpufleet.queueing import queue_key
from gpufleet.state import ResourceRequest

# the queue key (``queueing.queue_key``) followed by the unit's id, so that ties are total
UnitKey = tuple[int, int, int, float, int, str]


@dataclass(frozen=True, slots=True)
class PendingUnit:
    """What the queue orders: one job or pod, or the pending members of one gang.

    ``members``: the ids the ``Bind``s carry, one per member to place (a simulated job's
    replicas ``job#0``…, a gang's pods; () = the unit's own id); ``need``: how many members
    must be placed together (a gang's ``min-available`` less those already running; 1 for a
    lone job); ``gang``: all-or-nothing admission even for one pending member (a pod group
    whose other members run); ``pin``: the
    capacity type the job is restricted to (on-demand: it loses its spot toleration);
    ``eligible``: the state rows it may use (None: every row); ``refusal``: why it cannot be
    placed at all (an unreadable request), None when it can be tried; ``shape``: units of one
    shape fail together (None: the request, pin, member count, need and mask decide it);
    ``team`` / ``milli``: the team it runs for and its size in milli-GPU-equivalents
    (``queueing.teams.shares``), read only when the cycle has a quota input;
    ``value_of_time``: its owner's $ per GPU-hour of delay (``control.value_of_time``), read by
    the gang room's prices.
    """

    id: str
    request: ResourceRequest | None
    priority: int = 0
    members: tuple[str, ...] = ()
    need: int = 1
    gang: bool = False
    submit_s: float = 0.0
    seq: int = 0
    requeued: bool = False
    urgent: bool = False
    pin: CapacityType | None = None
    eligible: np.ndarray | None = None
    refusal: str | None = None
    preempt_never: bool = False
    shape: Hashable | None = None
    team: str | None = None
    milli: int = 0
    value_of_time: float = 0.0
    key: UnitKey = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", (*queue_key(
            self.priority, self.requeued, self.submit_s, self.seq, self.urgent), self.id))

    @property
    def placed_ids(self) -> tuple[str, ...]:
        return self.members or (self.id,)

    @property
    def is_gang(self) -> bool:
        return self.gang or len(self.placed_ids) > 1 or self.need > 1


def unit_shape(u: PendingUnit) -> Hashable:
    """The unit's blocked-shape key (see :class:`PendingUnit`)."""
    if u.shape is not None:
        return u.shape
    if u.refusal is not None or u.request is None:
        return ("refused", u.id)
    mask = None if u.eligible is None else u.eligible.tobytes()
    return (u.request, u.pin, len(u.placed_ids), u.need, u.gang, mask)


def unit_request(u: PendingUnit) -> ResourceRequest:
    """What the unit asks for now: a pin to on-demand drops the spot toleration
    (``control.admission.request_now``)."""
    assert u.request is not None
    return request_now(u.request, u.pin == CapacityType.ON_DEMAND)
