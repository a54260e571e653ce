"""control.reclaim as a case table worked by hand: a team's work within its quota takes back the
room other teams borrowed (step 5 of ``control.cycle``), planned through the cycle as both
drivers call it, and the reclaim plan itself (``plan_reclaims``) on two of those cases.

Fleet, teams and harness as in ``test_cycle_quota.py``: ``a`` and ``b``, two T4 GPUs each (4
GPUs), ``bestfit`` placement (the fullest node that fits; ties: the first row). Teams
(milli-GPU): cohort ``lab`` holds ``x`` (2 GPUs) and ``y`` (2 GPUs); ``s`` has 1 GPU and no
cohort; ``z`` (2 GPUs, cohort ``lab``) appears only where a case says so. Every pending unit
asks for one GPU (1000 milli) unless it says two.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from gpufleet.control.pending import PendingUnit, unit_shape
from gpufleet.control.reclaim import plan_reclaims
from gpufleet.decisions import Bind
from gpufleet.queueing.preemption import Victim
from gpufleet.queueing.teams.quota import QuotaBook, TeamQuota

from .test_cycle import fleet
from .test_cycle_quota import ONE, POLICY, STRADDLE, TEAMS, TWO, WITH_Z, X_FULL, Case, check, unit

CASES_R = [
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
    # -- gangs under reclaim -----------------------------------------------------------------
    Case("reclaim takes a borrowed gang whole: x runs x0, x1 on a and the 2-pod gang g (x2, x3"
         " on b, started 30); y1 needs 1 GPU, the newest borrowed workload is g → both its pods"
         " go, though one GPU would do",
         [unit("y1", "y", 40)], {}, {"y1": "0/2 nodes are available"},
         running=[("x0", "x", "a", (0,), 0), ("x1", "x", "a", (1,), 10),
                  ("x2", "x", "b", (0,), 30), ("x3", "x", "b", (1,), 30)],
         gangs={"x2": "g", "x3": "g"},
         evicted=[("x2", "reclaim: team x borrowed"), ("x3", "reclaim: team x borrowed")]),
]


@pytest.mark.parametrize("case", CASES_R, ids=lambda c: c.name)
def test_reclaim_case(case: Case) -> None:
    check(case)


def test_plan_reclaims_evicts_the_newest_borrowed_and_nominates_the_claimant() -> None:
    """The first case above, on ``plan_reclaims`` itself: x runs 4 GPUs (2 borrowed, x3 the
    newest, started 30) on the full fleet; y1 (1 GPU, within y's quota) is short 1 GPU of
    cohort quota → x3 is evicted, nothing unbound, and y1 waits for x3 to leave (nominated)
    rather than binding now. The fleet and the caller's book come back unchanged."""
    s = fleet(False)
    victims = []
    for job, team, node, gpus, started in X_FULL:
        b = Bind(job, node, gpus)
        s.allocate(ONE, b)
        victims.append(Victim(job, 0, started, ONE, b, team=team, milli=1000))
    book = QuotaBook(TEAMS, {"x": 4000})
    free = s.free_milli.copy()
    out, back, placed, waiting = plan_reclaims(
        s, [unit("y1", "y", 40)], victims, POLICY, book, np.random.default_rng(0), set())
    assert [(p.job_id, p.reason) for p in out] == [("x3", "reclaim: team x borrowed")]
    assert (back, placed, waiting) == (set(), {}, ["y1"])
    assert np.array_equal(free, s.free_milli) and book.usage == {"x": 4000, "y": 0, "s": 0}


def test_plan_reclaims_unbinds_an_unstarted_borrower_and_places_the_claimant_now() -> None:
    """Unmanaged u0 and u1 fill a; x1 (x at 2 of 2 before it, so borrowing) was bound to b's
    GPU 0 by this pass and has not started (``unstarted``). y1 (2 GPUs, within y's 2) finds the
    cohort 1 GPU short (x 3 + y 0 of 4 → 1 idle, 2 needed): x1 is the newest borrowed work, so
    it is unbound (not evicted), b is then empty, and y1 binds b's two GPUs in this plan."""
    s = fleet(False)
    for job, gpu in (("u0", 0), ("u1", 1)):
        s.allocate(ONE, Bind(job, "a", (gpu,)))
    x1 = Bind("x1", "b", (0,))
    s.allocate(ONE, x1)
    victims = [Victim("x1", 0, 100.0, ONE, x1, team="x", milli=1000)]
    book = QuotaBook(TEAMS, {"x": 3000})
    out, back, placed, waiting = plan_reclaims(
        s, [unit("y1", "y", 40, TWO)], victims, POLICY, book, np.random.default_rng(0), {"x1"})
    assert out == [] and back == {"x1"} and waiting == []
    assert {u: [(b.job_id, b.node, b.gpus) for b in bs] for u, bs in placed.items()} == {
        "y1": [("y1", "b", (0, 1))]}


def test_plan_reclaims_without_borrowed_victims_does_nothing() -> None:
    """Only unmanaged work runs (no victim has a team): nothing to reclaim from."""
    s = fleet(False)
    b = Bind("u0", "a", (0, 1))
    s.allocate(TWO, b)
    got = plan_reclaims(s, [unit("y1", "y", 40)], [Victim("u0", 0, 0.0, TWO, b)], POLICY,
                        QuotaBook(TEAMS), np.random.default_rng(0), set())
    assert got == ([], set(), {}, [])
