"""Room for a pending gang: wait for it, launch it, or evict for it — whichever costs least.

Why: a gang (the replicas of one distributed job, all or nothing, in one zone) that does not fit
is the expensive case of every scheduler. Scaling up at once (what every autoscaler does) buys
nodes that outlive their need as soon as the room it waited for frees; waiting (what a fixed
cluster does) idles the gang's GPUs' worth of work; evicting (what priority preemption does,
and never for a gang) throws away work since the victims' last checkpoints. No single answer is
right, so each is priced in the same unit — dollars, a GPU-hour valued at the on-demand $/GPU-h
of the cheapest type that fits the work (what buying that hour costs) — and the cheapest wins.

With ``g`` the gang's GPUs, ``v`` its $/GPU-h, ``P`` the provisioning delay and ``U`` the
scale-down horizon (``scale_down_unneeded_s``):

- **wait**: ``g·v·T``, ``T`` the time until running work frees room for the whole gang, from
  the running pods' declared work left (``gpufleet.io/duration``, the trace's duration — what
  the deadline guards read; nothing from the future: arrivals are not known, and a pod whose
  work left is unknown is taken never to end). ``T`` infinite: waiting is never chosen.
- **scale up**: ``g·v·P`` (the gang waits for the boot) + ``g·v·P`` (the new nodes are paid while
  they boot) + ``g·v·U`` once ``T`` is finite (when the room it would have waited for frees, one
  of the two idles until scale-down removes it). So with the same ``v`` throughout: scale up iff
  ``T > 2P + U`` — wait when the room frees within about 16 minutes (P 180 s, U 600 s).
  Not available on a fixed fleet or where no offer fits the gang.
- **preempt**: ``Σ gᵢ·vᵢ·lossᵢ + g·v·L`` over the evicted pods — each loses its work since its
  last checkpoint (or the checkpoint write, where it writes one on notice) plus its restart
  overhead (:func:`eviction_loss_s`, the loss a spot reclaim costs in ``market.spot_cost``),
  and the gang waits ``L``, the longest of their checkpoint writes. Only pods that can move
  are candidates (single pods that checkpoint on this fleet, of the gang's priority or lower,
  whose deadline a move cannot miss), and only a plan in which every victim fits again in the
  room left after the gang counts: an eviction that only moves the wait to the victims is not
  cheaper, it is a priority decision, and ``queueing.preemption`` makes those. So preemption
  here is defragmentation: the room is there, in the wrong places.

**Value of time** (``control.value_of_time``): the owners of the gang and of its victims pay
for delay too, ``w`` $ per GPU-hour of it (the gang's) and ``wᵢ`` (each victim's). Each hour of
delay a choice imposes is then priced at ``v + w``: wait adds ``g·w·T``, scale up ``g·w·P``
(the gang's wait for the boot; the boot's bill and the surplus are capacity, not delay),
preempt ``Σ gᵢ·wᵢ·lossᵢ + g·w·L``. Each is a term added to the prices above, 0 with ``w`` = 0.
A latency-sensitive pod is never a victim (``control.views.may_move``).

Ties go to the least disruptive choice (wait, then scale up, then preempt). A choice holds —
the drivers keep it in a :class:`GangRoomBook` — until the gang starts, or for wait until ``T``
has passed (the gang is then priced again), or for preempt until its victims have left and a
grace period after (the gang's rows are reserved for it meanwhile: no other pod may take the
room the eviction makes). While a gang waits, or waits for its victims, scale-up does not
launch for it.

Worked example (hand-checked in ``tests/control/test_gang_room.py``): a 16-GPU gang at 3.06
$/GPU-h (a p3's on-demand rate), P = 180 s, U = 600 s: room frees in 30 min → wait 16·3.06·0.5
= $24.48, scale up 16·3.06·(960/3600) = $13.06 → scale up. Room in 10 min → wait $8.16 → wait.
Two 4-GPU pods that checkpointed 5 min ago (restart 120 s, write 30 s on notice) can move into
holes elsewhere → preempt 8·3.06·(150/3600) + 16·3.06·(30/3600) = $1.02 + $0.41 = $1.43 →
preempt. With the gang's owner valuing delay at w = 10 $/GPU-h: wait 30 min 24.48 +
16·10·0.5 = $104.48, scale up 13.06 + 16·10·(180/3600) = $21.06 → scale up; wait 10 min 8.16
+ 26.67 = $34.83 > scale up $21.06 → scale up (at w = 0 it waited). Victims valuing their delay
at 20 $/GPU-h: preempt 1.43 + 8·20·(150/3600) + 16·10·(30/3600) = 1.43 + 6.67 + 1.33 = $9.43.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from gpufleet.decisions import Bind
from gpufleet.placement import PlacementResult
from gpufleet.placement.mig import bind_masks
from gpufleet.placement.policy import Policy
from gpufleet.provisioning import Offer
from gpufleet.provisioning.binpack import fits_shape
from gpufleet.queueing.preemption import Victim
from gpufleet.queueing.statement import Statement
from gpufleet.state import FleetState, ResourceRequest

INF = float("inf")
HOUR = 3600.0
# candidate nodes an eviction plan may empty (cheapest first): bounds a what-if's cost
MAX_NODES_TRIED = 16
# after the victims have left, how long their room stays reserved for the gang
RESERVE_GRACE_S = 60.0
# a gang that waits with no room expected, a launch or an eviction possible but no cheaper, is
# priced again after this (with none of them possible nothing is booked: ``GangRoomBook.record``)
REPRICE_S = 600.0


class Room(Enum):
    """What a pending gang does about the room it lacks."""

    WAIT = "wait"
    SCALE_UP = "scale-up"
    PREEMPT = "preempt"


@dataclass(frozen=True, slots=True)
class GangRoomSettings:
    """The fleet side of the prices: ``launch`` (the fleet can scale up), the provisioning
    delay ``P`` and the scale-down horizon ``U``."""

    launch: bool
    provisioning_delay_s: float
    unneeded_s: float


@dataclass(frozen=True, slots=True)
class Costs:
    """The three prices of one gang (USD; None: not possible) and what they rest on."""

    wait_usd: float
    scale_up_usd: float | None
    preempt_usd: float | None
    wait_s: float  # until running work frees the room (inf: not expected)
    victims: tuple[str, ...] = ()  # the eviction plan's pods (preempt)
    nodes: tuple[str, ...] = ()  # the nodes the gang would take after it (its reservation)
    leave_s: float = 0.0  # until the victims are gone (their checkpoint writes)

    @property
    def choice(self) -> Room:
        return choose(self.wait_usd, self.scale_up_usd, self.preempt_usd)


def choose(wait_usd: float, scale_up_usd: float | None, preempt_usd: float | None) -> Room:
    """The cheapest; ties to the least disruptive (wait, scale up, preempt). With nothing
    possible (no room expected, no launch, no eviction) the gang waits."""
    best, room = wait_usd, Room.WAIT
    if scale_up_usd is not None and scale_up_usd < best:
        best, room = scale_up_usd, Room.SCALE_UP
    if preempt_usd is not None and preempt_usd < best:
        room = Room.PREEMPT
    return room


def wait_usd(gpus: float, usd_per_gpu_h: float, wait_s: float,
             delay_usd_per_gpu_h: float = 0.0) -> float:
    """The queued GPUs' value over the wait, plus their owner's value of time over it
    (``delay_usd_per_gpu_h``)."""
    if math.isinf(wait_s):
        return INF
    return gpus * usd_per_gpu_h * wait_s / HOUR + gpus * delay_usd_per_gpu_h * wait_s / HOUR


def scale_up_usd(gpus: float, usd_per_gpu_h: float, s: GangRoomSettings,
                 wait_s: float, delay_usd_per_gpu_h: float = 0.0) -> float | None:
    """The boot's wait, the boot's bill, and the surplus room until scale-down once the room
    the gang would have waited for frees (module docstring); plus the owner's value of time
    over the boot's wait (``delay_usd_per_gpu_h``)."""
    if not s.launch:
        return None
    surplus = 0.0 if math.isinf(wait_s) else s.unneeded_s
    return (gpus * usd_per_gpu_h * (2 * s.provisioning_delay_s + surplus) / HOUR
            + gpus * delay_usd_per_gpu_h * s.provisioning_delay_s / HOUR)


