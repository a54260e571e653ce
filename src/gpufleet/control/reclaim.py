"""Quota reclaim: a team's work within its quota takes back the room other teams borrowed.

Step 5 of the scheduling cycle (``control.cycle``), run when no priority preemption was chosen
and none is in progress: the unplaced within-quota and straddling units whose room is held by
other teams' borrowed work get *reclaims* (a straddling unit only from teams whose use, as a
share of their nominal, stays above its team's: ``QuotaBook.gives_back``), in queue order, each
planned on the fleet as the reclaims before it leave it (their victims released, their units
placed, the book updated), so a lender whose work comes back gets all of its room in one cycle
rather than one eviction per checkpoint write. For each unit:

* ``queueing.teams.quota.reclaim_victims`` (newest borrowed first) when the cohort's quota is
  short, kept only if the unit then fits;
* when those do not make room for a lone unit (the cohort has quota room but the fleet no
  *physical* room, or the victims' GPUs are scattered), the node whose borrowed workloads —
  newest first, a team giving back only while it stays above its nominal quota — free room
  for the unit, plus borrowed work anywhere while the quota is still short, with the fewest
  milli-GPU evicted in all (``_room_reclaim``);
* for a gang, borrowed workloads node by node (the nodes that could be emptied most first)
  until the unit fits, then each reprieved that is not needed (``_node_reclaim``).

``Preempt`` reasons "reclaim: team X borrowed". The cycle's own unstarted borrowing binds are
the newest victims: they are unbound, not evicted (the cycle refuses them "reclaim: its room
goes to work within its team's quota"), and a unit whose room they alone make (no running work
evicted before it) binds in this plan. A running gang (victims sharing a ``workload``) is one
borrowed workload: reclaim takes all of its members or none.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import replace

import numpy as np

from gpufleet.control.pending import PendingUnit, unit_request, unit_shape
from gpufleet.control.placing import place_unit
from gpufleet.decisions import Bind, Cause, Preempt
from gpufleet.placement.mig import bind_masks
from gpufleet.placement.policy import Policy
from gpufleet.queueing.preemption import Victim
from gpufleet.queueing.statement import Statement
from gpufleet.queueing.teams.quota import QuotaBook, Running, reclaim_victims
from gpufleet.state import FleetState

__all__ = ["plan_reclaims"]


def plan_reclaims(state: FleetState, left: list[PendingUnit], victims: Sequence[Victim],
                  policy: Policy, book: QuotaBook, rng: np.random.Generator,
                  unstarted: set[str]
                  ) -> tuple[list[Preempt], set[str], dict[str, list[Bind]], list[str]]:
    """Reclaims for the unplaced within-quota and straddling units whose room other teams'
    borrowed work holds (``QuotaBook.reclaim_over`` says which may reclaim): in queue
    order, each on the fleet and book as the reclaims before it leave
    them. A running gang (victims sharing a ``workload``) is one workload, its size the sum of
    its members', released whole. ``unstarted``: victims that are this pass's own binds of
    borrowing units (started now, so reclaim's newest-first takes them first): they are not
    evicted but returned, to be unbound. A unit whose room only such returned binds (and free
    room) make, with no running work evicted before it in this call, is placed at once: nothing
    it waits for has to leave first, and a later pass may not come before the next event.
    Returns (evictions, unbound member ids, unit id → binds of the units placed at once, the
    ids of the units that wait for their victims to leave: the cycle's ``nominated``)."""
    members: dict[str, list[Victim]] = {}
    for v in victims:
        if v.team is not None:
            members.setdefault(v.workload or v.job_id, []).append(v)
    if not members:
        return [], set(), {}, []
    running = sorted((Running(key, vs[0].team or "", sum(v.milli for v in vs),
                              max(v.started_s for v in vs)) for key, vs in members.items()),
                     key=lambda r: (-r.started_s, r.key))  # reclaim's order: sorted once
    fresh = {key for key, vs in members.items() if vs[0].job_id in unstarted}
    plan = QuotaBook(book.teams.values(), book.usage, book.model_usage)
    taken: set[str] = set()
    out: dict[str, Preempt] = {}
    back: set[str] = set()
    placed: dict[str, list[Bind]] = {}
    waiting: list[str] = []
    failed: set[Hashable] = set()  # (team, milli, shape) that found no reclaim: the same answer
    with Statement(state) as after:
        for u in left:
            if u.team is None or u.request is None or u.refusal is not None:
                continue
            over = plan.reclaim_over(u.team, u.milli)
            if over is None:
                continue
            ask = (u.team, u.milli, unit_shape(u))
            if ask in failed:
                continue
            # never unbind unstarted work larger than the unit it would make room for
            avail = [r for r in running if r.key not in taken
                     and not (r.key in fresh and r.milli > u.milli)]
            got = reclaim_victims(plan, u.team, u.milli, avail)
            binds: list[Bind] | None = None
            if got:
                binds = _place_without(state, u, got, members, policy, rng, u.eligible)
            if got is not None and binds is None:
                if u.is_gang:
                    got, binds = _node_reclaim(state, u, plan, avail, members, policy, rng,
                                               over)
                else:
                    got, binds = _room_reclaim(state, u, plan, avail, members, policy, rng,
                                               over)
            if not got or binds is None:
                failed.add(ask)
                continue
            if not out and all(r.key in fresh for r in got):
                placed[u.id] = binds
            else:
                waiting.append(u.id)
            for r in got:
                taken.add(r.key)
                plan.release(r.team, r.milli)
                for v in members[r.key]:
                    after.release(v.request, v.bind, v.masks)
                    if v.job_id in unstarted:
                        back.add(v.job_id)
                    else:
                        out.setdefault(v.job_id,
                                       Preempt(v.job_id, f"reclaim: team {r.team} borrowed",
                                               Cause.QUOTA_RECLAIM))
            for b in binds:
                after.allocate(unit_request(u), b, bind_masks(state, b, policy.catalog))
            plan.admit(u.team, u.milli)
    return list(out.values()), back, placed, waiting


def _place_without(state: FleetState, u: PendingUnit, got: Sequence[Running],
                   members: Mapping[str, list[Victim]], policy: Policy,
                   rng: np.random.Generator, eligible: np.ndarray | None) -> list[Bind] | None:
    """The unit's binds on the fleet with every member of ``got`` released (a what-if; the
    state comes back unchanged), restricted to ``eligible`` rows; None if it does not fit."""
    with Statement(state) as what_if:
        for r in got:
            for v in members[r.key]:
                what_if.release(v.request, v.bind, v.masks)
        return place_unit(state, replace(u, eligible=eligible), policy, rng, {}, ("reclaim", u.id))


def _borrowed_by_row(state: FleetState, u: PendingUnit, book: QuotaBook,
                     running: list[Running], members: Mapping[str, list[Victim]]
                     ) -> tuple[str, dict[str, int], dict[int, list[Running]]] | None:
    """What physical reclaim may take for ``u``: its team's cohort, how much each other member
    of it has borrowed (``excess``), and per state row the workloads on it of the teams that
    borrowed, in ``running``'s order (newest first; a gang on several rows is on each). None
    when the team has no cohort (nothing to reclaim from)."""
    assert u.team is not None
    cohort = book.teams[u.team].cohort
    if cohort is None:
        return None
    excess = {m.name: book.borrowed(m.name) for m in book.members(cohort) if m.name != u.team}
    on: dict[int, list[Running]] = {}
    for r in running:
        if excess.get(r.team, 0) > 0:
            for row in sorted({state.index[v.bind.node] for v in members[r.key]
                               if v.bind.node in state.index}):
                on.setdefault(row, []).append(r)
    return cohort, excess, on


def _node_reclaim(state: FleetState, u: PendingUnit, book: QuotaBook, running: list[Running],
                  members: Mapping[str, list[Victim]], policy: Policy, rng: np.random.Generator,
                  over: int) -> tuple[list[Running], list[Bind] | None]:
    """Room for a within-quota gang that the newest-first victims do not make. The
    cohort's borrowed workloads are taken node by node — the nodes that borrowed work and free
    room could empty the most first (ties: the node with the newest such workload, then row
    order), newest first on each (as far as ``QuotaBook.gives_back`` lets each team give) —
    until they cover the cohort's quota shortfall and the unit fits;
    then each victim is reprieved, last taken first, if the unit still fits and the shortfall
    is still covered without it (kube-scheduler's reprieve). ([], None) when no set does."""
    borrowed = _borrowed_by_row(state, u, book, running, members)
    if borrowed is None:
        return [], None
    cohort, excess, on = borrowed
    short = max(0, u.milli - book.cohort_room(cohort))
    if not on:
        return [], None
    free = state.free_milli[:state.n]
    room = {row: int(free[row][free[row] > 0].sum()) + sum(r.milli for r in rs)
            for row, rs in on.items()}
    left = dict(excess)
    chosen: list[Running] = []
    keys: set[str] = set()
    cost = 0
    binds: list[Bind] | None = None
    newest = {row: max(r.started_s for r in rs) for row, rs in on.items()}
    # one what-if, released into as victims are taken (each trial placement sees the fleet
    # less every victim so far), and a victim reprieved is allocated back into it
    with Statement(state) as freed:
        for row in sorted(on, key=lambda row: (-room[row], -newest[row], row)):
            for r in on[row]:
                if r.key in keys or not book.gives_back(r.team, left[r.team], r.milli, u.team or "",
                                                        over):
                    continue
                chosen.append(r)
                keys.add(r.key)
                left[r.team] -= r.milli
                cost += r.milli
                for v in members[r.key]:
                    freed.release(v.request, v.bind, v.masks)
            if cost >= short:
                binds = place_unit(state, u, policy, rng, {}, ("reclaim", u.id))
                if binds is not None:
                    break
        if binds is None:
            return [], None
        for r in reversed(list(chosen)):
            if len(chosen) > 1 and cost - r.milli >= short:
                with Statement(state) as back:
                    for v in members[r.key]:
                        back.allocate(v.request, v.bind, v.masks)
                    got = place_unit(state, u, policy, rng, {}, ("reclaim", u.id))
                if got is not None:
                    for v in members[r.key]:
                        freed.allocate(v.request, v.bind, v.masks)
                    chosen = [x for x in chosen if x is not r]
                    binds, cost = got, cost - r.milli
    return chosen, binds


def _room_reclaim(state: FleetState, u: PendingUnit, book: QuotaBook, running: list[Running],
                  members: Mapping[str, list[Victim]], policy: Policy, rng: np.random.Generator,
                  over: int) -> tuple[list[Running], list[Bind] | None]:
    """Room for a lone unit that ``reclaim_victims``' newest-first set does not make (the
    cohort has quota room but the fleet no physical room, or the victims' GPUs are
    scattered): per node, the cohort's borrowed workloads on it, newest first, taken one by
    one (as far as ``QuotaBook.gives_back`` lets each team give) until the unit fits on that
    node, then, while the cohort's quota is still short, borrowed workloads anywhere, newest
    first; the node that needs the fewest milli-GPU evicted in all wins (ties: the one whose
    oldest victim started latest — newest first, as ``reclaim_victims`` — then the state's
    row order). ``running`` is newest first. ([], None) when no node can be made to fit."""
    borrowed = _borrowed_by_row(state, u, book, running, members)
    if borrowed is None:
        return [], None
    cohort, excess, on = borrowed
    short = max(0, u.milli - book.cohort_room(cohort))
    team = u.team or ""
    n = state.n
    best: tuple[tuple[int, float], list[Running], list[Bind]] | None = None
    for row in sorted(on):
        if u.eligible is not None and not u.eligible[row]:
            continue
        only = np.zeros(n, bool)
        only[row] = True
        one = replace(u, eligible=only)
        left = dict(excess)
        chosen: list[Running] = []
        cost = 0
        binds = None
        with Statement(state) as freed:  # the row's victims so far released
            for r in on[row]:
                if not book.gives_back(r.team, left[r.team], r.milli, team, over):
                    continue
                if best is not None and cost + r.milli > best[0][0]:
                    break
                chosen.append(r)
                left[r.team] -= r.milli
                cost += r.milli
                for v in members[r.key]:
                    freed.release(v.request, v.bind, v.masks)
                binds = place_unit(state, one, policy, rng, {}, ("reclaim", u.id))
                if binds is not None:
                    break
        if binds is None:
            continue
        keys = {r.key for r in chosen}
        for r in running:  # the cohort's quota still short: borrowed work anywhere, newest first
            if cost >= short:
                break
            if r.key not in keys and book.gives_back(r.team, left.get(r.team, 0), r.milli,
                                                     team, over):
                chosen.append(r)
                left[r.team] -= r.milli
                cost += r.milli
        if cost < short:
            continue
        key = (cost, -min(r.started_s for r in chosen))  # newest first: the oldest chosen
        if best is None or key < best[0]:
            best = (key, chosen, binds)
    return ([], None) if best is None else (best[1], best[2])
