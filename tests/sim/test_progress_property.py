"""Every simulation finishes: random small workloads under random scenarios (hypothesis).

Workloads of up to 10 jobs — whole GPUs, fractions, MIG slices, gangs, priorities, deadlines,
with and without checkpoints — from teams ``a``, ``b``, ``c`` and unmanaged ``u``; scenarios
with team quotas (cohorts or none, borrowing limits, every budget action), fixed fleets or
``max_nodes`` caps, spot on or off, sharing on or off. Each example must either be refused up
front with an ``InputError`` naming the jobs no node of the scenario could run
(``sim.feasibility.check_runnable``, what ``gpufleet simulate`` runs first), or run to its end
within :data:`EVENTS_PER_JOB` events per job (the periodic scan, sample and deadline ticks not
counted: they follow the clock, not the work) and within :data:`DAYS` simulated days, with every
job finished except those the simulator gave up on, with the reason in the summary's
``given_up`` (``sim.progress``), and those the scenario's own limits exclude (:func:`excluded`).

A fixed seed and example count (150) keep ``make test`` deterministic and under a minute;
``GPUFLEET_PROPERTY_EXAMPLES`` and ``GPUFLEET_PROPERTY_SEED`` run more and other examples (every
failing example found becomes a hand-worked case in ``test_progress.py`` or in the tests of the
rule it broke).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from gpufleet.config import Scenario, default_scenario
from gpufleet.errors import InputError
from gpufleet.queueing.teams.settings import TeamsSettings
from gpufleet.sim.events import DEADLINE, NAMES, SAMPLE, SCAN
from gpufleet.sim.feasibility import check_runnable
from gpufleet.sim.jobrun import DONE
from gpufleet.sim.runner import Simulation, scenario_types
from gpufleet.state import GPU_MILLI, ResourceRequest
from gpufleet.traces.jobs import JobSpec

EXAMPLES = int(os.environ.get("GPUFLEET_PROPERTY_EXAMPLES", "150"))
SEED = int(os.environ.get("GPUFLEET_PROPERTY_SEED", "20261206"))
EVENTS_PER_JOB = 400
DAYS = 40
TYPES = ("g4dn.xlarge", "g4dn.12xlarge", "p4d.24xlarge")  # T4 ×1, T4 ×4, A100-40GB ×8 (MIG)
TEAMS = ("a", "b", "c")
PERIODIC = (SCAN, SAMPLE, DEADLINE)


@st.composite
def job(draw: Callable[..., Any], i: int) -> JobSpec:
    kind = draw(st.sampled_from(["whole", "whole", "fraction", "mig", "gang"]))
    models = draw(st.sampled_from([None, frozenset({"T4"}), frozenset({"A100-40GB"})]))
    if kind == "fraction":
        req = ResourceRequest(cpu_milli=1000, memory_mib=1024, num_gpu=1,
                              gpu_milli=draw(st.sampled_from([250, 500])), gpu_models=models)
        replicas = 1
    elif kind == "mig":
        req = ResourceRequest(cpu_milli=1000, memory_mib=1024, num_gpu=0,
                              mig_profile=draw(st.sampled_from(["1g.5gb", "3g.20gb"])),
                              gpu_models=frozenset({"A100-40GB"}))
        replicas = 1
    else:
        gpus = draw(st.sampled_from([1, 2, 4]) if kind == "whole" else st.sampled_from([2, 4]))
        req = ResourceRequest(cpu_milli=1000, memory_mib=1024, num_gpu=gpus, gpu_models=models)
        replicas = 1 if kind == "whole" else 2
    submit = float(draw(st.integers(0, 7200)))
    duration = float(draw(st.integers(60, 7200)))
    deadline = None
    if draw(st.booleans()):
        deadline = submit + duration * draw(st.sampled_from([1.2, 2.0, 4.0]))
    return JobSpec(f"j{i}", submit, duration, req, replicas=replicas,
                   tenant=draw(st.sampled_from([*TEAMS, "u"])),
                   priority=draw(st.sampled_from([0, 0, 5])),
                   checkpointable=draw(st.booleans()), deadline_s=deadline)


@st.composite
def workload(draw: Callable[..., Any]) -> list[JobSpec]:
    n = draw(st.integers(1, 10))
    return [draw(job(i)) for i in range(n)]


@st.composite
def teams(draw: Callable[..., Any]) -> TeamsSettings | None:
    if draw(st.booleans()):
        return None
    queues = []
    for name in TEAMS:
        if not draw(st.booleans()):
            continue  # an unmanaged team
        q: dict[str, Any] = {"name": name, "gpus": draw(st.sampled_from([0.5, 1, 2.5, 4, 8]))}
        if draw(st.booleans()):
            q["cohort"] = "lab"
            if draw(st.booleans()):
                q["borrowing_limit"] = draw(st.sampled_from([0, 1, 4]))
        if draw(st.booleans()):
            q["budget"] = {"usd": draw(st.sampled_from([1.0, 20.0, 500.0])), "period": "day",
                           "action": draw(st.sampled_from(
                               ["spot-only", "hold", "hold-and-drain", "notify"]))}
        queues.append(q)
    return TeamsSettings.model_validate({"queues": queues})


@st.composite
def scenario(draw: Callable[..., Any]) -> Scenario:
    update: dict[str, Any] = {
        "name": "prop", "instance_types": TYPES, "gpu_mtbf_hours": None,
        "spot": draw(st.booleans()), "sharing": draw(st.booleans()),
        "checkpointing": draw(st.booleans()), "teams": draw(teams()),
    }
    if draw(st.booleans()):
        update |= {"autoscaling": False, "fixed_nodes": draw(st.integers(1, 3))}
    else:
        update["max_nodes"] = draw(st.integers(1, 4))
    return default_scenario().model_copy(update=update)


def excluded(j: JobSpec, sc: Scenario) -> str | None:
    """Why the scenario's own limits keep ``j`` from ever running (None: nothing does)."""
    ts = sc.teams
    q = None if ts is None else next((q for q in ts.queues if q.name == j.tenant), None)
    if q is not None and q.gpus is not None and ts is not None and ts.enforce_quotas:
        milli = j.gpu_milli_total if j.request.mig_profile is None else GPU_MILLI
        if milli > q.gpus * GPU_MILLI:
            if q.cohort is None:
                return "larger than its team's quota, with no cohort to borrow from"
            if q.borrowing_limit is not None and \
                    milli - q.gpus * GPU_MILLI > q.borrowing_limit * GPU_MILLI:
                return "larger than its team's quota and borrowing limit"
            cohort = sum(x.gpus or 0 for x in ts.queues if x.cohort == q.cohort)
            if milli > cohort * GPU_MILLI:
                return "larger than its cohort's quota"
    if not sc.autoscaling or sc.max_nodes < 4:
        return "fleet limits"  # a fixed fleet or a node cap may not hold it: not asserted
    return None