def eviction_loss_s(lost_work_s: float, write_s: float, restart_s: float) -> float:
    """Seconds of an evicted pod's GPUs that buy nothing: the work its recovery does not keep
    (``lost_work_s``: since its last checkpoint, or none when it writes one on notice), the
    checkpoint it writes on the way out (``write_s``) and its restart overhead."""
    return lost_work_s + write_s + restart_s


def gpu_hour_usd(req: ResourceRequest, offers: Iterable[Offer]) -> float | None:
    """What an hour of one of ``req``'s GPUs is worth: the lowest on-demand $/GPU-h of the
    offers whose node fits it (None: none does)."""
    best = None
    for o in offers:
        if o.capacity_type.value != "on-demand" or o.shape.gpus == 0:
            continue
        if (req.mig_profile is not None) != o.shape.mig or not fits_shape(req, o.shape):
            continue
        rate = o.usd_per_hour / o.shape.gpus
        if best is None or rate < best:
            best = rate
    return best


def request_gpus(req: ResourceRequest) -> float:
    """GPUs of one replica for the prices: a fraction is that fraction, a MIG slice 1/7."""
    if req.mig_profile is not None:
        return 1 / 7
    return req.num_gpu * req.gpu_milli / 1000


@dataclass(frozen=True, slots=True)
class Movable:
    """A running pod an eviction may take for a gang: its victim record, what evicting it
    loses (work-seconds per GPU, :func:`eviction_loss_s`), how long it takes to leave and its
    owner's value of time ($ per GPU-hour of delay, ``control.value_of_time``)."""

    victim: Victim
    loss_s: float
    leave_s: float = 0.0
    value_of_time: float = 0.0


