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

A scenario is run only once when another one is **provably** the same run: the two differ in
nothing but their name and the ``sharing`` lever, every job's effective request (what the
scheduler places: ``control.admission.effective_request``) is the same under both, and — for a
fixed fleet, which is sized from demand with or without sharing — the demand steps are the same
(``twin_of``). ``sharing`` reaches the simulation through those two only, and no seed depends
on a scenario's name, so the second run would repeat the first event for event; its row is the
first's, marked ``derived_from``. On a trace without fractions or MIG (Philly), that is
``gpufleet-no-sharing`` = ``gpufleet`` and ``chain-sharing`` = ``chain-autoscaling-packing``.

The order is *longest first* (the classic LPT rule for independent jobs on parallel machines):
a long scenario started last would leave the other cores idle while it runs alone. Length is
estimated from the levers: autoscaling brings the scale-up and consolidation scans, which are
most of the work; spot brings reclaims and replacements; packing and sharing score placements.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpufleet.config import Scenario
from gpufleet.control.admission import effective_request
from gpufleet.control.sizing import demand_steps
from gpufleet.sim.books import Series
from gpufleet.sim.runner import Simulation
from gpufleet.sim.summary import job_finishes
from gpufleet.traces.jobs import JobSpec

Progress = Callable[[str, float, float], None]  # (scenario, jobs done, jobs total)


@dataclass(frozen=True)
class Outcome:
    """What the report needs from one scenario's run (picklable: it crosses processes)."""

    name: str
    summary: dict[str, Any]
    series: Series
    finishes: dict[str, float | None]
    spot_model: str


def twin_of(sc: Scenario, earlier: list[Scenario], jobs: list[JobSpec]) -> Scenario | None:
    """The first of ``earlier`` whose run is provably the same as ``sc``'s (module docstring),
    or None."""
    for other in earlier:
        if other.model_copy(update={"name": sc.name, "sharing": sc.sharing}) != sc:
            continue
        if other.sharing == sc.sharing:
            return other  # the same settings under another name
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


def derived(source: Outcome, name: str) -> Outcome:
    """``source``'s outcome as the row of ``name``, which was not run: the same figures, no
    time spent, and which row it repeats."""
    summary = {**source.summary, "wall_seconds": 0.0, "events_per_s": 0.0, "cpu_seconds": 0.0,
               "derived_from": source.name}
    return Outcome(name, summary, source.series, source.finishes, source.spot_model)


def expected_work(sc: Scenario) -> tuple[int, ...]:
    """A sort key, larger = longer run (see the module docstring)."""
    return (int(sc.autoscaling), int(sc.spot), int(sc.packing) + int(sc.sharing),
            int(sc.checkpointing))


def run_one(sc: Scenario, seed: int, jobs: list[JobSpec],
            progress: Callable[[float, float], None] | None = None) -> Outcome:
    """One scenario to the end; its summary gains ``cpu_seconds`` (process CPU time over the
    same span as ``wall_seconds``: on a loaded machine wall time says little)."""
    sim = Simulation(sc, seed=seed, jobs=jobs)
    summary = sim.run(progress)
    summary["cpu_seconds"] = sim.cpu_seconds
    return Outcome(sc.name, summary, sim.sim.series, job_finishes(sim.sim), sim.spot_model)


_jobs: list[JobSpec] = []
_queue: Any = None


def _init_worker(jobs: list[JobSpec], q: Any) -> None:
    global _jobs, _queue
    _jobs, _queue = jobs, q


def _work(sc: Scenario, seed: int) -> Outcome:
    name = sc.name

    def tell(done: float, total: float) -> None:
        _queue.put((name, done, total))

    return run_one(sc, seed, _jobs, tell)


def run_all(
    jobs: list[JobSpec], scenarios: list[Scenario], seed: int = 0, workers: int | None = None,
    on_progress: Progress | None = None,
) -> dict[str, Outcome]:
    """Every scenario's outcome, keyed by name in the order given (a provable repeat of an
    earlier one is not run: ``twin_of``). ``workers``: processes (default: one per CPU); 1
    runs them here, one after another."""
    twins: dict[str, str] = {}
    unique: list[Scenario] = []
    for sc in scenarios:
        twin = twin_of(sc, unique, jobs)
        if twin is None:
            unique.append(sc)
        else:
            twins[sc.name] = twin.name
    workers = min(workers or os.cpu_count() or 1, len(unique))
    order = sorted(unique, key=expected_work, reverse=True)
    got: dict[str, Outcome] = {}
    if workers <= 1:
        for sc in order:
            cb = None
            if on_progress is not None:
                def cb(done: float, total: float, name: str = sc.name) -> None:
                    on_progress(name, done, total)
            got[sc.name] = run_one(sc, seed, jobs, cb)
    else:
        ctx = multiprocessing.get_context("spawn")
        q = ctx.Queue()
        with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker,
                                 initargs=(jobs, q)) as pool:
            futures: dict[Future, str] = {pool.submit(_work, sc, seed): sc.name for sc in order}
            left = set(futures)
            while left:
                done, left = wait(left, timeout=0.25, return_when=FIRST_COMPLETED)
                _drain(q, on_progress)
                for f in done:
                    got[futures[f]] = f.result()
            _drain(q, on_progress)
    for name, source in twins.items():
        got[name] = derived(got[source], name)
    return {sc.name: got[sc.name] for sc in scenarios}


def _drain(q: Any, on_progress: Progress | None) -> None:
    while True:
        try:
            name, done, total = q.get_nowait()
        except queue.Empty:
            return
        if on_progress is not None:
            on_progress(name, done, total)
