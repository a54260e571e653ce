"""The spot-deadline benchmark (``shared/benchmarks/spot-deadline-protocol.md``), as a library.

Per trace: L = ceil(80 h / gap) + 2 ticks per run, 300 evenly spaced starts, every policy run on
all starts at once (:func:`~gpufleet.market.ticksim.run_batch`), the optimum by the exact DP.
The CLI (``gpufleet bench spot-deadline``) and ``benchmarks/bench_spot_deadline.py`` both call
:func:`run_setting` and :func:`render`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpufleet.datapaths import data_file
from gpufleet.errors import InputError
from gpufleet.market.deadline.bench.optimal import optimal_costs
from gpufleet.market.deadline.bench.ticksim import run_batch, windows
from gpufleet.market.deadline.controller import DeadlineJob
from gpufleet.market.deadline.registry import get_deadline_policy, list_deadline_policies
from gpufleet.tables import DataTable
from gpufleet.traces.spot_availability import AvailabilityTrace, load_availability

OPTIMAL = "optimal"
WINDOW_HOURS = 80.0
DEFAULT_TRACE_DIR = ("spot-traces", "availability", "1-node", "aws-02-15-2023")
DEFAULT_TRACES = (
    "us-east-1a_v100_1.json",
    "us-east-1c_v100_1.json",
    "us-east-1d_v100_1.json",
    "us-east-1f_v100_1.json",
    "us-east-2a_v100_1.json",
    "us-west-2a_v100_1.json",
)


@dataclass(frozen=True, slots=True)
class Setting:
    task_hours: float = 48.0
    deadline_hours: float = 60.0
    overhead_hours: float = 0.2

    @property
    def label(self) -> str:
        return (f"C {self.task_hours:g} h, D {self.deadline_hours:g} h, "
                f"d {self.overhead_hours:g} h")

    def job(self, gap_s: float) -> DeadlineJob:
        return DeadlineJob(task_s=self.task_hours * 3600, deadline_s=self.deadline_hours * 3600,
                           overhead_s=self.overhead_hours * 3600, gap_s=gap_s)


MAIN_SETTING = Setting()
ALL_SETTINGS = tuple(
    Setting(48.0, dl, oh) for oh in (0.2, 0.05) for dl in (52.0, 60.0, 70.0)
)


@dataclass(frozen=True, slots=True)
class Result:
    """One (trace, policy) cell: mean cost over the runs and how many missed the deadline."""

    trace: str
    policy: str
    mean_cost: float
    misses: int
    runs: int
    setting: Setting

    def to_json(self) -> dict[str, object]:
        return {
            "trace": self.trace,
            "policy": self.policy,
            "mean_cost": round(self.mean_cost, 4),
            "misses": self.misses,
            "runs": self.runs,
            "task_hours": self.setting.task_hours,
            "deadline_hours": self.setting.deadline_hours,
            "overhead_hours": self.setting.overhead_hours,
        }


def default_traces() -> list[Path]:
    return [data_file(*DEFAULT_TRACE_DIR, name) for name in DEFAULT_TRACES]


def check_policies(names: Sequence[str]) -> list[str]:
    """Validate names (``optimal`` included) early, before minutes of computing."""
    out = []
    for name in names:
        if name != OPTIMAL:
            get_deadline_policy(name)
        out.append(name)
    if not out:
        valid = ", ".join([*list_deadline_policies(), OPTIMAL])
        raise InputError(f"no policy given; valid: {valid}")
    return out


def run_windows(trace: AvailabilityTrace, setting: Setting, starts: int) -> np.ndarray:
    """The protocol's (starts, L) windows of one trace."""
    if starts < 1:
        raise InputError(f"got {starts}; expected at least 1 start", field="starts")
    hours = max(WINDOW_HOURS, setting.deadline_hours)
    length = math.ceil(hours * 3600 / trace.gap_seconds) + 2
    if len(trace) < length:
        raise InputError(f"trace has {len(trace)} ticks; a run needs {length} "
                         f"({hours:g} h at {trace.gap_seconds} s)", path=trace.path or trace.name,
                         field="data")
    return windows(trace.data, length, starts)


def run_policy(trace: AvailabilityTrace, setting: Setting, policy: str, win: np.ndarray) -> Result:
    job = setting.job(trace.gap_seconds)
    if not job.feasible:
        raise InputError(f"{setting.label}: even on-demand from t = 0 misses the deadline")
    if policy == OPTIMAL:
        costs = optimal_costs(job, win, dtype=np.float32)
        misses = int(np.isinf(costs).sum())
    else:
        res = run_batch(job, get_deadline_policy(policy).batch(job, win.shape[0]), win)
        costs, misses = res.cost, int((~res.met).sum())
    return Result(trace.name, policy, float(np.mean(costs)), misses, int(win.shape[0]), setting)


def run_setting(
    traces: Sequence[AvailabilityTrace],
    setting: Setting,
    policies: Sequence[str],
    starts: int,
    on_step: Callable[[str], None] | None = None,
) -> list[Result]:
    results = []
    for trace in traces:
        win = run_windows(trace, setting, starts)
        for policy in policies:
            results.append(run_policy(trace, setting, policy, win))
            if on_step is not None:
                on_step(f"{trace.name} {policy}")
    return results


def load_traces(paths: Sequence[Path]) -> list[AvailabilityTrace]:
    return [load_availability(p) for p in paths]


def mean_row(results: Sequence[Result], policy: str) -> tuple[float, int, int]:
    """(mean over traces of the mean cost, total misses, total runs) of one policy."""
    mine = [r for r in results if r.policy == policy]
    return (float(np.mean([r.mean_cost for r in mine])), sum(r.misses for r in mine),
            sum(r.runs for r in mine))


def render(results: Sequence[Result], setting: Setting,
           availability: dict[str, float]) -> DataTable:
    """One table per setting: $ per trace and policy, then the mean, gap to optimum, misses."""
    policies = list(dict.fromkeys(r.policy for r in results))
    traces = list(dict.fromkeys(r.trace for r in results))
    cell = {(r.trace, r.policy): r for r in results}
    table = DataTable(f"spot-deadline — {setting.label} (mean $ per run)",
                      ["trace", "avail", *policies], numeric=[False, True, *(True for _ in
                                                                              policies)])
    for tr in traces:
        row = [tr, f"{availability.get(tr, float('nan')):.2f}"]
        values: list[str | float] = [tr, availability.get(tr, float("nan"))]
        for p in policies:
            r = cell[(tr, p)]
            row.append(f"{r.mean_cost:.2f}" + (f" [red]({r.misses} miss)[/]" if r.misses else ""))
            values.append(r.mean_cost)
        table.add_row(*row, values=values)
    means = {p: mean_row(results, p) for p in policies}
    table.add_row("mean", "", *[f"[bold]{means[p][0]:.2f}[/]" for p in policies],
                  values=["mean", None, *(means[p][0] for p in policies)], section=True)
    if OPTIMAL in means:
        opt = means[OPTIMAL][0]
        table.add_row("gap to optimum", "", *[f"{means[p][0] - opt:+.2f}" for p in policies],
                      values=["gap to optimum", None, *(means[p][0] - opt for p in policies)])
    table.add_row("misses / runs", "", *[f"{means[p][1]}/{means[p][2]}" for p in policies])
    return table
