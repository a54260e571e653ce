"""Placing one pending unit on the fleet: its members' binds, or why it does not fit.

A lone unit is one ``policy.place``; a gang (several members, or fewer pending than it needs)
gets every member placed in one zone or none (``queueing.gang.place_gang``). The unit's
eligibility mask hides the other rows for the placement (:func:`only_eligible`), and a refusal
counts the rows the mask excluded as kube-scheduler does (:func:`with_selection`). The
scheduling cycle (``control.cycle``), reclaim's what-ifs (``control.reclaim``) and gang room's
trials place units through :func:`place_unit`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager

import numpy as np

from gpufleet.control.pending import PendingUnit, unit_request
from gpufleet.decisions import Bind
from gpufleet.placement import PlacementResult, Unschedulable
from gpufleet.placement.policy import Policy
from gpufleet.queueing.gang import place_gang
from gpufleet.state import FleetState

Reason = str | Callable[[], str]  # a refusal's text, or what writes it when read
# whether no node could host it even empty, or what finds out when read (``Unschedulable``)
Never = bool | Callable[[], bool]


@contextmanager
def only_eligible(state: FleetState, mask: np.ndarray | None) -> Iterator[tuple[int, int]]:
    """Hide the rows ``mask`` excludes (inactive) for one placement; yields (live, kept).

    Every filter and scorer starts from the active mask, so this is the whole of node
    selection; the active mask is exactly restored afterwards.
    """
    n = state.n
    live = int(state.active[:n].sum())
    if mask is None:
        yield live, live
        return
    saved = state.active[:n].copy()
    state.active[:n] &= mask[:n]
    try:
        yield live, int(state.active[:n].sum())
    finally:
        state.active[:n] = saved


def with_selection(message: str, live: int, kept: int) -> str:
    """Put the nodes the eligibility mask excluded back into the framework's "0/N nodes"
    reason, as kube-scheduler counts them ("didn't match Pod's node affinity/selector")."""
    if live == kept:
        return message
    head = f"0/{kept} nodes are available: "
    extra = f"{live - kept} node(s) didn't match Pod's node affinity/selector"
    rest = message.partition(head)[2]
    new = f"0/{live} nodes are available: {extra}" + (
        f", {rest}" if rest and not rest.startswith("no nodes") else "")
    return message.replace(head + rest, new) if head in message else message


def place_unit(state: FleetState, u: PendingUnit, policy: Policy, rng: np.random.Generator,
               reasons: dict[Hashable, tuple[Reason, Never]], shape: Hashable
               ) -> list[Bind] | None:
    """The unit's binds (every member) against ``state``, or None with the reason recorded
    under ``shape`` (a placement refusal's text is written only if the plan explains:
    ``_why``)."""
    if u.refusal is not None or u.request is None:
        reasons[shape] = (u.refusal or "unreadable request", True)
        return None
    ids = u.placed_ids
    if len(ids) < u.need:
        reasons[shape] = (f"pod group {u.id}: waiting for {u.need} members, {len(ids)} pending",
                          False)
        return None
    req = unit_request(u)
    with only_eligible(state, u.eligible) as (live, kept):
        if not u.is_gang:
            res = policy.place(state, req, rng)
            if not isinstance(res, PlacementResult):
                reasons[shape] = (_why(res, live, kept), _never(res))
                return None
            placed = [res]
        else:
            got = place_gang(state, req, len(ids), policy, rng, u.id)
            if not isinstance(got, list):
                reasons[shape] = (_why(got, live, kept, f"pod group {u.id} ({len(ids)} pods, "
                                                        "all or nothing): "), _never(got))
                return None
            placed = got
    return [res.to_bind(state, m) for m, res in zip(ids, placed, strict=True)]


def _never(res: Unschedulable) -> Callable[[], bool]:
    """A refusal's never-schedulable flag, found when read: the simulator plans without
    explaining, and the empty-fleet filter pass behind it was read for every refused try."""
    return lambda: res.never


def _why(res: Unschedulable, live: int, kept: int, head: str = "") -> Callable[[], str]:
    """A refusal's text, written when read: the simulator plans without explaining, and
    building kube's "0/N nodes are available: …" for every refused try was a tenth of a
    fixed fleet's run."""
    return lambda: head + with_selection(res.reason, live, kept)
