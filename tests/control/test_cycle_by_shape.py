"""One answer per shape (``plan_cycle(by_shape=True)``, the default) plans exactly what asking
every unit (``by_shape=False``) plans: random small queues on a full or nearly full fleet
(hypothesis draws the seed of each example's fleet and queue, with a fixed seed and a bounded
count of its own, so the run is deterministic and takes a few seconds).

Fleet: four nodes, ``a``/``b`` with four T4 GPUs and ``c``/``d`` with four V100s; running
1-GPU jobs (0–3 GPUs left free) of priority 0–2 for teams ``x``/``y`` (cohort ``lab``), ``z``
(alone) and none.
Pending: up to 80 units of 1, 2 or 4 GPUs of either model or any, priorities 0–3, some two-member
gangs, some with an eligibility mask, requeued or urgent, with or without team quotas — so the
questions the cycle answers once per shape (the refusal text, the never flag, a preemption
what-if that found no victims) are asked of many units of each shape.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from gpufleet.control.cycle import PendingUnit, QuotaInput, Victim, plan_cycle
from gpufleet.decisions import Bind
from gpufleet.placement import get_policy
from gpufleet.queueing.teams.quota import QuotaBook, TeamQuota
from gpufleet.state import FleetState, ResourceRequest

POLICY = get_policy("bestfit", tie_seed=0)
TEAMS = [TeamQuota("x", 4000, "lab"), TeamQuota("y", 4000, "lab"), TeamQuota("z", 2000)]
MODELS = (None, frozenset({"T4"}), frozenset({"V100-16GB"}))
TEAM_NAMES = ("x", "y", "z", None)
MASKS = (None, np.array([True, False, True, False]), np.array([False, True, True, True]))

def fleet(busy: list[tuple[int, str | None]]) -> tuple[FleetState, list[Victim], dict[str, int]]:
    s = FleetState()
    for name, model in (("a", "T4"), ("b", "T4"), ("c", "V100-16GB"), ("d", "V100-16GB")):
        s.add_node(name, gpu_model=model, num_gpus=4, cpu_milli=64_000, memory_mib=65_536)
    req = ResourceRequest(cpu_milli=1000, memory_mib=1024, num_gpu=1)
    victims = []
    usage: dict[str, int] = {}
    for k, (prio, team) in enumerate(busy):
        b = Bind(f"r{k}", "abcd"[k // 4], (k % 4,))
        s.allocate(req, b)
        victims.append(Victim(b.job_id, prio, float(k), req, b, team=team, milli=1000))
        if team is not None:
            usage[team] = usage.get(team, 0) + 1000
    return s, victims, usage


def units(rng: np.random.Generator, n: int) -> list[PendingUnit]:
    out = []
    for i in range(n):
        gpus = int(rng.choice((1, 2, 4)))
        gang = bool(rng.random() < 0.15)
        req = ResourceRequest(cpu_milli=1000, memory_mib=1024, num_gpu=gpus,
                              gpu_models=MODELS[int(rng.integers(3))])
        out.append(PendingUnit(
            f"u{i}", req, int(rng.integers(4)), members=(f"u{i}#0", f"u{i}#1") if gang else (),
            need=2 if gang else 1, submit_s=float(rng.integers(8)), seq=i,
            requeued=bool(rng.random() < 0.2), urgent=bool(rng.random() < 0.1),
            eligible=MASKS[int(rng.integers(3))], team=TEAM_NAMES[int(rng.integers(4))],
            milli=gpus * 1000 * (2 if gang else 1)))
    return out


@seed(20261207)
@settings(max_examples=80, deadline=None, derandomize=True)
@given(draw=st.integers(0, 2**32 - 1), quotas=st.booleans())
def test_by_shape_plans_what_every_unit_plans(draw: int, quotas: bool) -> None:
    rng = np.random.default_rng(draw)
    busy = [(int(rng.integers(3)), TEAM_NAMES[int(rng.integers(4))])
            for _ in range(16 - int(rng.integers(4)))]
    pending = units(rng, int(rng.integers(1, 80)))
    plans = []
    for by_shape in (True, False):
        s, victims, usage = fleet(busy)
        quota = QuotaInput(QuotaBook(TEAMS, usage)) if quotas else None
        plans.append(plan_cycle(s, pending, POLICY, np.random.default_rng(0),
                                victims=victims, quota=quota, by_shape=by_shape))
    got, want = plans
    assert got.decisions == want.decisions
    assert (got.blocked, got.started, got.nominated) == (want.blocked, want.started,
                                                         want.nominated)
