"""CPU per scheduling pass against the backlog: ``control.cycle.plan_cycle`` with 1k–100k pending.

A fixed fleet of 128 nodes × 8 GPUs (A100 and T4, half each), every GPU but a few held by a
running 1-GPU job (priority 0), so that almost nothing of the queue fits — a busy cluster's
realistic case: each pass binds a handful of units and refuses the rest. The pending units are
drawn (seeded) from a realistic spread of shapes: 1, 2, 4 or 8 GPUs of either model or any,
1/8 of them two-member gangs of 8-GPU pods, priorities 0–2 (so priority preemption has
candidates and victims), submit times over a day.

Two settings per backlog size:

* ``no teams``: queue order, backfill, placement, priority preemption and the refusals
  (``explain``: the live driver's pass, which says why each pod waits);
* ``teams``: four team queues (``vision`` 384, ``nlp`` 256, ``speech`` 256 GPUs in cohort
  ``research``, ``recsys`` 128 alone), ``vision`` borrowing 128 GPUs of the running work: the
  quota order, the verdicts and quota reclaim's what-ifs (``control.reclaim``) run too.

Each cell runs ``--passes`` passes on the same snapshot (the state comes back unchanged from a
pass) and reports the median ``time.process_time`` per pass, and the slope: CPU per pass per
1,000 pending units, from a least-squares fit over the sizes. ``--reference`` also times each
cell with ``plan_cycle(by_shape=False)`` — every question asked of every unit rather than once
per shape — and compares the two plans, which must be equal.

The simulator (``--sim-sizes``; 0 skips it): a fixed fleet of 32 g4dn.metal (256 T4 GPUs) and
N day-long jobs (the same spread of shapes, teams off) all submitted in the first minute, so
that the fleet fills within seconds and the rest queues. Two figures: the CPU of the whole
first two minutes per arrival (each arrival is a scheduling pass that tries the new job only,
plus the pass's other inputs: victims, gang room), and the median CPU of a pass after capacity
was freed (``JobLifecycle.capacity_freed``: every pending job is tried again).

Usage::

    .venv/bin/python benchmarks/bench_backlog.py [--sizes 1000,10000,100000] [--passes 5]
        [--sim-sizes 1000,10000,30000] [--reference] [--format table|json|csv|markdown]

The process runs with the controller's and the simulator's collector settings
(``gpufleet.collector``); ``GPUFLEET_GC=default`` times it under CPython's defaults.

Progress goes to stderr; the table to stdout.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from rich.console import Console

from gpufleet.collector import tune_collector
from gpufleet.config import default_scenario
from gpufleet.control.cycle import CyclePlan, PendingUnit, QuotaInput, Victim, plan_cycle
from gpufleet.decisions import Bind
from gpufleet.placement import get_policy
from gpufleet.placement.policy import Policy
from gpufleet.queueing.teams.quota import QuotaBook, TeamQuota
from gpufleet.sim.runner import Simulation
from gpufleet.state import FleetState, ResourceRequest
from gpufleet.tables import DataTable, OutputFormat, print_tables
from gpufleet.traces.jobs import JobSpec

NODES = 128
GPUS = 8
FREE = 6  # GPUs left free on the fleet (on the last nodes): a few units bind each pass
TEAMS = [TeamQuota("vision", 384_000, "research"), TeamQuota("nlp", 256_000, "research"),
         TeamQuota("speech", 256_000, "research"), TeamQuota("recsys", 128_000)]
RUNNING_TEAMS = ("vision", "nlp", "speech", "recsys")


def fleet() -> tuple[FleetState, list[Victim], dict[str, int]]:
    """The full fleet, its running victims and the teams' usage (milli)."""
    s = FleetState()
    for i in range(NODES):
        model = "A100-80GB" if i % 2 == 0 else "T4"
        s.add_node(f"n{i:03d}", gpu_model=model, num_gpus=GPUS, cpu_milli=96_000,
                   memory_mib=1_000_000)
    victims = []
    usage: dict[str, int] = {}
    req = ResourceRequest(cpu_milli=1000, memory_mib=1024, num_gpu=1)
    k = 0
    total = NODES * GPUS - FREE
    for i in range(NODES):
        for g in range(GPUS):
            if k >= total:
                break
            # vision runs 512 GPUs (128 borrowed), nlp 192, speech 192, recsys 122
            team = ("vision" if k < 512 else "nlp" if k < 704 else "speech" if k < 896
                    else "recsys")
            b = Bind(f"r{k}", f"n{i:03d}", (g,))
            s.allocate(req, b)
            victims.append(Victim(b.job_id, 0, float(k), req, b, team=team, milli=1000))
            usage[team] = usage.get(team, 0) + 1000
            k += 1
    return s, victims, usage


