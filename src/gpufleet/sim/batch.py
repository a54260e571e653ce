"""Run many scenarios over one workload, in worker processes, longest first.

Scenarios share nothing but the (read-only) workload, so each one runs in its own process and
the machine's cores run them side by side: on two cores the twelve default scenarios take about
half the serial wall time. Workers are started with ``spawn`` (the same on every platform, and
no forked copy of a parent's threads or open files); the workload is sent once per worker (the
pool's initializer), not once per scenario. Each worker reports progress, simulated day by
simulated day, on a queue the caller's progress bar drains.

Results are identical to a serial run: a scenario's simulation reads nothing from the process
it runs in — every random choice is seeded, and no decision depends on hash order
(``tests/sim/test_determinism.py`` runs one workload under two hash seeds).

A scenario is run only once when another one is **provably** the same run (``twin_of``): the
two differ in nothing but their name and the ``sharing`` and ``spot`` levers, every job's
effective request (what the scheduler places: ``control.admission.effective_request``) is the
same under both, and

* for a fixed fleet, which is sized from demand with or without sharing, the demand steps are
  the same. ``sharing`` reaches the simulation through those two only;
* where ``spot`` differs, spot is *inert* in the run that has it (``spot_inert``): no job's
  request tolerates the spot taint (with checkpointing off, none does: a job that cannot
  checkpoint never goes to spot), the fleet is autoscaled (a fixed spot fleet buys spot nodes
  whatever the jobs tolerate), no team budget can make work spot-only, and no deadline guard
  runs (so ``deadline_policy``, which only a guard reads, may differ too). Then the market is
  read only for spot offers that no pod may take, and it draws from its own random stream.

No seed depends on a scenario's name, so the second run would repeat the first event for
event; its row is the first's, marked ``derived_from``. On a trace without fractions or MIG
(Philly), that is ``gpufleet-no-sharing`` = ``gpufleet`` and ``chain-autoscaling-packing`` =
``chain-sharing``. (``gpufleet-no-checkpointing`` would equal them too, no job tolerating spot
without checkpoints, but headroom's placeholder pods do tolerate it.)

A scenario that differs from one that runs only in ``pricing``, on a fleet where no decision
reads a price (fixed, on-demand, no team budgets: ``rebill_of``), is **re-billed**, not re-run:
the same simulation's nodes are billed again at its rate (``sim.summary.fleet_cost_usd``, the
cloud's own per-node bill), so every figure equals a run's; only the cost-over-time series of
the report's plot is the run's scaled by the rate ratio (equal to within the per-node rounding
of a micro-dollar). On every workload, ``static-reserved`` is ``static-p99`` re-billed.

The order is *longest first* (the classic LPT rule for independent jobs on parallel machines):
a long scenario started last would leave the other cores idle while it runs alone. Length is
estimated from the levers: the on-demand → spot swap brings the most reclaims and moves (on
Philly 3–4× the CPU of a run without it); autoscaling brings the scale-up and consolidation
scans, which are most of the work otherwise; spot brings reclaims and replacements; packing and
sharing score placements.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from gpufleet.catalog.commitments import on_demand_rate
from gpufleet.collector import tune_collector
from gpufleet.config import Scenario
from gpufleet.control.admission import effective_request, tolerates_spot
from gpufleet.control.policies import deadline_guards_on, headroom_on, spot_swap_settings
from gpufleet.control.sizing import demand_steps
from gpufleet.control.value_of_time import DelayDefaults, with_delay
from gpufleet.sim.books import Series
from gpufleet.sim.runner import Simulation, build_market, horizon, scenario_types
from gpufleet.sim.summary import job_finishes
from gpufleet.traces.jobs import JobSource

Progress = Callable[[str, float, float], None]  # (scenario, jobs done, jobs total)


@dataclass(frozen=True)
class Outcome:
    """What the report needs from one scenario's run (picklable: it crosses processes)."""

    name: str
    summary: dict[str, Any]
    series: Series
    finishes: dict[str, float | None]
    spot_model: str


def spot_inert(sc: Scenario, jobs: JobSource) -> bool:
    """Spot can change nothing in ``sc``'s run (module docstring): autoscaled, no teams, no
    deadline guard, no headroom (its placeholder pods tolerate spot, ``control.headroom``), and
    no job's effective request tolerates the spot taint."""
    if not sc.autoscaling or sc.teams is not None or headroom_on(sc):
        return False
    if deadline_guards_on(sc) and any(j.deadline_s is not None and j.interruptible
                                      for j in jobs):
        return False
    delay = DelayDefaults.of(sc)  # a job's price of delay decides its toleration too
    return not any(tolerates_spot(effective_request(with_delay(j, delay), sc.sharing, sc.spot,
                                                    sc.checkpointing))
                   for j in jobs)


