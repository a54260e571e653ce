"""Reclaim's claimants go first until they start (``control.nominations``), worked by hand."""

from __future__ import annotations

import numpy as np

from gpufleet.control.cycle import PendingUnit, QuotaInput, Victim, plan_cycle
from gpufleet.control.nominations import NOMINATED_S, Nominations
from gpufleet.decisions import Bind
from gpufleet.queueing.teams.quota import QuotaBook, TeamQuota
from gpufleet.state import ResourceRequest

from .test_cycle import fleet
from .test_cycle_quota import POLICY

ONE = ResourceRequest(cpu_milli=1000, num_gpu=1)
TEAMS = [TeamQuota("x", 2000, "lab"), TeamQuota("y", 2000, "lab")]


def test_the_module_docstrings_example() -> None:
    n = Nominations()
    n.apply([], ["y1"], 100.0)
    assert n.current(100.0) == ["y1"]
    n.apply(["y1"], [], 100.0)
    assert n.current(100.0) == []
    n.apply([], ["y1", "z1"], 100.0)
    n.apply([], ["z1"], 200.0)  # nominated again: keeps its first time
    assert n.current(100.0 + NOMINATED_S - 1) == ["y1", "z1"]
    assert n.current(100.0 + NOMINATED_S) == []  # both lapsed at 400


def test_a_reclaim_nominates_its_claimant() -> None:
    """x (2 GPUs of quota) runs four 1-GPU pods on the 4-GPU fleet, two borrowed from y; y1
    (within y's 2) reclaims x's newest, x3, and waits for it to leave: y1 is nominated."""
    s = fleet(False)
    victims = []
    for job, node, gpu, t in (("x0", "a", 0, 0), ("x1", "a", 1, 10), ("x2", "b", 0, 20),
                              ("x3", "b", 1, 30)):
        b = Bind(job, node, (gpu,))
        s.allocate(ONE, b)
        victims.append(Victim(job, 0, t, ONE, b, team="x", milli=1000))
    y1 = PendingUnit("y1", ONE, submit_s=40, team="y", milli=1000)
    plan = plan_cycle(s, [y1], POLICY, np.random.default_rng(0), victims=victims,
                      quota=QuotaInput(QuotaBook(TEAMS, {"x": 4000})))
    assert [e.job_id for e in plan.evictions] == ["x3"] and plan.nominated == ["y1"]
    assert plan.binds == []


def test_a_nominated_unit_goes_first() -> None:
    """One GPU free (three held by unmanaged work); x1 (t = 1) and y1 (t = 2) both within their
    teams' quotas. In queue order x1 binds; with y1 nominated, y1 does."""
    s = fleet(False)
    for job, node, gpu in (("u0", "a", 0), ("u1", "a", 1), ("u2", "b", 0)):
        s.allocate(ONE, Bind(job, node, (gpu,)))
    units = [PendingUnit("x1", ONE, submit_s=1, team="x", milli=1000),
             PendingUnit("y1", ONE, submit_s=2, team="y", milli=1000)]
    for nominated, bound in (((), "x1"), (["y1"], "y1")):
        plan = plan_cycle(s, units, POLICY, np.random.default_rng(0),
                          quota=QuotaInput(QuotaBook(TEAMS, {})), nominated=nominated)
        assert [b.job_id for b in plan.binds] == [bound]
