"""One scheduling cycle: the pending units in queue order → binds, evictions and refusals.

The rule both drivers run, on driver-neutral inputs: the ``FleetState`` (running work already
allocated), the pending units (``control.pending.PendingUnit``: a job, a pod, or the pending
members of a gang, with a node-eligibility mask over the state's rows instead of any driver's
selector types) and the running victims preemption may evict. The simulator
(``sim.translate``) builds units from its job records, the Kubernetes driver
(``k8s.schedule.cycle``) from pods; both apply the returned :class:`CyclePlan`. In order:

1. *Queue order* (``queueing.queue_key``): higher priority first, then urgent units (deadline
   jobs pinned to on-demand), then requeued work (interrupted jobs that already queued once and
   hold an ageing checkpoint), then submit time, then the driver's sequence, then the id.
2. *Backfill* (``queueing.BackfillPass``): walk the queue, let later units start when an earlier
   one does not fit; a shape that failed is not tried again this cycle (nor in later cycles while
   the driver passes it back in ``blocked``: capacity has not grown since); ``starvation_s``
   stops backfill behind a head that waited too long.
3. *Placement and gangs* (``control.placing``): one unit with one member is one
   ``policy.place``; a gang (several members, or fewer pending than it needs) gets every member
   placed in one zone or none (``queueing.gang.place_gang``). A pin to on-demand drops the spot
   toleration for the placement (``control.admission.request_now``); the eligibility mask
   hides the other nodes.
4. *Priority preemption* (``queueing.preemption``): for the first unplaced unit in queue order
   (not a gang, not ``preempt_never``) that some strictly lower-priority victim could make room
   for, at most one preemption per cycle, and none while an earlier eviction is still in
   progress (``evicting``: its pod still holds the room the preemptor waits for).
5. *Team quotas* (only with a ``quota`` input, :class:`QuotaInput`; ``queueing.teams.quota``):
   each unit carries its ``team`` and size in milli-GPU-equivalents. Order: units that keep
   their team within its nominal quota (counted cumulatively in queue order over such units
   only), units that *straddle* it (the team below its nominal before the unit, above after;
   they do not count towards the quota for the units behind them, which may start if they
   cannot), and units of unmanaged teams first, in queue order; then units that would borrow,
   team by team in ``fair_order`` (smallest decayed dominant share first), queue order within
   a team. As the pass reaches a unit its team's ``verdict`` is asked against the book as
   updated by the units admitted so far: a BLOCKED unit is refused with the verdict's reason
   and skipped — it never enters backfill, so it neither blocks a shape nor stops the pass for
   another team. If no preemption was chosen and none is in progress, the unplaced
   within-quota and straddling units whose room is held by other teams' borrowed work get
   *reclaims* (``control.reclaim``), in queue order, each planned on the fleet as the reclaims
   before it leave it; ``Preempt`` reasons "reclaim: team X borrowed". The pass's own
   unstarted borrowing binds are the newest victims: they are unbound, not evicted (refused
   "reclaim: its room goes to work within its team's quota"), and a unit whose room they alone
   make (no running work evicted before it) binds in this plan. Priority preemption (step 4)
   then stays within a team, so another team's work is evicted only by reclaim, and only what
   it borrowed. A running gang (victims sharing a ``workload``) is one borrowed workload:
   reclaim takes all of its members or none, and priority preemption never takes a member.
   Per-GPU-model quotas (``TeamQuota.models``): as the pass reaches a unit of such a team, the
   rows of every GPU model whose ``model_verdict`` refuses it are cut from its eligibility
   mask; a unit left with no model is refused with the first model's reason. Admission books
   the model it landed on.
6. *Team budgets* (``QuotaInput.budgets``: ``queueing.teams.budget.budget_verdicts`` of the
   teams whose budget is about to run out, ``restrictions``). ``hold``: the team's pending
   units are refused with the verdict's reason and skipped like quota-blocked ones (running
   work is untouched). ``spot-only``: the team's units ask for spot (``request_on_spot``: the
   toleration) and may use only spot rows — the eligibility mask is cut to nodes whose capacity
   type is spot, and the pin is spot (a deadline guard's pin to on-demand gives way: the budget
   is the harder limit). Every pending unit counts as new work, a requeued one too: it would
   start again and spend again. ``hold-and-drain`` holds new work as ``hold`` does, and once
   the team's budget is spent (``BudgetVerdict.draining``) every running victim of the team is
   evicted (``Preempt`` with the verdict's reason; a gang's members all, its id once) — with
   or without pending units, whatever else is evicting (the drain does not wait for room to
   free: it stops spend), so a driver runs the cycle while a team drains even with an empty
   queue. Victims already leaving are the driver's to leave out (they are not evicted twice).

7. *Gang room* (only with a ``gang_room`` input, ``control.gang_room``): every unplaced gang
   the driver's book says is due is priced three ways — wait for running work to free its
   room, scale up, or evict pods that can move into the holes elsewhere — and the cheapest is
   returned in ``CyclePlan.gang_room``; a preempt choice (at most one per cycle, none while
   another eviction is planned or in progress) adds its victims to the evictions. Before the
   pass, the rows an earlier preempt choice reserved are hidden from every other unit and
   the gang they are reserved for goes first.

Placed units are allocated into the state as the pass goes — one ``queueing.statement``
``Statement``, so later units see them — and the statement is discarded before returning: the
state comes back unchanged and the driver applies the plan's ``Bind``s itself.

*One answer per shape.* A long queue asks the same few questions of thousands of units, so the
pass answers each once per shape (``unit_shape``; each shape hashed once per pass and then
compared as a small number): backfill's placement (step 2), a blocked shape's refusal text and
never-schedulable flag (written once, given to each of its units), a priority-preemption
what-if that found no victims (not asked again for a later unit with the same request,
eligible rows, priority and team: the same victims on the same fleet), reclaim's what-ifs per
(team, size, shape) (``control.reclaim``) and the quota verdicts per (team, size) until an
admission changes the book. ``by_shape=False`` asks every unit instead; the plan is the same
(``tests/control/test_cycle_by_shape.py``), only its cost grows with the queue.

Worked example (two T4 GPUs, one running priority-0 pod on GPU 0): pending ``a`` (priority 0,
1 GPU, submitted t=5), ``b`` (priority 0, 1 GPU, requeued, t=9), ``c`` (priority 5, 2 GPUs,
t=20). Order: c (priority), b (requeued), a. c does not fit (one GPU free) → its shape is
blocked; b binds GPU 1; a does not fit. Preemption for c: evicting the running pod would leave
only GPU 0 free (b holds GPU 1 now) → no plan. Binds: b; refusals: c, a.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

import numpy as np

from gpufleet.control.admission import request_on_spot
from gpufleet.control.gang_room import (
    HOUR,
    Costs,
    GangRoomInput,
    Room,
    eviction_plan,
    eviction_usd,
    request_gpus,
    room_frees_in,
    scale_up_usd,
    wait_usd,
)
from gpufleet.control.pending import PendingUnit, UnitKey, unit_request, unit_shape
from gpufleet.control.placing import Never, Reason, only_eligible, place_unit
from gpufleet.control.reclaim import plan_reclaims
from gpufleet.decisions import Bind, CapacityType, Cause, Preempt, Refuse
from gpufleet.placement.mig import bind_masks
from gpufleet.placement.policy import Policy
from gpufleet.queueing import BackfillPass
from gpufleet.queueing.preemption import Victim, plan_preemption
from gpufleet.queueing.statement import Statement
from gpufleet.queueing.teams.budget import HOLDING, BudgetVerdict
from gpufleet.queueing.teams.fairshare import UsageHistory, fair_order
from gpufleet.queueing.teams.quota import Admission, QuotaBook, Verdict
from gpufleet.state import FleetState

D = TypeVar("D")

# ``PendingUnit`` (``control.pending``) and ``Victim`` (``queueing.preemption``) are the
# inputs ``plan_cycle`` takes: the drivers build them next to the call
__all__ = ["DRAIN", "CyclePlan", "PendingUnit", "QuotaInput", "Victim", "plan_cycle"]

DRAIN = "budget drain"  # what a Preempt of step 6's drain says first


@dataclass(frozen=True, slots=True)
class QuotaInput:
    """The quota side of a cycle: the book (nominal quotas and the usage of running work, in
    milli-GPU-equivalents; copied, never changed), the decayed usage history that orders
    borrowing teams (None: every team's share is 0, so borrowing teams go by name) and the
    budget verdicts of the teams whose new work is restricted (``hold``, ``hold-and-drain``,
    ``spot-only``, step 6;
    other actions are ignored). A team may have a budget and no quota (not in the book)."""

    book: QuotaBook
    history: UsageHistory | None = None
    budgets: Mapping[str, BudgetVerdict] = field(default_factory=dict)


@dataclass(slots=True)
class CyclePlan:
    """The cycle's answer: ``binds`` (every member of each placed unit, in queue order),
    ``evictions`` (one preemption's victims), ``refusals`` (one per member of each unit left
    pending, with the reason; empty when the driver asked for none), the shapes found not to
    fit (``blocked``), the ids of the units placed (``started``) and of the units a reclaim
    evicts running work for (``nominated``)."""

    binds: list[Bind] = field(default_factory=list)
    evictions: list[Preempt] = field(default_factory=list)
    refusals: list[Refuse] = field(default_factory=list)
    blocked: set[Hashable] = field(default_factory=set)
    started: list[str] = field(default_factory=list)
    gang_room: dict[str, Costs] = field(default_factory=dict)  # step 7: gangs priced
    # step 5: the units whose reclaim evicts running work, to go first once it has left
    # (``control.nominations``)
    nominated: list[str] = field(default_factory=list)

    @property
    def decisions(self) -> list[Bind | Preempt | Refuse]:
        return [*self.binds, *self.refusals, *self.evictions]

    def of(self, kind: type[D]) -> list[D]:
        return [d for d in self.decisions if isinstance(d, kind)]


def plan_cycle(
    state: FleetState,
    units: Iterable[PendingUnit],
    policy: Policy,
    rng: np.random.Generator,
    *,
    backfill: BackfillPass | None = None,
    now: float = 0.0,
    victims: Sequence[Victim] = (),
    evicting: bool = False,
    blocked: set[Hashable] | None = None,
    shapes_present: int | None = None,
    explain: bool = True,
    quota: QuotaInput | None = None,
    gang_room: GangRoomInput | None = None,
    nominated: Sequence[str] = (),
    by_shape: bool = True,
) -> CyclePlan:
    """Plan one cycle (see the module docstring); ``state`` is unchanged on return.

    ``blocked`` and ``shapes_present`` let a driver that tries only part of its queue (the
    simulator tries only new arrivals until capacity is freed) carry the blocked shapes across
    cycles and say how many shapes its whole queue holds; ``explain=False`` skips building the
    refusals (the simulator has no one to tell). ``quota``: team quotas (step 5); None: none.
    ``gang_room``: price pending gangs (step 7); None: scale-up launches for every one.
    ``nominated``: the claimants of earlier reclaims (``control.nominations``), first in the
    queue, in this order, once the quota order is made. ``by_shape``: answer each question
    once per shape (module docstring, *One answer per shape*); False asks it of every unit —
    the same plan, at a cost that grows with the queue (the reference the tests compare with).
    """
    order = sorted(units, key=_key)
    if gang_room is not None:
        order = _reserve(state, order, gang_room.book.reserved(now))
    plan = CyclePlan()
    drained = _drain(quota, victims)
    if not order:
        plan.blocked = set(blocked or ())
        plan.evictions = drained
        return plan
    book = None
    held: dict[str, str] = {}  # team → why its new work waits (budget hold)
    if quota is not None:
        book = QuotaBook(quota.book.teams.values(), quota.book.usage, quota.book.model_usage)
        order = _quota_order(order, book, quota.history)
        if nominated:
            first = {u: k for k, u in enumerate(nominated)}
            order.sort(key=lambda u: first.get(u.id, len(first)))  # stable: the rest as it was
        held = {t: v.reason for t, v in quota.budgets.items() if v.action in HOLDING}
        spot = {t for t, v in quota.budgets.items() if v.action == "spot-only"}
        if spot:
            order = on_spot_only(state, order, spot)
    shapes = [unit_shape(u) for u in order]
    # each shape hashed once: the pass compares the small numbers (``names`` maps them back)
    number: dict[Hashable, int] = {}
    sid = [number.setdefault(x, len(number)) for x in shapes]
    present = shapes_present if shapes_present is not None else len(number)
    carried = {number.setdefault(x, len(number)) for x in blocked or ()}
    reasons: dict[Hashable, tuple[Reason, Never]] = {}
    over: dict[int, str] = {}  # unit index → the quota verdict's reason
    # verdicts by (team, milli) since the book last changed: a long queue asks the same
    # question of thousands of units, and only an admission changes the answer
    asked: dict[tuple[str, int], Verdict] = {}
    quota_refused: set[int] = set()  # units the team's quota verdict alone refused
    borrowing: set[int] = set()  # units admitted as borrowing
    fresh: list[Victim] = []  # the binds of this pass's borrowing units (reclaimable)
    fresh_unit: dict[str, str] = {}  # their member id → unit id
    with Statement(state) as cycle:

        def try_place(i: int) -> bool:
            u = order[i]
            binds = place_unit(state, u, policy, rng, reasons, shapes[i])
            if binds is None:
                return False
            for k, b in enumerate(binds):
                masks = bind_masks(state, b, policy.catalog)
                cycle.allocate(unit_request(u), b, masks)
                if i in borrowing:  # reclaim may take it back before it ever starts
                    share = u.milli // len(binds) + (u.milli % len(binds) if k == 0 else 0)
                    fresh.append(Victim(b.job_id, u.priority, now, unit_request(u), b, masks,
                                        team=u.team, milli=share,
                                        workload=u.id if len(binds) > 1 else None))
                    fresh_unit[b.job_id] = u.id
            plan.binds.extend(binds)
            if book is not None and u.team is not None:
                row = state.index[binds[0].node]
                mid = int(state.model_id[row])
                book.admit(u.team, u.milli, state.model_names[mid] if mid >= 0 else None)
                asked.clear()
            return True

        def walk() -> Iterator[tuple[int, int, float]]:
            """The queue for backfill; lazily, so that each verdict sees the admissions made
            before it, and quota-blocked units are skipped rather than failed."""
            for i, u in enumerate(order):
                if u.team in held:
                    over[i] = held[u.team]
                    continue
                if book is not None and u.team is not None:
                    v = asked.get((u.team, u.milli))
                    if v is None:
                        v = asked[(u.team, u.milli)] = book.verdict(u.team, u.milli)
                    if not v.admitted:
                        over[i] = v.reason
                        if u.team not in book.model_usage:
                            quota_refused.add(i)  # reclaim may still make room (step 5)
                        continue
                    if v.admission is Admission.BORROWING:
                        borrowing.add(i)
                    if u.team in book.model_usage:
                        cut = _model_cut(state, book, u)
                        if isinstance(cut, str):
                            over[i] = cut
                            continue
                        if cut is not None:
                            order[i] = cut
                            shapes[i] = unit_shape(cut)
                            sid[i] = number.setdefault(shapes[i], len(number))
                yield i, sid[i], u.submit_s

        result = (backfill or BackfillPass()).run(walk(), now, try_place, present, carried)
        started = set(result.started)
        names = list(number)
        plan.blocked = {names[k] for k in result.blocked}
        plan.started = [order[i].id for i in result.started]
        left = [i for i in range(len(order)) if i not in started]
        if explain:
            stopped = order[result.stopped_for].id if result.stopped_for is not None else None
            # a shape's refusal is one text and one flag, written once (``by_shape``)
            said: dict[int, tuple[str, bool]] = {}
            for i in left:
                if i not in over and by_shape and sid[i] in said:
                    msg, never = said[sid[i]]
                else:
                    why, never_of = (over[i], False) if i in over else reasons.get(
                        shapes[i]) or (
                        (f"waiting behind {stopped}, which has starved past the limit", False)
                        if stopped is not None else ("not tried this cycle", False))
                    msg = why if isinstance(why, str) else why()
                    never = never_of if isinstance(never_of, bool) else never_of()
                    if i not in over:
                        said[sid[i]] = (msg, never)
                plan.refusals.extend(Refuse(m, msg, never) for m in order[i].placed_ids)
        # ``left`` first: with every unit placed neither step has work, and a driver's
        # victims may be built only when read (the live driver's are every running pod)
        if left and (victims or fresh) and not evicting and not drained:
            plan.evictions = _preempt(state, [order[i] for i in left if i not in over],
                                      victims, policy, book, by_shape)
            if book is not None and not plan.evictions:
                plan.evictions, back, now_binds, plan.nominated = plan_reclaims(
                    state, [order[i] for i in left if i not in over or i in quota_refused],
                    [*victims, *fresh], policy, book, rng, {v.job_id for v in fresh})
                if back:  # borrowing units of this pass give their binds back unstarted
                    gave = {fresh_unit[m] for m in back}
                    plan.binds = [b for b in plan.binds if fresh_unit.get(b.job_id) not in gave]
                    plan.started = [uid for uid in plan.started if uid not in gave]
                    if explain:
                        plan.refusals.extend(
                            Refuse(m, "reclaim: its room goes to work within its team's quota",
                                   False)
                            for u in order if u.id in gave for m in u.placed_ids)
                if now_binds:  # claimants whose room the given-back binds made: placed now
                    plan.binds.extend(b for binds in now_binds.values() for b in binds)
                    plan.started.extend(now_binds)
                    placed = {b.job_id for binds in now_binds.values() for b in binds}
                    plan.refusals = [r for r in plan.refusals if r.job_id not in placed]
        if gang_room is not None:
            _gang_room(state, [order[i] for i in left if i not in over], policy, gang_room,
                       now, plan, may_evict=not (evicting or drained or plan.evictions))
    plan.evictions = drained + plan.evictions
    return plan


def _reserve(state: FleetState, order: list[PendingUnit],
             reserved: Mapping[str, tuple[str, ...]]) -> list[PendingUnit]:
    """Step 7's reservations: each gang with reserved rows first, every other unit with those
    rows cut from its eligibility mask (the room its victims' eviction makes is its)."""
    if not reserved:
        return order
    n = state.n
    rows = {g: [state.index[x] for x in nodes if x in state.index]
            for g, nodes in reserved.items()}
    # the rows hidden from a unit depend only on which reserved gang it is (or none): one cut
    # per gang, shared by every unit of the long rest of the queue
    cuts: dict[str | None, tuple[np.ndarray, tuple[int, ...]] | None] = {}
    first: list[PendingUnit] = []
    rest: list[PendingUnit] = []
    for u in order:
        mine = u.id if u.id in rows else None
        if mine not in cuts:
            other = [r for g, rs in rows.items() if g != mine for r in rs]
            cut = np.ones(n, bool)
            cut[other] = False
            cuts[mine] = (cut, tuple(sorted(other))) if other else None
        got = cuts[mine]
        if got is not None:
            cut, hidden = got
            u = replace(u, eligible=cut if u.eligible is None else u.eligible[:n] & cut,
                        shape=None if u.shape is None else ("reserved", hidden, u.shape))
        (first if mine is not None else rest).append(u)
    return first + rest


def _gang_room(state: FleetState, left: list[PendingUnit], policy: Policy, gr: GangRoomInput,
               now: float, plan: CyclePlan, may_evict: bool) -> None:
    """Step 7: price each due unplaced gang (``control.gang_room``); a preempt choice's
    victims join the evictions (one per cycle). Trials draw from their own generator, so a
    run's placement draws do not depend on how often gangs were priced."""
    rng = np.random.default_rng(0)
    for u in left:
        if not u.is_gang or u.request is None or u.refusal is not None:
            continue
        if len(u.placed_ids) < u.need or not gr.book.due(u.id, now):
            continue
        req = unit_request(u)
        rate = gr.usd_per_gpu_h(req)
        if rate is None:
            continue  # nothing prices its GPUs: left to scale-up as before
        gpus = request_gpus(req) * len(u.placed_ids)

        def place(u: PendingUnit = u) -> list[Bind] | None:
            return place_unit(state, u, policy, rng, {}, ("gang-room", u.id))

        wait_s = room_frees_in(state, place, gr.running, gr.ends, now)
        pre: float | None = None
        victims: tuple[str, ...] = ()
        nodes: tuple[str, ...] = ()
        leave = 0.0
        if may_evict:
            cands = [m for m in gr.movable if m.victim.priority <= u.priority]
            need = 0 if req.mig_profile is not None else req.total_gpu_milli * len(u.placed_ids)
            got = eviction_plan(state, place, req, cands, policy, rng, gr.usd_per_gpu_h,
                                need, u.eligible) if cands else None
            if got is not None:
                taken, binds = got
                leave = max((m.leave_s for m in taken), default=0.0)
                pre = sum(eviction_usd(m, gr.usd_per_gpu_h) for m in taken) \
                    + gpus * rate * leave / HOUR + gpus * u.value_of_time * leave / HOUR
                victims = tuple(m.victim.job_id for m in taken)
                nodes = tuple(sorted({b.node for b in binds}))
        costs = Costs(wait_usd(gpus, rate, wait_s, u.value_of_time),
                      scale_up_usd(gpus, rate, gr.settings, wait_s, u.value_of_time),
                      pre, wait_s, victims, nodes, leave)
        plan.gang_room[u.id] = costs
        if costs.choice is Room.PREEMPT:
            plan.evictions.extend(
                Preempt(v, f"gang room: {u.id} takes its room (evicting costs ${pre:.2f}, "
                           f"less than waiting or scaling up)", Cause.GANG_ROOM)
                for v in victims)
            may_evict = False


def _drain(quota: QuotaInput | None, victims: Sequence[Victim]) -> list[Preempt]:
    """Step 6's drain: a ``Preempt`` for every running workload of a team whose budget says
    ``hold-and-drain`` and is spent, in victim order, each workload once."""
    if quota is None:
        return []
    why = {t: v.reason for t, v in quota.budgets.items() if v.draining}
    if not why:
        return []
    out: dict[str, Preempt] = {}
    for v in victims:
        if v.team in why and v.job_id not in out:
            out[v.job_id] = Preempt(v.job_id, f"{DRAIN}: {why[v.team]}", Cause.BUDGET_DRAIN)
    return list(out.values())


def _quota_order(order: list[PendingUnit], book: QuotaBook,
                 history: UsageHistory | None) -> list[PendingUnit]:
    """Within-quota and unmanaged units first (queue order), then borrowing units by their
    team's fair share (module docstring, step 5). Within quota is counted cumulatively: a
    team 3 of 4 GPUs used with two 1-GPU units pending has one within, one borrowing. A unit
    that starts below the team's quota and ends above it (3 of 4 used, a 2-GPU unit) counts
    as within: it is the team's entitlement, and the room its reclaim frees must not go to
    a borrower that ranks before it. It does not count towards the quota for the units behind
    it: it may not start (too big for the room there is), and a smaller unit of its team that
    would then be within quota must not wait behind other teams' borrowers."""
    planned = dict(book.usage)
    within: list[PendingUnit] = []
    borrow: list[PendingUnit] = []
    for u in order:
        t = None if u.team is None else book.teams.get(u.team)
        if t is None or u.team is None:
            within.append(u)
            continue
        before = planned[u.team]
        if before + u.milli <= t.nominal_milli:
            planned[u.team] += u.milli
            within.append(u)
        else:  # straddling (starts below the quota) or borrowing; neither counts towards it
            (within if before < t.nominal_milli else borrow).append(u)
    if not borrow:
        return within
    teams = {u.team for u in borrow if u.team is not None}
    capacity = {"gpu": float(max(1, sum(t.nominal_milli for t in book.teams.values())))}
    weights = {n: t.weight for n, t in book.teams.items()}
    rank = {n: r for r, n in enumerate(
        fair_order(teams, history or UsageHistory(), capacity, weights))}
    borrow.sort(key=lambda u: (rank[u.team or ""], u.key))
    return within + borrow


def _model_cut(state: FleetState, book: QuotaBook, u: PendingUnit) -> PendingUnit | str | None:
    """Per-GPU-model quotas (step 5): ``u`` with the rows of the models its team may not use
    now cut from its mask; None when no model is refused, the first refusal's reason when
    every GPU model on the fleet is."""
    assert u.team is not None
    n = state.n
    keep = np.ones(n, bool)
    first = ""
    refused = []
    for mid, model in enumerate(state.model_names):
        v = book.model_verdict(u.team, model, u.milli)
        if not v.admitted:
            keep &= state.model_id[:n] != mid
            refused.append(model)
            first = first or v.reason
    if not refused:
        return None
    if len(refused) == len(state.model_names):
        return first
    mask = keep if u.eligible is None else u.eligible[:n] & keep
    return replace(u, eligible=mask, shape=None if u.shape is None else (
        "models", tuple(refused), u.shape))


def on_spot_only(state: FleetState, order: list[PendingUnit],
                 teams: set[str]) -> list[PendingUnit]:
    """Step 6's ``spot-only``: the units of ``teams`` ask for spot and may use spot rows only."""
    n = state.n
    spot_rows = np.fromiter((state.nodes[r].capacity_type == CapacityType.SPOT
                             for r in range(n)), bool, n)
    out = []
    for u in order:
        if u.team in teams and u.request is not None:
            mask = spot_rows if u.eligible is None else u.eligible[:n] & spot_rows
            u = replace(u, request=request_on_spot(u.request), eligible=mask,
                        pin=CapacityType.SPOT, shape=None if u.shape is None else (
                            "spot-only", u.shape))
        out.append(u)
    return out


def _managed(book: QuotaBook, team: str | None) -> str | None:
    """The team as quotas see it: None for work no queue manages."""
    return team if team is not None and team in book.teams else None


def _key(u: PendingUnit) -> UnitKey:
    return u.key


def _preempt(state: FleetState, left: list[PendingUnit], victims: Sequence[Victim],
             policy: Policy, book: QuotaBook | None = None, by_shape: bool = True
             ) -> list[Preempt]:
    """One preemption, for the first unplaced unit (queue order) it can help. Under quotas
    (``book``) priority preempts only within a team — unmanaged work only unmanaged work —
    as Kueue's ``withinClusterQueue: LowerPriority``; across teams only reclaim evicts.
    ``by_shape``: a what-if that found no victims is not asked again of a later unit with the
    same request, eligible rows, priority and team (the same victims, the same fleet: the
    same answer)."""
    victims = [v for v in victims if v.workload is None]  # a gang is never torn apart
    if not victims:
        return []
    lowest = min(v.priority for v in victims)
    failed: set[Hashable] = set()
    mine_of: dict[str | None, list[Victim]] = {}
    for u in left:
        if u.is_gang or u.request is None or u.refusal is not None or u.preempt_never:
            continue
        if u.priority <= lowest:
            continue
        team = None if book is None else _managed(book, u.team)
        req = unit_request(u)
        ask = (req, None if u.eligible is None else u.eligible[:state.n].tobytes(),
               u.priority, team)
        if by_shape and ask in failed:
            continue
        mine = victims
        if book is not None:
            if team not in mine_of:
                mine_of[team] = [v for v in victims if _managed(book, v.team) == team]
            mine = mine_of[team]
        with only_eligible(state, u.eligible):
            got = plan_preemption(state, req, u.priority, mine, policy, u.id)
        if got is not None:
            return list(got.preempts)
        failed.add(ask)
    return []
