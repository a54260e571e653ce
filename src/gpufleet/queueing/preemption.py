"""Priority preemption: which running pods to evict so a higher-priority pending pod fits.

kube-scheduler's DefaultPreemption (PostFilter), on FleetState: for every node that holds pods of
strictly lower priority, release all of them and ask the placement filters whether the pending
pod would then fit on that node; if so, give victims back one by one, highest priority first
(then the most recently started), keeping each that still leaves room — the "reprieve" step, so
only the pods that must go are evicted. Among the candidate nodes the winner has the lowest
highest-victim priority, then the fewest victims, then the lowest priority sum, then the name.

Pure like placement and gang admission: the trial releases (one
``queueing.statement.Statement`` per candidate node) are undone before returning and the answer
is data (``Preempt`` decisions for the victims, or None when preemption cannot help).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpufleet.decisions import Bind, Preempt
from gpufleet.placement.policy import Policy
from gpufleet.placement.view import pod_view
from gpufleet.queueing.statement import Statement
from gpufleet.state import FleetState, ResourceRequest


@dataclass(frozen=True, slots=True)
class Victim:
    """A running pod preemption may evict, with the allocation it holds in the state."""

    job_id: str
    priority: int
    started_s: float
    request: ResourceRequest
    bind: Bind
    masks: tuple[tuple[int, int, int], ...] = ()
    # quotas (``queueing.teams``): the team it runs for and its size in milli-GPU-equivalents;
    # None: not managed by quotas (reclaim never picks it)
    team: str | None = None
    milli: int = 0
    # the gang it belongs to (None: a lone pod). A gang's members are never evicted one by one:
    # priority preemption skips them, and reclaim takes every member of the gang together
    workload: str | None = None


@dataclass(frozen=True, slots=True)
class PreemptionPlan:
    node: str
    preempts: tuple[Preempt, ...]


def _fits_on(state: FleetState, req: ResourceRequest, row: int, policy: Policy) -> bool:
    view = pod_view(state, req, policy.catalog)
    rows, _ = policy.feasible(view)
    return bool(np.any(rows == row))


def plan_preemption(
    state: FleetState,
    req: ResourceRequest,
    priority: int,
    victims: Sequence[Victim],
    policy: Policy,
    preemptor: str = "",
) -> PreemptionPlan | None:
    by_node: dict[str, list[Victim]] = {}
    for v in victims:
        if v.priority < priority and v.bind.node in state.index:
            by_node.setdefault(v.bind.node, []).append(v)
    # (highest victim priority, victim count, priority sum, node): the lowest wins
    best: tuple[tuple[int, int, int, str], str, list[Victim]] | None = None
    for node in sorted(by_node):
        row = state.index[node]
        cands = by_node[node]
        evict: list[Victim] = []
        with Statement(state) as what_if:  # the node's releases and reprieves, undone at the end
            for v in cands:
                what_if.release(v.request, v.bind, v.masks)
            if not _fits_on(state, req, row, policy):
                continue
            for v in sorted(cands, key=lambda v: (-v.priority, -v.started_s, v.job_id)):
                what_if.allocate(v.request, v.bind, v.masks)
                if not _fits_on(state, req, row, policy):
                    what_if.release(v.request, v.bind, v.masks)
                    evict.append(v)
        if not evict:
            continue  # it fits without evicting anyone: placement's job, not ours
        key = (max(v.priority for v in evict), len(evict), sum(v.priority for v in evict), node)
        if best is None or key < best[0]:
            best = (key, node, evict)
    if best is None:
        return None
    _, node, evict = best
    why = f"preempted by {preemptor} (priority {priority})" if preemptor else "preempted"
    return PreemptionPlan(node, tuple(Preempt(v.job_id, why) for v in evict))