def backlog(n: int, seed: int) -> list[PendingUnit]:
    """``n`` pending units of a realistic spread of shapes (module docstring)."""
    rng = np.random.default_rng(seed)
    models = (None, frozenset({"A100-80GB"}), frozenset({"T4"}))
    out = []
    for i in range(n):
        gpus = int(rng.choice((1, 2, 4, 8), p=(0.5, 0.2, 0.15, 0.15)))
        model = models[int(rng.integers(3))]
        team = RUNNING_TEAMS[int(rng.choice(4, p=(0.4, 0.3, 0.2, 0.1)))]
        req = ResourceRequest(cpu_milli=1000 * gpus, memory_mib=1024 * gpus, num_gpu=gpus,
                              gpu_models=model)
        prio = int(rng.choice(3, p=(0.7, 0.2, 0.1)))
        t = float(rng.uniform(0, 86_400))
        if i % 8 == 7:
            req = ResourceRequest(cpu_milli=8000, memory_mib=8192, num_gpu=8, gpu_models=model)
            out.append(PendingUnit(f"g{i}", req, prio, members=(f"g{i}#0", f"g{i}#1"), need=2,
                                   submit_s=t, seq=i, team=team, milli=16_000))
        else:
            out.append(PendingUnit(f"p{i}", req, prio, submit_s=t, seq=i, team=team,
                                   milli=gpus * 1000))
    return out


def one_pass(state: FleetState, units: Sequence[PendingUnit], victims: Sequence[Victim],
             quota: QuotaInput | None, reference: bool, policy: Policy
             ) -> tuple[float, CyclePlan]:
    t0 = time.process_time()
    plan = plan_cycle(state, units, policy, np.random.default_rng(0), victims=victims,
                      quota=quota, **_index_kw(reference))
    return time.process_time() - t0, plan


def _index_kw(reference: bool) -> dict[str, Any]:
    """The reference pass, ``by_shape=False`` (every unit asked), where the cycle has the
    option (the benchmark also runs on a tree from before it: ``--reference`` is then off)."""
    return {"by_shape": False} if reference and _has_index() else {}


def _has_index() -> bool:
    import inspect
    return "by_shape" in inspect.signature(plan_cycle).parameters


