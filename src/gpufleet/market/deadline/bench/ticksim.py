"""The protocol's tick model: run one job (or many starts at once) against an availability window.

Two drivers with one set of rules: :func:`run_controller` steps one job through the contract's
controller interface (what the fleet simulator does), :func:`run_batch` steps n jobs through one
:class:`BatchRule` with NumPy (what the benchmark does, 300 starts per call). A test runs both
on real trace windows and requires identical costs and finish times.

Tick i (t = i·gap): a job that held spot during tick i−1 is preempted if ``avail[i] == 0`` (tick
i−1 still counts); a finished job stops; otherwise the controller chooses; spot when none is
available means idle; a change to a different non-idle type sets the overhead to d; a held tick
makes progress max(gap − overhead, 0) (capped at the work left) and is billed in full.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpufleet.market.deadline.controller import (
    DONE_EPS_S,
    BatchRule,
    Choice,
    DeadlineController,
    DeadlineJob,
)


@dataclass(frozen=True, slots=True)
class RunResult:
    """Outcome of one job: dollars, finish time (inf if it never finished) and the deadline."""

    cost: float
    end_s: float
    met: bool
    spot_ticks: int
    on_demand_ticks: int


@dataclass(frozen=True, slots=True)
class BatchResult:
    """Outcomes of n jobs (arrays of shape (n,))."""

    cost: np.ndarray
    end_s: np.ndarray
    met: np.ndarray
    spot_ticks: np.ndarray
    on_demand_ticks: np.ndarray


def run_controller(job: DeadlineJob, ctl: DeadlineController, avail: np.ndarray) -> RunResult:
    """One job, one zone, tick by tick through the controller interface."""
    gap, d, c = job.gap_s, job.overhead_s, job.task_s
    done, overhead, cost = 0.0, 0.0, 0.0
    holding = Choice.IDLE
    n_spot = n_od = 0
    for i in range(len(avail)):
        t = i * gap
        up = bool(avail[i])
        if holding == Choice.SPOT and not up:
            holding, overhead = Choice.IDLE, 0.0
        if c - done <= DONE_EPS_S:
            return RunResult(cost, t, t <= job.deadline_s + 1e-9, n_spot, n_od)
        choice = ctl.decide(t_s=t, done_s=done, holding=holding, overhead_left_s=overhead,
                            spot_available=up, history=avail[: i + 1])
        if choice == Choice.SPOT and not up:
            choice = Choice.IDLE
        if choice == Choice.IDLE:
            holding, overhead = Choice.IDLE, 0.0
            continue
        if choice != holding:
            overhead = d
        holding = Choice(choice)
        progress = max(gap - overhead, 0.0)
        overhead = max(overhead - gap, 0.0)
        done += min(progress, c - done)
        cost += job.tick_cost(holding)
        if holding == Choice.SPOT:
            n_spot += 1
        else:
            n_od += 1
    t_end = len(avail) * job.gap_s
    if c - done <= DONE_EPS_S:
        return RunResult(cost, t_end, t_end <= job.deadline_s + 1e-9, n_spot, n_od)
    return RunResult(cost, float("inf"), False, n_spot, n_od)


def run_batch(job: DeadlineJob, rule: BatchRule, avail: np.ndarray) -> BatchResult:
    """n jobs at once: ``avail`` has shape (n, L), one availability window per job."""
    n, length = avail.shape
    gap, d, c = job.gap_s, job.overhead_s, job.task_s
    up_all = avail.astype(bool)
    done = np.zeros(n)
    overhead = np.zeros(n)
    holding = np.zeros(n, dtype=np.int8)
    cost = np.zeros(n)
    end = np.full(n, np.inf)
    n_spot = np.zeros(n, dtype=np.int64)
    n_od = np.zeros(n, dtype=np.int64)
    spot_cost, od_cost = job.tick_cost(Choice.SPOT), job.tick_cost(Choice.ON_DEMAND)
    active = np.ones(n, dtype=bool)
    for i in range(length):
        t = i * gap
        up = up_all[:, i]
        lost = (holding == Choice.SPOT) & ~up
        holding[lost] = Choice.IDLE
        overhead[lost] = 0.0
        finished = active & (c - done <= DONE_EPS_S)
        end[finished] = t
        active &= ~finished
        if not active.any():
            break
        choice = rule.decide(t, done, holding, overhead, up)
        choice = np.where((choice == Choice.SPOT) & ~up, np.int8(Choice.IDLE), choice)
        choice = np.where(active, choice, np.int8(Choice.IDLE)).astype(np.int8)
        idle = choice == Choice.IDLE
        switch = ~idle & (choice != holding)
        overhead = np.where(switch, d, np.where(idle, 0.0, overhead))
        held = ~idle
        progress = np.where(held, np.maximum(gap - overhead, 0.0), 0.0)
        overhead = np.where(held, np.maximum(overhead - gap, 0.0), overhead)
        done = done + np.minimum(progress, c - done)
        is_spot = choice == Choice.SPOT
        is_od = choice == Choice.ON_DEMAND
        cost = cost + np.where(is_spot, spot_cost, np.where(is_od, od_cost, 0.0))
        n_spot += is_spot
        n_od += is_od
        holding = choice
    else:
        t_end = length * gap
        finished = active & (c - done <= DONE_EPS_S)
        end[finished] = t_end
    met = end <= job.deadline_s + 1e-9
    return BatchResult(cost=cost, end_s=end, met=met, spot_ticks=n_spot, on_demand_ticks=n_od)


def start_indices(n_points: int, length: int, starts: int) -> np.ndarray:
    """The protocol's start points: round(k·(N − L)/(starts − 1)), k = 0..starts−1."""
    if starts == 1:
        return np.zeros(1, dtype=np.int64)
    k = np.arange(starts)
    # round half to even, like Python's round(); the protocol's values are never exact halves
    return np.rint(k * (n_points - length) / (starts - 1)).astype(np.int64)


def windows(data: np.ndarray, length: int, starts: int) -> np.ndarray:
    """The (starts, L) matrix of availability windows the benchmark runs."""
    idx = start_indices(len(data), length, starts)
    return np.stack([data[s : s + length] for s in idx])