def counted(sim: Simulation) -> Counter[int]:
    """Events handled per kind (the run's own dispatch table, wrapped)."""
    counts: Counter[int] = Counter()
    handlers = sim.sim._handlers
    for kind, handler in enumerate(list(handlers)):
        def wrapped(payload: Any, kind: int = kind, handler: Any = handler) -> None:
            counts[kind] += 1
            handler(payload)
        handlers[kind] = wrapped
    return counts


@seed(SEED)
@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(jobs=workload(), sc=scenario(), run_seed=st.integers(0, 3))
def test_every_run_finishes_or_says_which_jobs_cannot_run(jobs: list[JobSpec], sc: Scenario,
                                                           run_seed: int) -> None:
    try:
        check_runnable(jobs, sc, scenario_types(sc, jobs))
    except InputError as err:
        assert any(j.job_id in str(err) for j in jobs), str(err)
        return
    sim = Simulation(sc, run_seed, jobs)
    counts = counted(sim)
    budget = EVENTS_PER_JOB * len(jobs)
    t = 0.0
    while sim.run_until(t):
        work = sum(n for k, n in counts.items() if k not in PERIODIC)
        assert work <= budget, ("over the event budget", dict(
            (NAMES[k], n) for k, n in counts.items()))
        assert t <= DAYS * 86400.0, ("still running", sim.now)
        t += 86400.0
    given_up = sim.summary()["given_up"]
    left = [j.spec for j in sim.sim.jobs if j.state != DONE]
    unexplained = [j.job_id for j in left
                   if j.job_id not in given_up and excluded(j, sc) is None]
    assert not unexplained, unexplained