def twin_of(sc: Scenario, earlier: list[Scenario], jobs: JobSource) -> Scenario | None:
    """The first of ``earlier`` whose run is provably the same as ``sc``'s (module docstring),
    or None."""
    for other in earlier:
        same = {"name": sc.name, "sharing": sc.sharing, "spot": sc.spot}
        if other.spot != sc.spot:  # a deadline policy is read only by a guard on spot
            same["deadline_policy"] = sc.deadline_policy
        if other.model_copy(update=same) != sc:
            continue
        if other.sharing == sc.sharing and other.spot == sc.spot:
            return other  # the same settings under another name
        if other.spot != sc.spot and not spot_inert(sc if sc.spot else other, jobs):
            continue
        if any(effective_request(j, sc.sharing, sc.spot, sc.checkpointing)
               != effective_request(j, other.sharing, other.spot, other.checkpointing)
               for j in jobs):
            continue
        if not sc.autoscaling:
            a, b = demand_steps(jobs, sc.sharing), demand_steps(jobs, other.sharing)
            if not (np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])):
                continue
        return other
    return None


def rebill_of(sc: Scenario, earlier: list[Scenario]) -> Scenario | None:
    """The first of ``earlier`` that ``sc`` is, re-billed at its own ``pricing`` (module
    docstring), or None. Prices decide nothing in a run without autoscaling (no launch or
    consolidation chooses by price), without spot and without team budgets (whose verdicts
    read the spend)."""
    if sc.autoscaling or sc.spot or sc.teams is not None:
        return None
    for other in earlier:
        if other.pricing != sc.pricing and other.model_copy(
                update={"name": sc.name, "pricing": sc.pricing}) == sc:
            return other
    return None


def derived(source: Outcome, name: str, spot_model: str | None = None) -> Outcome:
    """``source``'s outcome as the row of ``name``, which was not run: the same figures, no
    time spent, and which row it repeats (``spot_model``: the market ``name``'s own run would
    have described, where it differs from the source's)."""
    summary = {**source.summary, "wall_seconds": 0.0, "events_per_s": 0.0, "cpu_seconds": 0.0,
               "derived_from": source.name}
    model = source.spot_model if spot_model is None else spot_model
    summary["spot_model"] = model
    return Outcome(name, summary, source.series, source.finishes, model)


def rebilled(sim: Simulation, source: Outcome, sc: Scenario) -> Outcome:
    """``source``'s run (``sim``, ended) billed at ``sc.pricing``: ``sc``'s row, not run."""
    summary = {**sim.summary(sc.pricing), "wall_seconds": 0.0, "events_per_s": 0.0,
               "cpu_seconds": 0.0, "derived_from": source.name}
    nodes = sim.sim.cloud.nodes.values()
    it = next(iter(nodes)).itype if nodes else None
    factor = (on_demand_rate(it, sc.pricing) / on_demand_rate(it, sim.scenario.pricing)
              if it is not None else 1.0)
    series = replace(source.series, cost_usd=[c * factor for c in source.series.cost_usd])
    return Outcome(sc.name, summary, series, source.finishes, source.spot_model)


def expected_work(sc: Scenario) -> tuple[int, ...]:
    """A sort key, larger = longer run (see the module docstring)."""
    return (int(spot_swap_settings(sc) is not None), int(sc.autoscaling),
            int(sc.spot), int(sc.packing) + int(sc.sharing), int(sc.checkpointing))


def run_one(sc: Scenario, seed: int, jobs: JobSource,
            progress: Callable[[float, float], None] | None = None) -> Outcome:
    """One scenario to the end; its summary gains ``cpu_seconds`` (process CPU time over the
    same span as ``wall_seconds``: on a loaded machine wall time says little)."""
    return run_billed(sc, (), seed, jobs, progress)[0]


def run_billed(sc: Scenario, rebills: Sequence[Scenario], seed: int, jobs: JobSource,
               progress: Callable[[float, float], None] | None = None) -> list[Outcome]:
    """``sc`` run to the end (``run_one``), then its outcome re-billed for each of ``rebills``
    (``rebill_of``)."""
    sim = Simulation(sc, seed=seed, jobs=jobs)
    summary = sim.run(progress)
    summary["cpu_seconds"] = sim.cpu_seconds
    out = Outcome(sc.name, summary, sim.sim.series, job_finishes(sim.sim), sim.spot_model)
    return [out, *(rebilled(sim, out, r) for r in rebills)]