def eviction_usd(m: Movable, usd_per_gpu_h: Callable[[ResourceRequest], float | None]) -> float:
    """What evicting ``m`` loses, in dollars: its GPUs × their rate × its loss, plus its GPUs ×
    its owner's value of time × its loss."""
    rate = usd_per_gpu_h(m.victim.request) or 0.0
    gpus = request_gpus(m.victim.request)
    return gpus * rate * m.loss_s / HOUR + gpus * m.value_of_time * m.loss_s / HOUR


Place = Callable[[], list[Bind] | None]


def room_frees_in(state: FleetState, place: Place, running: Sequence[Victim],
                  ends: Mapping[str, float], now: float) -> float:
    """Seconds until the running pods that end first have freed room for the gang
    (``place``: the gang's placement against the state as it is then), by bisection over the
    pods in order of their expected end (``ends``: job id → time; a pod not in it never
    ends). Releasing more pods never takes room away, so the first prefix that fits is found
    by galloping then bisection. Inf when even all of them ending would not make room."""
    known = sorted((v for v in running if v.job_id in ends),
                   key=lambda v: (ends[v.job_id], v.job_id, v.bind.node))
    if not known:
        return INF

    def fits_after(k: int) -> bool:
        with Statement(state) as what_if:
            for v in known[:k]:
                what_if.release(v.request, v.bind, v.masks)
            return place() is not None

    # gallop (release 1, 2, 4, … more, cumulatively) to bracket the answer, then bisect the
    # bracket: O(answer · log answer) releases, and the room a gang waits for is usually near
    lo = hi = 0
    with Statement(state) as what_if:
        step = 1
        while hi < len(known):
            lo, hi = hi, min(len(known), hi + step)
            for v in known[lo:hi]:
                what_if.release(v.request, v.bind, v.masks)
            if place() is not None:
                break
            step *= 2
        else:
            return INF
    lo += 1  # the first prefix length not yet known to fail
    while lo < hi:
        mid = (lo + hi) // 2
        if fits_after(mid):
            hi = mid
        else:
            lo = mid + 1
    return max(0.0, ends[known[hi - 1].job_id] - now)


def free_gpu_milli(state: FleetState, eligible: np.ndarray | None = None) -> int:
    """Free milli-GPU on the active (and ``eligible``) rows."""
    n = state.n
    rows = state.active[:n] if eligible is None else state.active[:n] & eligible[:n]
    free = state.free_milli[:n][rows]
    return int(free[free > 0].sum())


