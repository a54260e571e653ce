"""Deadline policies on hand-made traces with hand-worked answers, and the contract's surface.

The small job used throughout: gap 100 s, C = 1000 s (10 ticks of work), d = 200 s (2 ticks),
D = 2000 s (20 ticks). A fresh launch therefore needs 12 held ticks; the reserve of ``markov``
starts at D − C − d = 800 s.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from gpufleet.errors import InputError
from gpufleet.market.deadline import (
    DEFAULT_DEADLINE_POLICY,
    Choice,
    DeadlineJob,
    get_deadline_policy,
    list_deadline_policies,
    safety_net,
)
from gpufleet.market.deadline.bench.optimal import optimal_costs
from gpufleet.market.deadline.bench.ticksim import run_batch, run_controller

JOB = DeadlineJob(task_s=1000, deadline_s=2000, overhead_s=200, gap_s=100)
SP = JOB.tick_cost(Choice.SPOT)
OD = JOB.tick_cost(Choice.ON_DEMAND)
POLICIES = ("on_demand", "greedy", "up", "markov", "smdp")


def trace(*runs: tuple[int, int]) -> np.ndarray:
    """(value, ticks) runs → int8 availability of 24 ticks (padding after the deadline: 0)."""
    out = np.concatenate([np.full(n, v, dtype=np.int8) for v, n in runs])
    return np.concatenate([out, np.zeros(24 - len(out), dtype=np.int8)])


ALWAYS = trace((1, 24))
NEVER = trace((0, 24))
EARLY_THEN_GAP = trace((1, 9), (0, 11))  # spot for 9 ticks, then nothing to the deadline
LATE_THEN_GAP = trace((0, 6), (1, 8), (0, 6))  # spot only in ticks 6..13, a gap before D

# (trace, policy, spot ticks, on-demand ticks), worked by hand in the comments
CASES = [
    # always up: everyone but on-demand runs 12 spot ticks (2 of overhead + 10 of work)
    (ALWAYS, "on_demand", 0, 12),
    (ALWAYS, "greedy", 12, 0),
    (ALWAYS, "up", 12, 0),
    (ALWAYS, "markov", 12, 0),
    (ALWAYS, "smdp", 12, 0),
    # never up: 12 on-demand ticks whenever they start (greedy at t=600 when T2=1400 ≥ R;
    # UP at t=100 when behind the line; markov at t=0, where slack 800 is not > reserve 800)
    (NEVER, "on_demand", 0, 12),
    (NEVER, "greedy", 0, 12),
    (NEVER, "up", 0, 12),
    (NEVER, "markov", 0, 12),
    (NEVER, "smdp", 0, 12),
    # 9 spot ticks make 700 s; the 300 s left need 5 on-demand ticks (greedy and markov wait
    # until t=1300, UP is ahead of its line until the net fires at t=1300 too)
    (EARLY_THEN_GAP, "on_demand", 0, 12),
    (EARLY_THEN_GAP, "greedy", 9, 5),
    (EARLY_THEN_GAP, "up", 9, 5),
    (EARLY_THEN_GAP, "markov", 9, 5),
    (EARLY_THEN_GAP, "smdp", 9, 5),  # waits to the net at t=1300 like greedy
    # greedy waits to t=600 where the net forces on-demand — and keeps it (T2 ≥ R) to the end.
    # UP: OD from t=100 (behind), stays while done ≤ (t+2d)/2 up to t=1000, spot 1100..1300
    # (two overhead ticks, 100 s), preempted at 1400, OD at 1500 for 3 ticks: 3 spot + 13 OD.
    # markov: OD at t=0; at t=600 slack 600 ≥ reserve 512 → spot to the end: 6 OD + 8 spot.
    (LATE_THEN_GAP, "on_demand", 0, 12),
    (LATE_THEN_GAP, "greedy", 0, 12),
    (LATE_THEN_GAP, "up", 3, 13),
    (LATE_THEN_GAP, "markov", 8, 6),
    # smdp: the prior (outages of ~20 ticks, Lomax: half of them over within 6 ticks) makes
    # waiting free until the net: idle to t=500; at t=600 spot is back but T2 = 1400 ≥ R, the
    # net sends it to OD, where with no slack left it stays: 12 OD — the unlucky case.
    (LATE_THEN_GAP, "smdp", 0, 12),
]
OPTIMA = [  # the cheapest schedules, by hand
    (ALWAYS, 12 * SP),
    (NEVER, 12 * OD),
    (EARLY_THEN_GAP, 9 * SP + 5 * OD),  # fewer spot ticks only add on-demand ones
    (LATE_THEN_GAP, 8 * SP + 6 * OD),  # 600 s on spot, 400 s (+d) on OD in ticks 0..5 or 14..19
]


@pytest.mark.parametrize(("avail", "policy", "spot", "od"), CASES)
def test_hand_worked_traces(avail: np.ndarray, policy: str, spot: int, od: int) -> None:
    res = run_controller(JOB, get_deadline_policy(policy).start(JOB), avail)
    assert res.met
    assert (res.spot_ticks, res.on_demand_ticks) == (spot, od)
    assert res.cost == pytest.approx(spot * SP + od * OD)
    batch = run_batch(JOB, get_deadline_policy(policy).batch(JOB, 1), avail[None, :])
    assert batch.cost[0] == res.cost and batch.end_s[0] == res.end_s


@pytest.mark.parametrize(("avail", "cost"), OPTIMA)
def test_optimum_on_hand_worked_traces(avail: np.ndarray, cost: float) -> None:
    assert optimal_costs(JOB, avail[None, :])[0] == pytest.approx(cost)


class Scripted:
    """Plays a fixed choice sequence, whatever it sees."""

    def __init__(self, seq: tuple[Choice, ...], gap_s: float) -> None:
        self.seq, self.gap_s = seq, gap_s

    def decide(self, *, t_s: float, **_: object) -> Choice:
        return self.seq[round(t_s / self.gap_s)]


def brute_force(job: DeadlineJob, avail: np.ndarray) -> float:
    """Cheapest cost over every choice sequence, each run through the real tick model."""
    k = job.deadline_ticks
    best = np.inf
    for seq in itertools.product((Choice.IDLE, Choice.SPOT, Choice.ON_DEMAND), repeat=k):

        res = run_controller(job, Scripted(seq, job.gap_s), avail[:k])
        if res.met:
            best = min(best, res.cost)
    return best


@pytest.mark.parametrize("seed", range(4))
def test_optimum_equals_brute_force(seed: int) -> None:
    # d = 150 s is not a multiple of the gap: partial-tick progress, lattice unit 50 s
    job = DeadlineJob(task_s=300, deadline_s=800, overhead_s=150, gap_s=100)
    avail = np.random.default_rng(seed).integers(0, 2, size=8).astype(np.int8)
    assert optimal_costs(job, avail[None, :])[0] == pytest.approx(brute_force(job, avail))


def markov_trace(rng: np.random.Generator, n: int, p_stay_up: float, p_stay_down: float
                 ) -> np.ndarray:
    out = np.empty(n, dtype=np.int8)
    state = int(rng.integers(0, 2))
    for i in range(n):
        out[i] = state
        stay = p_stay_up if state else p_stay_down
        state = state if rng.random() < stay else 1 - state
    return out


@pytest.mark.parametrize(("deadline", "overhead"), [(1300, 200), (2000, 200), (2600, 50)])
def test_optimum_never_above_any_policy(deadline: float, overhead: float) -> None:
    job = DeadlineJob(task_s=1000, deadline_s=deadline, overhead_s=overhead, gap_s=100)
    rng = np.random.default_rng(7)
    avail = np.stack([markov_trace(rng, 40, rng.uniform(0.5, 0.97), rng.uniform(0.5, 0.97))
                      for _ in range(60)])
    best = optimal_costs(job, avail)
    for name in POLICIES:
        res = run_batch(job, get_deadline_policy(name).batch(job, len(avail)), avail)
        assert res.met.all(), name
        assert (best <= res.cost + 1e-12).all(), name


def test_registry_and_contract_names() -> None:
    assert set(POLICIES) <= set(list_deadline_policies())
    assert get_deadline_policy("ours") is get_deadline_policy(DEFAULT_DEADLINE_POLICY)
    with pytest.raises(InputError, match=r"unknown deadline policy 'nope'.*greedy"):
        get_deadline_policy("nope")
    assert [int(c) for c in Choice] == [0, 1, 2]


def test_controller_rejects_skipped_ticks() -> None:
    ctl = get_deadline_policy("markov").start(JOB)
    ctl.decide(t_s=0, done_s=0, holding=Choice.IDLE, overhead_left_s=0, spot_available=True,
               history=np.array([1], dtype=np.int8))
    with pytest.raises(ValueError, match="out of order"):
        ctl.decide(t_s=200, done_s=0, holding=Choice.SPOT, overhead_left_s=0,
                   spot_available=True, history=np.array([1, 1, 1], dtype=np.int8))


@pytest.mark.parametrize(
    ("t", "done", "holding", "overhead", "proposal", "expected"),
    [
        # R = floor((2000-600)/100)*100 = 1400; T2 = ceil((1000+400)/100)*100 = 1400 ≥ R
        (600, 0, Choice.IDLE, 0, Choice.IDLE, Choice.ON_DEMAND),
        (500, 0, Choice.IDLE, 0, Choice.IDLE, Choice.IDLE),  # R = 1500 > T2
        # T1 = 1200 ≥ R = 1200 on spot with the overhead paid: keep spot
        (800, 0, Choice.SPOT, 0, Choice.IDLE, Choice.SPOT),
        (800, 0, Choice.SPOT, 100, Choice.SPOT, Choice.ON_DEMAND),  # overhead still due
        (600, 0, Choice.SPOT, 0, Choice.IDLE, Choice.IDLE),  # T2 rule spares a job on spot
    ],
)
def test_safety_net_table(t: float, done: float, holding: Choice, overhead: float,
                          proposal: Choice, expected: Choice) -> None:
    out = safety_net(np.array([proposal], dtype=np.int8), job=JOB, t_s=t,
                     done_s=np.array([done], dtype=float),
                     holding=np.array([holding], dtype=np.int8),
                     overhead_left_s=np.array([overhead], dtype=float))
    assert Choice(int(out[0])) == expected


def test_bad_job_values() -> None:
    with pytest.raises(InputError, match="task_s"):
        DeadlineJob(task_s=0, deadline_s=10, overhead_s=0, gap_s=1)
    with pytest.raises(InputError, match="overhead_s"):
        DeadlineJob(task_s=1, deadline_s=10, overhead_s=-1, gap_s=1)