def sim_jobs(n: int, seed: int) -> list[JobSpec]:
    """``n`` day-long jobs submitted in the first minute (module docstring)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        gpus = int(rng.choice((1, 2, 4, 8), p=(0.5, 0.2, 0.15, 0.15)))
        req = ResourceRequest(cpu_milli=1000 * gpus, memory_mib=1024 * gpus, num_gpu=gpus)
        out.append(JobSpec(f"j{i}", float(rng.uniform(0, 60)), 86_400.0, req,
                           replicas=2 if i % 8 == 7 else 1,
                           priority=int(rng.choice(3, p=(0.7, 0.2, 0.1)))))
    return out


def sim_cell(n: int, seed: int, passes: int) -> tuple[float, list[float], int]:
    """(CPU s per arrival over the first two minutes, CPU s of each freed pass, pending)."""
    sc = default_scenario().model_copy(update={
        "autoscaling": False, "spot": False, "fixed_nodes": 32, "gpu_mtbf_hours": None,
        "instance_types": ("g4dn.metal",)})
    sim = Simulation(sc, seed, sim_jobs(n, seed))
    t0 = time.process_time()
    sim.run_until(120.0)
    arrival = (time.process_time() - t0) / n
    life = sim.sim.life
    freed = []
    for _ in range(passes):
        life.capacity_freed()
        t0 = time.process_time()
        life.plan_pass()
        freed.append(time.process_time() - t0)
    return arrival, freed, len(life.pending)


def slope(xs: Sequence[int], ys: Sequence[float]) -> float | None:
    """Least-squares CPU seconds per 1,000 units (None with one size)."""
    if len(xs) < 2:
        return None
    return float(np.polyfit(np.asarray(xs, float) / 1000, np.asarray(ys, float), 1)[0])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000",
                    help="pending units per cell, comma-separated")
    ap.add_argument("--passes", type=int, default=5, help="passes per cell (the median is kept)")
    ap.add_argument("--sim-sizes", default="1000,10000,30000",
                    help="jobs per simulator cell, comma-separated; 0: no simulator cells")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reference", action="store_true",
                    help="also time the pass with the shape index off and compare the plans")
    ap.add_argument("--format", choices=[f.value for f in OutputFormat], default="table")
    a = ap.parse_args(argv)
    tune_collector()  # as the controller and the simulator run (GPUFLEET_GC=default: CPython's)
    try:
        sizes = [int(x) for x in a.sizes.split(",")]
        sim_sizes = [int(x) for x in a.sim_sizes.split(",") if int(x) > 0]
    except ValueError:
        ap.error(f"--sizes, --sim-sizes: expected comma-separated integers, got {a.sizes!r}, "
                 f"{a.sim_sizes!r}")
    if not sizes or min(sizes) < 1 or a.passes < 1:
        ap.error("--sizes and --passes must be positive")
    err = Console(stderr=True)
    policy = get_policy("bestfit", tie_seed=0)
    state, victims, usage = fleet()
    settings: list[tuple[str, QuotaInput | None]] = [
        ("no teams", None), ("teams", QuotaInput(QuotaBook(TEAMS, usage)))]
    modes = [False, True] if a.reference and _has_index() else [False]
    table = DataTable(
        f"plan_cycle CPU per pass: {NODES} nodes × {GPUS} GPUs, {NODES * GPUS - FREE} busy",
        ["setting", "pass", "pending", "median ms", "min ms", "binds", "evictions", "refusals"],
        numeric=[False, False, True, True, True, True, True, True],
        caption=f"{a.passes} passes per cell, time.process_time; slope = ms per pass per 1k "
                "pending units")
    slopes = DataTable("slope: CPU ms per pass per 1,000 pending units",
                       ["setting", "pass", "ms per 1k"], numeric=[False, False, True])
    for name, quota in settings:
        for ref in modes:
            label = "reference (every unit)" if ref else "by shape" if _has_index() else "as is"
            med: list[float] = []
            for n in sizes:
                units = backlog(n, a.seed)
                times = []
                plan = None
                for k in range(a.passes):
                    took, plan = one_pass(state, units, victims, quota, ref, policy)
                    times.append(took)
                    err.print(f"{name} / {label} / {n:,}: pass {k + 1} {took * 1000:.1f} ms",
                              style="dim")
                assert plan is not None
                if len(modes) > 1 and not ref:
                    _, other = one_pass(state, units, victims, quota, True, policy)
                    if (other.decisions, other.blocked, other.started, other.nominated) != (
                            plan.decisions, plan.blocked, plan.started, plan.nominated):
                        err.print(f"PLANS DIFFER: {name} / {n:,}", style="bold red")
                        return 1
                m = statistics.median(times)
                med.append(m)
                table.add_row(name, label, f"{n:,}", f"{m * 1000:.1f}", f"{min(times) * 1000:.1f}",
                              f"{len(plan.binds):,}", f"{len(plan.evictions):,}",
                              f"{len(plan.refusals):,}",
                              values=[name, label, n, round(m * 1000, 2),
                                      round(min(times) * 1000, 2), len(plan.binds),
                                      len(plan.evictions), len(plan.refusals)])
            s = slope(sizes, med)
            slopes.add_row(name, label, "–" if s is None else f"{s * 1000:.2f}",
                           values=[name, label, None if s is None else round(s * 1000, 3)])
    tables = [table, slopes]
    if sim_sizes:
        st = DataTable("simulator: 32 × g4dn.metal (256 T4), N day-long jobs in the first minute",
                       ["jobs", "pending", "ms per arrival", "freed pass median ms"],
                       numeric=[True, True, True, True],
                       caption=f"{a.passes} freed passes per cell, time.process_time")
        for n in sim_sizes:
            arrival, freed, pending = sim_cell(n, a.seed, a.passes)
            m = statistics.median(freed)
            err.print(f"simulator / {n:,}: {arrival * 1000:.2f} ms per arrival, freed pass "
                      f"{m * 1000:.1f} ms", style="dim")
            st.add_row(f"{n:,}", f"{pending:,}", f"{arrival * 1000:.2f}", f"{m * 1000:.1f}",
                       values=[n, pending, round(arrival * 1000, 3), round(m * 1000, 2)])
        tables.append(st)
    print_tables(tables, OutputFormat(a.format), Console())
    return 0


if __name__ == "__main__":
    sys.exit(main())