def eviction_plan(state: FleetState, place: Place, request: ResourceRequest,
                  movable: Sequence[Movable], policy: Policy, rng: np.random.Generator,
                  usd_per_gpu_h: Callable[[ResourceRequest], float | None],
                  need_milli: int = 0, eligible: np.ndarray | None = None,
                  ) -> tuple[list[Movable], list[Bind]] | None:
    """The cheapest set of movable pods to evict so that the gang fits *and* every one of
    them fits again elsewhere afterwards, with the gang's binds; None when there is none.

    Nodes are emptied of their movable pods cheapest first (the $ their eviction loses per
    GPU it frees) until the gang fits, at most :data:`MAX_NODES_TRIED`; then each victim is
    given back, dearest first, wherever the gang still fits without it (kube-scheduler's
    reprieve); then the gang is placed and the victims re-placed one by one on what is left.
    Everything is a what-if: the state comes back unchanged. Victims only move, so a fleet
    with fewer free GPUs (``free_gpu_milli``) than the gang needs (``need_milli``) has no plan:
    that is checked first, without a trial."""
    if need_milli > free_gpu_milli(state, eligible):
        return None
    by_node: dict[str, list[Movable]] = {}
    for m in movable:
        by_node.setdefault(m.victim.bind.node, []).append(m)

    def usd(m: Movable) -> float:
        return eviction_usd(m, usd_per_gpu_h)

    def per_gpu(node: str) -> tuple[float, str]:
        ms = by_node[node]
        gpus = sum(request_gpus(m.victim.request) for m in ms) or 1.0
        return (sum(usd(m) for m in ms) / gpus, node)

    order = sorted(by_node, key=per_gpu)[:MAX_NODES_TRIED]
    with Statement(state) as what_if:
        evicted: list[Movable] = []
        fits = False
        for node in order:
            for m in by_node[node]:
                v = m.victim
                what_if.release(v.request, v.bind, v.masks)
                evicted.append(m)
            if place() is not None:
                fits = True
                break
        if not fits:
            return None
        kept: list[Movable] = []
        for m in sorted(evicted, key=lambda m: (-usd(m), m.victim.job_id)):
            v = m.victim
            what_if.allocate(v.request, v.bind, v.masks)
            if place() is None:
                what_if.release(v.request, v.bind, v.masks)
                kept.append(m)
        binds = place()
        assert binds is not None  # the last reprieve test left it fitting
        for b in binds:
            what_if.allocate(request, b, bind_masks(state, b, policy.catalog))
        for m in sorted(kept, key=lambda m: m.victim.job_id):
            res = policy.place(state, m.victim.request, rng)
            if not isinstance(res, PlacementResult):
                return None  # a victim would have nowhere to go: the eviction only moves a wait
            b = res.to_bind(state, m.victim.job_id)
            what_if.allocate(m.victim.request, b, bind_masks(state, b, policy.catalog))
        return sorted(kept, key=lambda m: m.victim.job_id), binds


@dataclass(slots=True)
class Decided:
    room: Room
    until_s: float  # wait: when to price it again; preempt: when its reservation lapses
    nodes: tuple[str, ...] = ()


