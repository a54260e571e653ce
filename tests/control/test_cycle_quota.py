"""control.cycle with team quotas and budgets (steps 5 and 6 of its docstring), as a case table
worked by hand: the quota order, the verdicts, priority within a team, budgets. The reclaim
cases (``control.reclaim``) are in ``test_reclaim.py``, on the same fleet and harness.

Fleet of every case: ``a`` and ``b``, two T4 GPUs each (4 GPUs), ``bestfit`` placement (the
fullest node that fits; ties: the first row). Teams (milli-GPU): cohort ``lab`` holds ``x`` (2
GPUs) and ``y`` (2 GPUs); ``s`` has 1 GPU and no cohort; ``z`` (2 GPUs, cohort ``lab``) appears
only where a case says so. Every pending unit asks for one GPU (1000 milli) unless it says two.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from gpufleet.control.cycle import PendingUnit, QuotaInput, Victim, plan_cycle
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
    Case("a straddling unit goes before borrowers: y1 (y at 1 of 1.5) takes the one free GPU"
         " though fair share ranks x (10 < 100) first among borrowers; x1 (x at its 1) waits",
         [unit("x1", "x", 1), unit("y1", "y", 2)],
         {"y1": ("b", (1,))}, {"x1": "0/2 nodes are available"},
         running=[("u0", None, "a", (0, 1), 0), ("y0", "y", "b", (0,), 5)],
         teams=STRADDLE, extra_usage={"x": 1000}, history={"x": 10.0, "y": 100.0}),
    Case("a within-quota unit behind its team's straddling unit goes before borrowers: y at 1"
         " of 2 asks 2 (y1, straddling: fits the cohort's quota, not the fleet) then 1 (y2:"
         " within, had y1 not started); x borrows and fair share ranks it first (10 < 100), yet"
         " y2 takes the one free GPU and x1 waits",
         [unit("y1", "y", 1, TWO), unit("x1", "x", 2), unit("y2", "y", 3)],
         {"y2": ("b", (1,))}, {"y1": "0/2 nodes are available", "x1": "0/2 nodes are available"},
         running=[("x0", "x", "a", (0,), 0), ("x9", "x", "a", (1,), 0),
                  ("y0", "y", "b", (0,), 5)],
         teams=WITH_Z, history={"x": 10.0, "y": 100.0}),
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


def check(case: Case) -> None:
    """Plan ``case`` on the two-node fleet with its running work and quota book, and compare
    the binds, evictions and refusals with the ones worked by hand."""
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


@pytest.mark.parametrize("case", CASES_Q, ids=lambda c: c.name)
def test_cycle_quota_case(case: Case) -> None:
    check(case)


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
