"""Where a simulation's CPU goes, by layer, and what that bounds: could compiled kernels alone
bring the Philly replay to 60 s?

A goal of all twelve default scenarios on Philly in ≤ 60 s wall on a 2-core machine suggests
compiling the placement and scan kernels (numba, or Rust via PyO3). Before anyone writes a
kernel, Amdahl's law says what it can buy: whatever runs *outside* the kernels stays.
This benchmark runs the scenarios a batch runs (``sim.batch.plan_runs``: twins and re-billed
rows are not run) with a clock around each layer's entry points, and charges every CPU second
to the innermost layer running (a layer's own time excludes the layers it calls):

* **kernels**, the pure, array-shaped policy steps:
  placement (``Policy.place``: filters, FGD scores, select), scale-up packing
  (``ScaleUpPolicy.plan`` / ``launch_group``: the bin packing and offer choice, also for the
  spot swap's plans) and consolidation (``DisruptionPolicy.decide``);
* **rule orchestration** in ``control/`` around them: the scheduling cycle's own time
  (``plan_cycle``: queue order, gang, quota, preemption), the swap's walk (``first_swap``:
  candidates, work done, pod lists), and the scan's and the pass's own time in the driver
  (``ClusterSim._on_scan`` with ``sim.autoscaler``, ``JobLifecycle.plan_pass``: views, pending
  pods, applying plans);
* **the rest**: the event loop, job and node state, billing and the books.

Then, for each scenario and in total, the CPU left if the kernels cost nothing, and the least
wall time that leaves on ``--cores`` cores (a batch's wall time is at least its longest run and
at least its total CPU over the cores). Each clocked call reads the CPU clock twice (about
0.5 µs each here); with ``--baseline`` the last line compares the runs with and without it.

Usage (Philly, all default scenarios, 2 workers; about 7 minutes):

    .venv/bin/python benchmarks/bench_sim_layers.py [--limit N] [--workers 2]
        [--scenarios a,b] [--trace PATH] [--baseline]
"""

from __future__ import annotations

import argparse
import importlib
import multiprocessing
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from gpufleet.config import Scenario, default_scenarios, scenarios_named
from gpufleet.datapaths import data_dir
from gpufleet.sim.batch import plan_runs, run_one
from gpufleet.traces.jobs import JobSpec, load_jobs

KERNELS = ("placement", "scale-up packing", "consolidation")
RULES = ("cycle rules", "swap walk", "scan driver", "pass driver")
REST = "event loop + state"
FREE_K = "CPU s, kernels free"
FREE_KR = "CPU s, kernels + rules free"
# (module, class or None, attribute, layer)
TARGETS = (
    ("gpufleet.placement.policy", "Policy", "place", "placement"),
    ("gpufleet.provisioning.scale_up", "ScaleUpPolicy", "plan", "scale-up packing"),
    ("gpufleet.provisioning.scale_up", "ScaleUpPolicy", "launch_group", "scale-up packing"),
    ("gpufleet.provisioning.disruption.policy", "DisruptionPolicy", "decide", "consolidation"),
    ("gpufleet.sim.jobs", None, "plan_cycle", "cycle rules"),
    ("gpufleet.sim.autoscaler", None, "first_swap", "swap walk"),
    ("gpufleet.sim.cluster", "ClusterSim", "_on_scan", "scan driver"),
    ("gpufleet.sim.jobs", "JobLifecycle", "plan_pass", "pass driver"),
)


