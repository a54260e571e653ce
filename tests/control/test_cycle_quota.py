"""control.cycle with team quotas (step 5 of its docstring), as a case table worked by hand.

Fleet of every case: ``a`` and ``b``, two T4 GPUs each (4 GPUs), ``bestfit`` placement (the
fullest node that fits; ties: the first row). Teams (milli-GPU): cohort ``lab`` holds ``x`` (2
GPUs) and ``y`` (2 GPUs); ``s`` has 1 GPU and no cohort; ``z`` (2 GPUs, cohort ``lab``) appears
only where a case says so. Every pending unit asks for one GPU (1000 milli) unless it says two.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pytest

from gpufleet.control.cycle import PendingUnit, QuotaInput, Victim, plan_cycle, unit_shape
from gpufleet.decisions import Bind
from gpufleet.placement import get_policy
from gpufleet.queueing import BackfillPass
from gpufleet.queueing.teams.budget import MICRO, BudgetState, BudgetVerdict
from gpufleet.queueing.teams.fairshare import UsageHistory
from gpufleet.queueing.teams.quota import QuotaBook, TeamQuota
from gpufleet.state import FleetState, ResourceRequest

from .test_cycle import CASES, fleet

ONE = ResourceRequest(cpu_milli=1000, num_gpu=1)
TWO = ResourceRequest(cpu_milli=1000, num_gpu=2)
POLICY = get_policy("bestfit", tie_seed=0)
TEAMS = [TeamQuota("x", 2000, "lab"), TeamQuota("y", 2000, "lab"), TeamQuota("s", 1000)]
WITH_Z = [*TEAMS, TeamQuota("z", 2000, "lab")]
# x runs on every GPU of the fleet (2 of them borrowed), started at 0, 10, 20 and 30: the
# running work of the reclaim and drain cases
X_FULL = [("x0", "x", "a", (0,), 0), ("x1", "x", "a", (1,), 10),
          ("x2", "x", "b", (0,), 20), ("x3", "x", "b", (1,), 30)]
# straddling units: y (1.5 GPUs) at 1 of 1.5 asks a whole GPU (over by 0.5); x has 1 GPU of
# quota; z (3 GPUs) is idle, so the cohort's quota (5.5) has room the 4-GPU fleet does not
STRADDLE = [TeamQuota("x", 1000, "lab"), TeamQuota("y", 1500, "lab"), TeamQuota("z", 3000, "lab")]


def unit(uid: str, team: str | None, t: float, req: ResourceRequest = ONE,
         prio: int = 0) -> PendingUnit:
    return PendingUnit(uid, req, prio, submit_s=t, team=team, milli=req.total_gpu_milli)


@dataclass
class Case:
    name: str
    pending: list[PendingUnit]
    binds: dict[str, tuple[str, tuple[int, ...]]]
    refused: dict[str, str] = field(default_factory=dict)  # id → a part of its message
    # running: (job, team or None, node, gpus, started_s); the book's usage is their sum
    running: list[tuple[str, str | None, str, tuple[int, ...], float]] = field(
        default_factory=list)
    evicted: list[tuple[str, str]] = field(default_factory=list)  # (job, reason)
    teams: list[TeamQuota] = field(default_factory=lambda: TEAMS)
    extra_usage: dict[str, int] = field(default_factory=dict)  # usage not on this fleet
    history: dict[str, float] | None = None  # decayed GPU usage per team
    prio: dict[str, int] = field(default_factory=dict)  # running jobs' priorities (else 0)
    kw: dict = field(default_factory=dict)
    gangs: dict[str, str] = field(default_factory=dict)  # running job → its gang (workload)
    budgets: dict[str, str] = field(default_factory=dict)  # team → its budget's action now
    budget_state: BudgetState = BudgetState.EXHAUSTED  # every budget's ($12 of $10: spent)
    spot_b: bool = False  # node b is a spot node (tainted)


CASES_Q = [
    Case("a blocked team does not block another: s (1 GPU used of 1, no cohort) is refused with"
         " the verdict's reason; x's later unit binds a's free GPU",
         [unit("s1", "s", 1), unit("x1", "x", 2)],
         {"x1": ("a", (1,))},
         {"s1": "team s: 2 GPU would exceed its quota of 1 and it has no cohort to borrow from"},
         running=[("s0", "s", "a", (0,), 0)]),
    Case("not a head-of-line stop either: s1 has starved (100 s > 50 s) but is over quota, so"
         " x1 behind it still binds",
         [unit("s1", "s", 0), unit("x1", "x", 2)],
         {"x1": ("a", (1,))}, {"s1": "no cohort to borrow from"},
         running=[("s0", "s", "a", (0,), 0)], kw={"backfill": BackfillPass(50.0), "now": 100.0}),
    Case("unmanaged work is admitted as before", [unit("u1", None, 1)], {"u1": ("a", (0,))}),
    Case("borrowing within the cohort's idle quota: x holds 2 of 2, y none → x1 borrows",
         [unit("x1", "x", 1)], {"x1": ("a", (0,))}, extra_usage={"x": 2000}),
    Case("the cohort's idle quota is spent (x 3 + y 1 = 4 of 4): x's second borrow is refused",
         [unit("x1", "x", 1)], {},
         {"x1": "team x: cohort lab has 0 GPU of idle quota, 1 needed"},
         extra_usage={"x": 3000, "y": 1000}),
    Case("within the pass the book grows: x 1 + y 1 of 4 → 2 idle; x1 is within (x at 2, 1"
         " idle), x2 borrows the last idle GPU, x3 finds none",
         [unit("x1", "x", 1), unit("x2", "x", 2), unit("x3", "x", 3)],
         {"x1": ("a", (0,)), "x2": ("a", (1,))}, {"x3": "cohort lab has 0 GPU of idle quota"},
         extra_usage={"x": 1000, "y": 1000}),
    Case("borrowers by fair share, not FIFO: x and y both at their 2 GPUs, z idle (cohort room"
         " 2); one GPU free; y used less (10 < 100) so y1 goes first though x1 is older",
         [unit("x1", "x", 1), unit("y1", "y", 2)],
         {"y1": ("b", (1,))}, {"x1": "0/2 nodes are available"},
         running=[("u0", None, "a", (0, 1), 0), ("u1", None, "b", (0,), 0)],
         teams=WITH_Z, extra_usage={"x": 2000, "y": 2000}, history={"x": 100.0, "y": 10.0}),
    Case("the same with the history reversed: x1 first",
         [unit("x1", "x", 1), unit("y1", "y", 2)],
         {"x1": ("b", (1,))}, {"y1": "0/2 nodes are available"},
         running=[("u0", None, "a", (0, 1), 0), ("u1", None, "b", (0,), 0)],
         teams=WITH_Z, extra_usage={"x": 2000, "y": 2000}, history={"x": 10.0, "y": 100.0}),
    Case("within-quota work before borrowing work whatever its age: y1 (y at 1 of 2) binds,"
         " the older borrower x1 gets no GPU",
         [unit("x1", "x", 1), unit("y1", "y", 9)],
         {"y1": ("b", (1,))}, {"x1": "0/2 nodes are available"},
         running=[("u0", None, "a", (0, 1), 0), ("u1", None, "b", (0,), 0)],
         teams=WITH_Z, extra_usage={"x": 2000, "y": 1000}),
    Case("reclaim: x runs 4 GPUs (2 borrowed), the fleet is full; y1 is within y's quota"
         " (0 + 1 ≤ 2), the cohort is 1 short → x's newest pod x3 (started 30) goes",
         [unit("y1", "y", 40)], {}, {"y1": "0/2 nodes are available"},
         running=X_FULL,
         evicted=[("x3", "reclaim: team x borrowed")]),
    Case("reclaim for two GPUs: x2 and x3 (the newest two, both on b) go",
         [unit("y1", "y", 40, TWO)], {}, {"y1": "0/2 nodes are available"},
         running=X_FULL,
         evicted=[("x3", "reclaim: team x borrowed"), ("x2", "reclaim: team x borrowed")]),
    Case("two lenders' units in one cycle: y1 and y2 (1 GPU each, within y's 2) → x3 for y1,"
         " then x2 for y2, planned on the fleet x3 has left and y1 has taken",
         [unit("y1", "y", 40), unit("y2", "y", 41)], {}, {"y1": "0/2", "y2": "0/2"},
         running=X_FULL,
         evicted=[("x3", "reclaim: team x borrowed"), ("x2", "reclaim: team x borrowed")]),
    Case("physical room: with z (2 GPUs, idle) in the cohort its quota has room for y1, but"
         " x's borrowing fills the fleet → the node whose newest borrowed pod frees a GPU: b"
         " (x3, started 30, beats a's x1, started 10)",
         [unit("y1", "y", 40)], {}, {"y1": "0/2 nodes are available"},
         running=X_FULL,
         teams=WITH_Z, evicted=[("x3", "reclaim: team x borrowed")]),
    Case("physical room for two GPUs: a needs x1 and x0, b x3 and x2 (2 GPUs each); b's"
         " oldest victim (x2, 20) is newer → x3 and x2",
         [unit("y1", "y", 40, TWO)], {}, {"y1": "0/2 nodes are available"},
         running=X_FULL,
         teams=WITH_Z, evicted=[("x3", "reclaim: team x borrowed"),
                                ("x2", "reclaim: team x borrowed")]),
    Case("physical room never takes a team below its nominal: x runs 3 (1 borrowed), u0 is"
         " unmanaged; y1 needs 2 GPUs on one node — each node could give back only one of x's"
         " pods → nothing evicted",
         [unit("y1", "y", 40, TWO)], {}, {"y1": "0/2 nodes are available"},
         running=[("x0", "x", "a", (0,), 0), ("x1", "x", "a", (1,), 10),
                  ("x2", "x", "b", (0,), 20), ("u0", None, "b", (1,), 0)],
         teams=WITH_Z),
    Case("a straddling unit reclaims: y at 1 of 1.5 asks 1 (it would borrow 0.5); x runs 3 of"
         " its 1 (2 borrowed) and keeps 1 borrowed ≥ 0.5 after giving one back → the node"
         " whose newest borrowed pod frees a GPU: b (x2, started 20)",
         [unit("y1", "y", 40)], {}, {"y1": "0/2 nodes are available"},
         running=[("x0", "x", "a", (0,), 0), ("x1", "x", "a", (1,), 10),
                  ("x2", "x", "b", (0,), 20), ("y0", "y", "b", (1,), 5)],
         teams=STRADDLE, evicted=[("x2", "reclaim: team x borrowed")]),
    Case("a tie does not give: x at 1 of 1.5 asks 1 (straddling); y runs 2 of its 1.5 and"
         " would keep 1 of 1.5 — x's own share, 2/3 — after giving one back. Were it taken,"
         " y's pod would straddle the same way next pass and take it back, for ever",
         [unit("x1", "x", 40)], {}, {"x1": "team x: cohort lab has 0 GPU of idle quota"},
         running=[("x0", "x", "a", (0,), 0), ("y0", "y", "a", (1,), 10),
                  ("y1", "y", "b", (0,), 20), ("u0", None, "b", (1,), 0)],
         teams=[TeamQuota("x", 1500, "lab"), TeamQuota("y", 1500, "lab")]),
    Case("the same with y at 3 of 1.5 and an idle z (1) in the cohort: y keeps 2 of 1.5"
         " (4/3 > x's 2/3) → its newest, y2",
         [unit("x1", "x", 40)], {}, {"x1": "team x: cohort lab has 0 GPU of idle quota"},
         running=[("x0", "x", "a", (0,), 0), ("y0", "y", "a", (1,), 10),
                  ("y1", "y", "b", (0,), 20), ("y2", "y", "b", (1,), 30)],
         teams=[TeamQuota("x", 1500, "lab"), TeamQuota("y", 1500, "lab"),
                TeamQuota("z", 1000, "lab")],
         evicted=[("y2", "reclaim: team y borrowed")]),
    Case("a straddling unit takes from a lender only while the lender borrows: y at 1 of 2"
         " asks 2, the cohort is 2 short; x borrows 1 and gives x2 back (x keeps 2 of 2, share"
         " 1 > y's 1/2), then borrows nothing → 1 of 2 found, nothing evicted",
         [unit("y1", "y", 40, TWO)], {}, {"y1": "cohort lab has 0 GPU of idle quota"},
         running=[("x0", "x", "a", (0,), 0), ("x1", "x", "a", (1,), 10),
                  ("x2", "x", "b", (0,), 20), ("y0", "y", "b", (1,), 5)]),
    Case("a straddling unit goes before borrowers: y1 (y at 1 of 1.5) takes the one free GPU"
         " though fair share ranks x (10 < 100) first among borrowers; x1 (x at its 1) waits",
         [unit("x1", "x", 1), unit("y1", "y", 2)],
         {"y1": ("b", (1,))}, {"x1": "0/2 nodes are available"},
         running=[("u0", None, "a", (0, 1), 0), ("y0", "y", "b", (0,), 5)],
         teams=STRADDLE, extra_usage={"x": 1000}, history={"x": 10.0, "y": 100.0}),
    Case("this pass's borrowing binds are reclaimable before they start: y1 (2 GPUs, within"
         " y's quota) fits nowhere; x1 borrows b's free GPU; reclaim for y1 on b takes x1 back"
         " unbound (the newest) and evicts x's running borrowed x9 → b empties for y1",
         [unit("y1", "y", 40, TWO), unit("x1", "x", 50)], {},
         {"y1": "0/2 nodes are available",
          "x1": "reclaim: its room goes to work within its team's quota"},
         running=[("u0", None, "a", (0, 1), 0), ("x9", "x", "b", (1,), 5)],
         teams=WITH_Z, extra_usage={"x": 2000}, kw={"now": 100.0},
         evicted=[("x9", "reclaim: team x borrowed")]),
    Case("unstarted work larger than the claimant stays bound: y1 (1 GPU, within, may use b"
         " only) finds b full; x1 (2 GPUs, borrowing) takes a; the cohort's quota is then 1"
         " short → not x1 (2 GPUs > 1) but x's running borrowed x9 on b goes",
         [replace(unit("y1", "y", 40), eligible=np.array([False, True])),
          unit("x1", "x", 50, TWO)], {"x1": ("a", (0, 1))}, {"y1": "0/2 nodes are available"},
         running=[("x9", "x", "b", (0,), 5), ("u1", None, "b", (1,), 0)],
         extra_usage={"x": 1000}, kw={"now": 100.0},
         evicted=[("x9", "reclaim: team x borrowed")]),
    Case("a within-quota unit behind its team's straddling unit goes before borrowers: y at 1"
         " of 2 asks 2 (y1, straddling: fits the cohort's quota, not the fleet) then 1 (y2:"
         " within, had y1 not started); x borrows and fair share ranks it first (10 < 100), yet"
         " y2 takes the one free GPU and x1 waits",
         [unit("y1", "y", 1, TWO), unit("x1", "x", 2), unit("y2", "y", 3)],
         {"y2": ("b", (1,))}, {"y1": "0/2 nodes are available", "x1": "0/2 nodes are available"},
         running=[("x0", "x", "a", (0,), 0), ("x9", "x", "a", (1,), 0),
                  ("y0", "y", "b", (0,), 5)],
         teams=WITH_Z, history={"x": 10.0, "y": 100.0}),
    Case("a unit whose room this pass's unstarted borrowing binds alone make binds at once: y1"
         " (2 GPUs, within) is skipped as a shape still blocked from an earlier cycle; x1 (x at"
         " 2 of 2, borrowing) takes b's first GPU; reclaim for y1 (the cohort 1 short) takes x1"
         " back unbound → b is empty and y1 binds in this plan, nothing evicted",
         [unit("y1", "y", 40, TWO), unit("x1", "x", 50)], {"y1": ("b", (0, 1))},
         {"x1": "reclaim: its room goes to work within its team's quota"},
         running=[("u0", None, "a", (0,), 0), ("u1", None, "a", (1,), 0)],
         extra_usage={"x": 2000}, kw={"now": 100.0, "blocked": {unit_shape(
             unit("y1", "y", 40, TWO))}}),
    Case("a lone unit whose newest-first victim frees the wrong node: x (1 GPU of quota) runs"
         " x0, x1 on a and x2 on b, all started at 0; y1 (2 GPUs, within) finds the cohort 1"
         " short; x0 (first by key) covers it but leaves one GPU free on each node → the node"
         " needing the fewest evicted in all: b (x2 alone), not a (x0 and x1)",
         [unit("y1", "y", 40, TWO)], {}, {"y1": "0/2 nodes are available"},
         running=[("x0", "x", "a", (0,), 0), ("x1", "x", "a", (1,), 0),
                  ("x2", "x", "b", (0,), 0)],
         teams=[TeamQuota("x", 1000, "lab"), TeamQuota("y", 2000, "lab"),
                TeamQuota("z", 1000, "lab")],
         evicted=[("x2", "reclaim: team x borrowed")]),
    Case("a gang's room, node by node: y's two 1-GPU members; the cohort has quota room, the"
         " fleet is full of x's borrowing; a and b could each be emptied (2 GPUs), b holds the"
         " newest → x3 and x2 (neither can be reprieved)",
         [PendingUnit("yg", ONE, 0, ("yg#0", "yg#1"), 2, submit_s=40, team="y", milli=2000)],
         {}, {"yg#0": "pod group yg"},
         running=X_FULL,
         teams=WITH_Z, evicted=[("x3", "reclaim: team x borrowed"),
                                ("x2", "reclaim: team x borrowed")]),
    Case("newest-first victims that scatter: y1 needs 2 GPUs on one node, the cohort is 2 short;"
         " x's newest two are x3 on b and x1 on a (one GPU free on each: no fit) → node by"
         " node: b (x3, x2) empties it; no victim can be reprieved",
         [unit("y1", "y", 40, TWO)], {}, {"y1": "0/2 nodes are available"},
         running=[("x0", "x", "a", (0,), 0), ("x1", "x", "a", (1,), 25),
                  ("x2", "x", "b", (0,), 20), ("x3", "x", "b", (1,), 30)],
         evicted=[("x3", "reclaim: team x borrowed"), ("x2", "reclaim: team x borrowed")]),
    Case("no reclaim while an eviction is in progress",
         [unit("y1", "y", 40)], {}, {"y1": "0/2 nodes are available"},
         running=X_FULL,
         kw={"evicting": True}),
    Case("work beyond its own quota never reclaims: y runs 1, x 3 (1 borrowed); y's 2-GPU unit"
         " would take y to 3 > 2 and the cohort has no idle quota → refused, nothing evicted",
         [unit("y1", "y", 40, TWO)], {}, {"y1": "cohort lab has 0 GPU of idle quota, 2 needed"},
         running=[("x0", "x", "a", (0,), 0), ("x1", "x", "a", (1,), 10),
                  ("x2", "x", "b", (0,), 20), ("y0", "y", "b", (1,), 30)]),
    Case("within quota is never evicted by another team: x holds exactly its 2, unmanaged work"
         " the other 2 → the cohort has idle quota, nothing is borrowed, nothing evicted",
         [unit("y1", "y", 40)], {}, {"y1": "0/2 nodes are available"},
         running=[("x0", "x", "a", (0,), 0), ("x1", "x", "a", (1,), 10),
                  ("u0", None, "b", (0,), 20), ("u1", None, "b", (1,), 30)]),
    Case("priority does not cross teams: y1 (priority 5, within y's quota) would evict x's"
         " priority-0 pair on a without quotas; x holds only its own 2 → nothing evicted",
         [unit("y1", "y", 40, TWO, prio=5)], {}, {"y1": "0/2 nodes are available"},
         running=[("x0", "x", "a", (0, 1), 0), ("u0", None, "b", (0, 1), 0)],
         prio={"u0": 9}),
    Case("priority within a team: x2 (priority 5) borrows 2 (cohort room 4 - 2 = 2) and evicts"
         " x's own priority-0 pair",
         [unit("x2", "x", 40, TWO, prio=5)], {}, {"x2": "0/2 nodes are available"},
         running=[("x0", "x", "a", (0, 1), 0), ("u0", None, "b", (0, 1), 0)],
         prio={"u0": 9}, evicted=[("x0", "preempted by x2 (priority 5)")]),
    # -- gangs under reclaim -----------------------------------------------------------------
    Case("reclaim takes a borrowed gang whole: x runs x0, x1 on a and the 2-pod gang g (x2, x3"
         " on b, started 30); y1 needs 1 GPU, the newest borrowed workload is g → both its pods"
         " go, though one GPU would do",
         [unit("y1", "y", 40)], {}, {"y1": "0/2 nodes are available"},
         running=[("x0", "x", "a", (0,), 0), ("x1", "x", "a", (1,), 10),
                  ("x2", "x", "b", (0,), 30), ("x3", "x", "b", (1,), 30)],
         gangs={"x2": "g", "x3": "g"},
         evicted=[("x2", "reclaim: team x borrowed"), ("x3", "reclaim: team x borrowed")]),
    Case("priority preemption never takes a gang's member: the 'priority within a team' case"
         " with x's pair a gang → nothing evicted",
         [unit("x2", "x", 40, TWO, prio=5)], {}, {"x2": "0/2 nodes are available"},
         running=[("x0", "x", "a", (0, 1), 0), ("u0", None, "b", (0, 1), 0)],
         prio={"u0": 9}, gangs={"x0": "gx"}),
    # -- budgets (step 6) --------------------------------------------------------------------
    Case("hold: x's budget is spent → x1 waits with the reason, y1 binds; x's running work"
         " stays",
         [unit("x1", "x", 1), unit("y1", "y", 2)], {"y1": ("a", (1,))},
         {"x1": "team x: budget $12.00 of $10.00 spent; new work waits until the period renews"},
         running=[("x0", "x", "a", (0,), 0)], budgets={"x": "hold"}),
    Case("hold applies to a budget-only team (no quota, not in the book) too",
         [unit("h1", "h", 1)], {}, {"h1": "team h: budget"}, budgets={"h": "hold"}),
    Case("a held unit is never a reclaim's beneficiary: y1 is within y's quota and x borrowed"
         " (the first reclaim case) but y is held → nothing evicted",
         [unit("y1", "y", 40)], {}, {"y1": "new work waits"},
         running=X_FULL,
         budgets={"y": "hold"}),
    Case("hold-and-drain, spent: x1 waits, y1 binds, and x's running x0 is evicted (the drain"
         " stops spend; it does not wait for room)",
         [unit("x1", "x", 1), unit("y1", "y", 2)], {"y1": ("a", (1,))},
         {"x1": "new work waits until the period renews; running work is evicted"},
         running=[("x0", "x", "a", (0,), 0), ("y0", "y", "b", (0,), 0)],
         evicted=[("x0", "budget drain: team x: budget $12.00 of $10.00 spent; new work waits "
                   "until the period renews; running work is evicted")],
         budgets={"x": "hold-and-drain"}),
    Case("hold-and-drain, low but not spent: x1 waits as under hold; x0 keeps running",
         [unit("x1", "x", 1)], {}, {"x1": "will run out within the look-ahead"},
         running=[("x0", "x", "a", (0,), 0)], budgets={"x": "hold-and-drain"},
         budget_state=BudgetState.LOW),
    Case("the drain runs with nothing pending, and takes a running gang's members each once"
         " under its own id (a live pod group) and a budget-only team's work too",
         [], {}, running=[("x0", "x", "a", (0, 1), 0), ("h0", "h", "b", (0,), 0),
                          ("h1", "h", "b", (1,), 0)],
         gangs={"h0": "gh", "h1": "gh"},
         evicted=[("h0", "budget drain: team h"), ("h1", "budget drain: team h")],
         budgets={"h": "hold-and-drain"}),
    Case("a drain replaces this cycle's reclaim: the first reclaim case (x3 reclaimed for y1)"
         " with x's budget spent under hold-and-drain → all four of x's pods go; y1 waits for"
         " the room they free",
         [unit("y1", "y", 40)], {}, {"y1": "0/2 nodes are available"},
         running=X_FULL,
         evicted=[(f"x{i}", "budget drain: team x") for i in range(4)],
         budgets={"x": "hold-and-drain"}),
    Case("notify changes nothing: x1 binds a's GPU 0 as without a budget",
         [unit("x1", "x", 1)], {"x1": ("a", (0,))}, budgets={"x": "notify"}),
    Case("spot-only: b is spot; x1 (no spot toleration of its own) goes to b, where without"
         " the budget it would take a (first row); y1 still takes a",
         [unit("x1", "x", 1), unit("y1", "y", 2)], {"x1": ("b", (0,)), "y1": ("a", (0,))},
         budgets={"x": "spot-only"}, spot_b=True),
    Case("spot-only with the spot node full: x1 waits though a is free — the mask cut a",
         [unit("x1", "x", 1)], {},
         {"x1": "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector"},
         running=[("u0", None, "b", (0, 1), 0)], budgets={"x": "spot-only"}, spot_b=True),
]


@pytest.mark.parametrize("case", CASES_Q, ids=lambda c: c.name)
def test_cycle_quota_case(case: Case) -> None:
    s = fleet(case.spot_b)
    victims = []
    usage = dict(case.extra_usage)
    for job, team, node, gpus, started in case.running:
        req = ResourceRequest(cpu_milli=1000, num_gpu=len(gpus))
        b = Bind(job, node, gpus)
        s.allocate(req, b)
        victims.append(Victim(job, case.prio.get(job, 0), started, req, b, team=team,
                              milli=len(gpus) * 1000, workload=case.gangs.get(job)))
        if team is not None:
            usage[team] = usage.get(team, 0) + len(gpus) * 1000
    book = QuotaBook(case.teams, usage)
    history = None
    if case.history is not None:
        history = UsageHistory(last_s=0.0)
        history.decayed = {t: {"gpu": v} for t, v in case.history.items()}
    before = (s.free_milli.copy(), dict(book.usage))
    spent = 12 if case.budget_state is BudgetState.EXHAUSTED else 9
    budgets = {t: BudgetVerdict(t, case.budget_state, a, spent * MICRO, 10 * MICRO, 3600.0, 0.0)
               for t, a in case.budgets.items()}  # type: ignore[arg-type]
    plan = plan_cycle(s, case.pending, POLICY, np.random.default_rng(0), victims=victims,
                      quota=QuotaInput(book, history, budgets), **case.kw)
    assert {b.job_id: (b.node, b.gpus) for b in plan.binds} == case.binds
    assert [e.job_id for e in plan.evictions] == [j for j, _ in case.evicted]
    for e, (_, reason) in zip(plan.evictions, case.evicted, strict=True):
        assert e.reason.startswith(reason), (e.reason, reason)
    refused = {r.job_id: r.message for r in plan.refusals}
    for job, part in case.refused.items():
        assert part in refused[job], (job, refused[job])
    assert set(refused) == {m for u in case.pending for m in u.placed_ids} - set(case.binds)
    # neither the state nor the caller's book changes: the driver applies the plan
    assert np.array_equal(before[0], s.free_milli) and before[1] == book.usage


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_quota_on_no_managed_team_is_today(case: object) -> None:
    """Every case of the plain cycle table plans the same with a quota book that manages none
    of its units (their team is None), and with ``quota=None``: the quota step changes
    nothing it was not asked to."""
    from .test_cycle import Case as Plain

    assert isinstance(case, Plain)
    plans = []
    for quota in (None, QuotaInput(QuotaBook(TEAMS))):
        s: FleetState = fleet(case.spot_b)
        victims = []
        for job, node, gpus, prio in case.running:
            req = ResourceRequest(cpu_milli=1000, num_gpu=len(gpus))
            b = Bind(job, node, gpus)
            s.allocate(req, b)
            victims.append(Victim(job, prio, 0.0, req, b))
        plans.append(plan_cycle(s, case.pending, POLICY, np.random.default_rng(0),
                                victims=victims, quota=quota, **case.kw))
    assert plans[0].decisions == plans[1].decisions
    assert plans[0].blocked == plans[1].blocked and plans[0].started == plans[1].started


def test_per_model_quota_cuts_the_refused_models_rows() -> None:
    """Per-GPU-model quotas in the cycle. Fleet: ``t`` (2 T4) and ``v`` (2 V100). Team m has 4
    GPUs in all, at most 1 of them V100 (``models``), no cohort, and already runs 1 V100.
    m1 asks for a V100 or a T4 (no model constraint) and, though ``bestfit`` would take the
    first row… the V100 rows are cut: m1 → t. m2 asks for a V100 only → refused with the model
    verdict. n (no per-model quota) takes a V100."""
    s = FleetState()
    s.add_node("t", gpu_model="T4", num_gpus=2, cpu_milli=8000, memory_mib=8192)
    s.add_node("v", gpu_model="V100-16GB", num_gpus=2, cpu_milli=8000, memory_mib=8192)
    s.allocate(ONE, Bind("m0", "v", (0,)))
    teams = [TeamQuota("m", 4000, models=(("V100-16GB", 1000),)), TeamQuota("n", 4000)]
    book = QuotaBook(teams, {"m": 1000}, {"m": {"V100-16GB": 1000}})
    v100 = ResourceRequest(cpu_milli=1000, num_gpu=1, gpu_models=frozenset({"V100-16GB"}))
    pending = [unit("m1", "m", 1), unit("m2", "m", 2, v100), unit("n1", "n", 3, v100)]
    plan = plan_cycle(s, pending, POLICY, np.random.default_rng(0), quota=QuotaInput(book))
    assert {b.job_id: (b.node, b.gpus) for b in plan.binds} == {
        "m1": ("t", (0,)), "n1": ("v", (1,))}
    refused = {r.job_id: r.message for r in plan.refusals}
    assert refused == {"m2": "0/2 nodes are available: 1 node(s) didn't match Pod's node "
                             "affinity/selector, " + refused["m2"].split(", ", 1)[1]}
    # without the per-model quota m1 takes v's free GPU (bestfit: the fullest node)
    plain = QuotaBook([TeamQuota("m", 4000), TeamQuota("n", 4000)], {"m": 1000})
    plan = plan_cycle(s, pending[:1], POLICY, np.random.default_rng(0), quota=QuotaInput(plain))
    assert [(b.job_id, b.node) for b in plan.binds] == [("m1", "v")]


def test_per_model_quota_refuses_when_every_model_is_refused() -> None:
    s = FleetState()
    s.add_node("v", gpu_model="V100-16GB", num_gpus=2, cpu_milli=8000, memory_mib=8192)
    book = QuotaBook([TeamQuota("m", 4000, models=(("V100-16GB", 0),))])
    plan = plan_cycle(s, [unit("m1", "m", 1)], POLICY, np.random.default_rng(0),
                      quota=QuotaInput(book))
    assert plan.binds == []
    assert [r.message for r in plan.refusals] == [
        "team m: 1 V100-16GB GPU would exceed its V100-16GB quota of 0 and it has no cohort"]