@dataclass(slots=True)
class GangRoomBook:
    """A driver's memory of each pending gang's choice (see the module docstring), and how
    often each was chosen (``counts``: every pricing's outcome, a gang priced again counts
    again).

    A long queue holds a choice for each of its gangs, and a driver asks ``reserved`` and
    ``next_due`` every pass: both read indices kept as choices are booked (the gangs whose
    choice is a preempt; a heap of lapse times, an entry dropped when it reaches the top and
    its choice has been replaced), so a pass does not walk every choice."""

    decided: dict[str, Decided] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=lambda: {r.value: 0 for r in Room})
    _preempting: dict[str, None] = field(default_factory=dict, repr=False, compare=False)
    _lapses: list[tuple[float, int, str, Decided]] = field(default_factory=list, repr=False,
                                                            compare=False)
    _booked: int = field(default=0, repr=False, compare=False)

    def due(self, gang: str, now: float) -> bool:
        """Whether the gang is to be priced now: never priced, or its wait or reservation is
        over. A scale-up choice stands until the gang starts (its nodes are on the way)."""
        d = self.decided.get(gang)
        return d is None or (d.room is not Room.SCALE_UP and now >= d.until_s)

    def record(self, gang: str, costs: Costs, now: float) -> Room:
        """Book a pricing's choice. With nothing possible — no room expected, no launch, no
        eviction — nothing is booked: a timer to price it again could only find the same
        answer until the fleet changes, and a change brings a pass of its own (a timer would
        keep a fleet that can never hold the gang busy for ever)."""
        room = costs.choice
        self.counts[room.value] += 1
        if math.isinf(costs.wait_s) and costs.scale_up_usd is None and costs.preempt_usd is None:
            self.started(gang)
            return room
        until = INF
        if room is Room.WAIT:  # priced again when the room is due, or after REPRICE_S
            until = now + (REPRICE_S if math.isinf(costs.wait_s) else costs.wait_s)
        elif room is Room.PREEMPT:
            until = now + costs.leave_s + RESERVE_GRACE_S
        d = self.decided[gang] = Decided(room, until,
                                         costs.nodes if room is Room.PREEMPT else ())
        if room is Room.PREEMPT:
            self._preempting[gang] = None
        else:
            self._preempting.pop(gang, None)
        if room is not Room.SCALE_UP and not math.isinf(until):
            self._booked += 1
            heapq.heappush(self._lapses, (until, self._booked, gang, d))
        return room

    def started(self, gang: str) -> None:
        self.decided.pop(gang, None)
        self._preempting.pop(gang, None)

    def apply(self, started: Iterable[str], priced: Mapping[str, Costs],
              now: float) -> list[tuple[str, Costs, Room]]:
        """One cycle's outcome, as both drivers book it: the units that started are forgotten,
        each gang priced this cycle records its choice; returns (gang, costs, choice) per
        pricing for the driver's own reaction (a scan, a metric, a log line).

        A choice that had lapsed by ``now`` was due in this cycle, which is the pass its lapse
        asked for: its lapse is spent, whether the cycle priced the gang again or not (a gang
        refused by its quota is not priced). Left booked, it would ask for another pass at the
        same instant, which would not price it either, for ever; it stays due (``due``) for
        the next pass the fleet's changes bring."""
        lapses = self._lapses
        while lapses and lapses[0][0] <= now:
            heapq.heappop(lapses)
        for uid in started:
            self.started(uid)
        return [(gid, costs, self.record(gid, costs, now)) for gid, costs in priced.items()]

    def holds_scale_up(self, gang: str, now: float) -> bool:
        """Scale-up does not launch for a gang that waits or whose victims are leaving."""
        d = self.decided.get(gang)
        return d is not None and d.room is not Room.SCALE_UP and now < d.until_s

    def reserved(self, now: float) -> dict[str, tuple[str, ...]]:
        """gang → the nodes reserved for it (a preempt choice not yet lapsed)."""
        out = {}
        for g in self._preempting:
            d = self.decided[g]
            if now < d.until_s:
                out[g] = d.nodes
        return out

    def next_due(self) -> float | None:
        """The earliest time a choice lapses (a pass is due then), None if none will."""
        lapses = self._lapses
        while lapses and self.decided.get(lapses[0][2]) is not lapses[0][3]:
            heapq.heappop(lapses)  # replaced or forgotten since it was booked
        return lapses[0][0] if lapses else None


@dataclass(frozen=True, slots=True)
class GangRoomInput:
    """The gang-room side of a cycle (``control.cycle`` step 7): the fleet's settings, the
    driver's book (read: which gangs are due, which rows are reserved), what a GPU-hour of a
    request is worth, and the running pods — every replica, each with its expected end where
    its work left is known (``ends``) and, for the pods an eviction may take, their loss."""

    settings: GangRoomSettings
    book: GangRoomBook
    usd_per_gpu_h: Callable[[ResourceRequest], float | None]
    running: Sequence[Victim] = ()
    ends: Mapping[str, float] = field(default_factory=dict)
    movable: Sequence[Movable] = ()