class LayerClock:
    """CPU seconds per layer, each charged to the innermost layer running (a stack of open
    calls: a call's time less its nested layers' time is its layer's own)."""

    def __init__(self) -> None:
        self.own: dict[str, float] = {}
        self.calls = 0
        self._stack: list[list[float]] = []  # [start, nested time] per open call

    def wrap(self, layer: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        clock = time.process_time
        stack, own = self._stack, self.own

        def timed(*args: Any, **kwargs: Any) -> Any:
            frame = [clock(), 0.0]
            stack.append(frame)
            try:
                return fn(*args, **kwargs)
            finally:
                stack.pop()
                spent = clock() - frame[0]
                own[layer] = own.get(layer, 0.0) + spent - frame[1]
                if stack:
                    stack[-1][1] += spent
                self.calls += 1

        return timed

    def install(self) -> None:
        for module, cls, attr, layer in TARGETS:
            owner: Any = importlib.import_module(module)
            if cls is not None:
                owner = getattr(owner, cls)
            setattr(owner, attr, self.wrap(layer, getattr(owner, attr)))


def _run(sc: Scenario, jobs: list[JobSpec], timed: bool) -> tuple[float, dict[str, float], int]:
    """One scenario in a fresh worker: total CPU, CPU by layer (empty when not ``timed``),
    clocked calls."""
    clock = LayerClock()
    if timed:
        clock.install()
    c0 = time.process_time()
    run_one(sc, 0, jobs)
    return time.process_time() - c0, clock.own, clock.calls


def bound(rests: list[float], cores: int) -> float:
    """The least wall time for independent runs of these CPU times on ``cores`` cores: at
    least the longest, and at least the total shared out."""
    return max(max(rests, default=0.0), sum(rests) / cores)


def split(cpu: float, own: dict[str, float]) -> dict[str, float]:
    """A run's CPU by column: the total, each clocked layer, the rest, and what is left with
    the kernels (and then the rules too) at no cost."""
    layers = {k: own.get(k, 0.0) for k in (*KERNELS, *RULES)}
    kern = sum(layers[k] for k in KERNELS)
    rest = cpu - sum(layers.values())
    return {"CPU s": cpu, **layers, REST: rest, FREE_K: cpu - kern, FREE_KR: rest}


def table(title: str, rows: dict[str, tuple[float, dict[str, float]]], cores: int) -> Table:
    t = Table(title=title)
    cols = ("CPU s", *KERNELS, "kernels %", *RULES, REST, FREE_K, FREE_KR)
    t.add_column("scenario")
    for c in cols:
        t.add_column(c, justify="right")

    def add(name: str, v: dict[str, float], **kw: Any) -> None:
        kern = sum(v[k] for k in KERNELS)
        share = f"{kern / v['CPU s']:.0%}" if v["CPU s"] else "-"
        t.add_row(name, *(share if c == "kernels %" else f"{v[c]:.1f}" for c in cols), **kw)

    splits = {name: split(cpu, own) for name, (cpu, own) in rows.items()}
    for name, v in splits.items():
        add(name, v)
    add("total", {c: sum(v[c] for v in splits.values()) for c in split(0.0, {})},
        end_section=True)
    least = {c: f"{bound([v[c] for v in splits.values()], cores):.1f}"
             for c in ("CPU s", FREE_K, FREE_KR)}
    t.add_row(f"least wall on {cores} cores", *(least.get(c, "") for c in cols))
    return t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, help="Philly CSV (default: <data>/philly/...)")
    ap.add_argument("--limit", type=int, help="keep the first N jobs")
    ap.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--cores", type=int, default=2, help="cores for the wall-time bound")
    ap.add_argument("--scenarios", help="comma-separated scenario names (default: all)")
    ap.add_argument("--baseline", action="store_true",
                    help="also run each scenario without the clock (its cost; twice the time)")
    args = ap.parse_args()
    console = Console()
    trace = args.trace
    if trace is None:
        base = data_dir(required=False)
        if base is None:
            console.print("shared data absent (GPUFLEET_DATA): Philly layer benchmark skipped")
            return 0
        trace = base / "philly" / "philly_jobs.csv"
    jobs = load_jobs(trace)
    jobs = jobs[: args.limit] if args.limit else jobs
    names = [n.strip() for n in args.scenarios.split(",")] if args.scenarios else None
    scs = scenarios_named(names) if names else default_scenarios()
    runs = plan_runs(jobs, scs)
    ctx = multiprocessing.get_context("spawn")
    t0 = time.perf_counter()
    # one run per worker process: a clocked run patches its process for good
    with ProcessPoolExecutor(args.workers, mp_context=ctx, max_tasks_per_child=1) as pool:
        clocked = {sc.name: pool.submit(_run, sc, jobs, True) for sc in runs.order}
        bare = {sc.name: pool.submit(_run, sc, jobs, False) for sc in runs.order} \
            if args.baseline else {}
        timed = {name: f.result()[:2] for name, f in clocked.items()}
        calls = sum(f.result()[2] for f in clocked.values())
        plain = {name: f.result()[0] for name, f in bare.items()}
    wall = time.perf_counter() - t0
    skipped = [sc.name for sc, _ in runs.twins] + [r.name for rs in runs.rebills.values()
                                                   for r in rs]
    console.print(table(f"{len(jobs):,} jobs of {trace.name}: CPU seconds by layer "
                        f"({len(timed)} runs; not run: {', '.join(skipped) or 'none'})",
                        timed, args.cores))
    if plain:
        with_clock, without = sum(c for c, _ in timed.values()), sum(plain.values())
        console.print(f"clock: {calls:,} clocked calls; the runs took {without:.1f} CPU s "
                      f"without the clock, {with_clock:.1f} with it "
                      f"({with_clock / max(without, 1e-9) - 1:+.1%}, noise included)")
    console.print(f"benchmark wall: {wall:.0f} s with {args.workers} workers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