_jobs: JobSource = []
_queue: Any = None


def _init_worker(jobs: JobSource, q: Any) -> None:
    global _jobs, _queue
    _jobs, _queue = jobs, q
    tune_collector()


def _work(sc: Scenario, rebills: tuple[Scenario, ...], seed: int) -> list[Outcome]:
    name = sc.name

    def tell(done: float, total: float) -> None:
        _queue.put((name, done, total))

    return run_billed(sc, rebills, seed, _jobs, tell)


@dataclass(frozen=True)
class RunPlan:
    """Which scenarios a batch simulates, and how the others get their rows: ``order``, the
    runs, longest first (``expected_work``); ``rebills``, by run name, the scenarios billed from
    that run (``rebill_of``); ``twins``, (not run, the run it repeats) (``twin_of``)."""

    order: list[Scenario]
    rebills: dict[str, list[Scenario]]
    twins: list[tuple[Scenario, Scenario]]


def plan_runs(jobs: JobSource, scenarios: list[Scenario]) -> RunPlan:
    """The runs ``run_all`` makes for ``scenarios`` over ``jobs`` (``RunPlan``); benchmarks
    that time the runs one by one ask it too, so they time what a batch runs."""
    twins: list[tuple[Scenario, Scenario]] = []
    rebills: dict[str, list[Scenario]] = {}
    unique: list[Scenario] = []
    for sc in scenarios:
        twin = twin_of(sc, unique, jobs)
        if twin is not None:
            twins.append((sc, twin))
            continue
        billed = rebill_of(sc, unique)
        if billed is not None:
            rebills.setdefault(billed.name, []).append(sc)
        else:
            unique.append(sc)
    return RunPlan(sorted(unique, key=expected_work, reverse=True), rebills, twins)


def run_all(
    jobs: JobSource, scenarios: list[Scenario], seed: int = 0, workers: int | None = None,
    on_progress: Progress | None = None,
) -> dict[str, Outcome]:
    """Every scenario's outcome, keyed by name in the order given (a provable repeat of an
    earlier one is not run: ``twin_of``; one that differs only in its prices is re-billed:
    ``rebill_of``). ``workers``: processes (default: one per CPU); 1 runs them here, one after
    another."""
    runs = plan_runs(jobs, scenarios)
    order, rebills, twins = runs.order, runs.rebills, runs.twins
    workers = min(workers or os.cpu_count() or 1, len(order))
    got: dict[str, Outcome] = {}
    if workers <= 1:
        for sc in order:
            cb = None
            if on_progress is not None:
                def cb(done: float, total: float, name: str = sc.name) -> None:
                    on_progress(name, done, total)
            for o in run_billed(sc, rebills.get(sc.name, ()), seed, jobs, cb):
                got[o.name] = o
    else:
        ctx = multiprocessing.get_context("spawn")
        q = ctx.Queue()
        with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker,
                                 initargs=(jobs, q)) as pool:
            futures = [pool.submit(_work, sc, tuple(rebills.get(sc.name, ())), seed)
                       for sc in order]
            left = set(futures)
            while left:
                done, left = wait(left, timeout=0.25, return_when=FIRST_COMPLETED)
                _drain(q, on_progress)
                for f in done:
                    for o in f.result():
                        got[o.name] = o
            _drain(q, on_progress)
    add_twins(got, twins, jobs, seed)
    return {sc.name: got[sc.name] for sc in scenarios}


def add_twins(got: dict[str, Outcome], twins: Sequence[tuple[Scenario, Scenario]],
              jobs: JobSource, seed: int) -> None:
    """Add to ``got`` (outcomes by name) the row of each scenario not run because it repeats
    another (``RunPlan.twins``), from that run's outcome."""
    for sc, twin in twins:
        # an inert market is still the row's own to describe
        model = market_model(sc, jobs, seed) if sc.spot != twin.spot else None
        got[sc.name] = derived(got[twin.name], sc.name, model)


def market_model(sc: Scenario, jobs: JobSource, seed: int) -> str:
    """The spot market description ``sc``'s own run would report (``Simulation.spot_model``)."""
    if not sc.spot:
        return "none"
    return build_market(sc, scenario_types(sc, jobs), horizon(jobs), seed)[1]


def _drain(q: Any, on_progress: Progress | None) -> None:
    while True:
        try:
            name, done, total = q.get_nowait()
        except queue.Empty:
            return
        if on_progress is not None:
            on_progress(name, done, total)
