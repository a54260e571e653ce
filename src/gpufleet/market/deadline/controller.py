"""The deadline controller's contract: the job, the per-tick choice, the safety net, batch rules.

A controller reads only what the job has seen (time, work done, capacity held, overhead still to
pay, spot availability now and before) and returns a :class:`Choice`; every policy ends its
decision with :func:`safety_net`. Policies are written once as a :class:`BatchRule` over n jobs
and run one job at a time through :class:`RuleController` (the fleet simulator) or many starts at
once (the benchmark), so the two paths cannot disagree. The package docstring
(``gpufleet.market.deadline``) walks through the setting and an example.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Protocol

import numpy as np

from gpufleet.errors import InputError

SPOT_PRICE_PER_HOUR = 0.9731  # p3.2xlarge, the protocol's prices
ON_DEMAND_PRICE_PER_HOUR = 3.06
DONE_EPS_S = 1e-6  # work within this of the task counts as finished (float noise only)


class Choice(IntEnum):
    """Capacity held during one tick."""

    IDLE = 0
    SPOT = 1
    ON_DEMAND = 2


@dataclass(frozen=True, slots=True)
class DeadlineJob:
    """One checkpointed job: ``task_s`` of work due ``deadline_s`` after its start.

    ``overhead_s`` is paid (billed, no progress) after every launch or switch of capacity type;
    ``gap_s`` is the tick of the availability process the controller is called on.
    """

    task_s: float
    deadline_s: float
    overhead_s: float
    gap_s: float
    spot_price_per_hour: float = SPOT_PRICE_PER_HOUR
    on_demand_price_per_hour: float = ON_DEMAND_PRICE_PER_HOUR

    def __post_init__(self) -> None:
        for name in ("task_s", "deadline_s", "gap_s"):
            if not getattr(self, name) > 0:
                raise InputError(f"got {getattr(self, name)!r}; expected > 0", field=name)
        if not self.overhead_s >= 0:
            raise InputError(f"got {self.overhead_s!r}; expected >= 0", field="overhead_s")
        if self.spot_price_per_hour > self.on_demand_price_per_hour:
            raise InputError("spot dearer than on-demand: nothing to decide",
                             field="spot_price_per_hour")

    @property
    def deadline_ticks(self) -> int:
        """Whole ticks that end by the deadline (the job ends on a tick boundary)."""
        return math.floor(self.deadline_s / self.gap_s + 1e-9)

    @property
    def feasible(self) -> bool:
        """Whether on-demand from t = 0 (one launch overhead) meets the deadline."""
        need = math.ceil((self.task_s + self.overhead_s) / self.gap_s - 1e-9)
        return need <= self.deadline_ticks

    def tick_cost(self, choice: Choice | int) -> float:
        """Dollars for holding ``choice`` one full tick (idle is free)."""
        if choice == Choice.SPOT:
            return self.spot_price_per_hour * self.gap_s / 3600.0
        if choice == Choice.ON_DEMAND:
            return self.on_demand_price_per_hour * self.gap_s / 3600.0
        return 0.0


class DeadlineController(Protocol):
    """Per-job decision maker; may learn between calls, never reads a clock or the future."""

    def decide(
        self,
        *,
        t_s: float,
        done_s: float,
        holding: Choice,
        overhead_left_s: float,
        spot_available: bool,
        history: np.ndarray,
    ) -> Choice: ...


class DeadlinePolicy(Protocol):
    @property
    def name(self) -> str:
        """The policy's registry name (read-only: policies are frozen)."""
        ...

    def start(self, job: DeadlineJob) -> DeadlineController:
        """A fresh controller for one job."""
        ...


# --- the safety net (protocol: "Reference policies"), vectorised over jobs ------------------


def safety_net(
    proposal: np.ndarray,
    *,
    job: DeadlineJob,
    t_s: np.ndarray | float,
    done_s: np.ndarray,
    holding: np.ndarray,
    overhead_left_s: np.ndarray,
) -> np.ndarray:
    """Override ``proposal`` with on-demand where waiting any longer could miss the deadline.

    R is the time left in whole ticks; T1 (T2) the ticks needed on a fresh on-demand launch with
    one (two) overheads. At T2 ≥ R an idle or on-demand job goes (stays) on-demand; at T1 ≥ R
    every job does, except one already running on spot with its overhead paid — it keeps spot
    until preempted, when T1 ≤ R still leaves room for the relaunch. T1 ≤ R is an invariant:
    it holds at t = 0 for a feasible job, one idle tick moves R and not T1 by one tick, and the
    net acts while T1 = R, so the job can always finish on-demand by the deadline.
    """
    gap, d = job.gap_s, job.overhead_s
    rem = job.task_s - done_s
    r_left = np.floor((job.deadline_s - t_s) / gap) * gap
    t1 = np.ceil((rem + d) / gap) * gap
    t2 = np.ceil((rem + 2 * d) / gap) * gap
    out = np.where((t2 >= r_left) & (holding != Choice.SPOT), np.int8(Choice.ON_DEMAND),
                   proposal).astype(np.int8)
    keep_spot = (holding == Choice.SPOT) & (overhead_left_s < 1e-3)
    forced = np.where(keep_spot, np.int8(Choice.SPOT), np.int8(Choice.ON_DEMAND))
    return np.where(t1 >= r_left, forced, out).astype(np.int8)


# --- batch rules: one decision procedure for one job or for many at once ---------------------


class BatchRule(Protocol):
    """A policy's decision over n jobs at the same tick (arrays of shape (n,)).

    The benchmark runs 300 starts through one BatchRule; :class:`RuleController` runs one job
    through a BatchRule of size 1 — the same code, so the two paths cannot disagree.
    ``decide`` is called once per tick, in order, with that tick's availability.
    """

    def decide(
        self,
        t_s: float,
        done_s: np.ndarray,
        holding: np.ndarray,
        overhead_left_s: np.ndarray,
        avail: np.ndarray,
    ) -> np.ndarray: ...


RuleFactory = Callable[[DeadlineJob, int], BatchRule]


class RuleController:
    """The contract's per-job controller on top of a size-1 :class:`BatchRule`."""

    def __init__(self, job: DeadlineJob, factory: RuleFactory) -> None:
        self.job = job
        self._rule = factory(job, 1)
        self._ticks_seen = 0

    def decide(
        self,
        *,
        t_s: float,
        done_s: float,
        holding: Choice,
        overhead_left_s: float,
        spot_available: bool,
        history: np.ndarray,
    ) -> Choice:
        if len(history) != self._ticks_seen + 1:
            raise ValueError(
                f"controller called out of order: history has {len(history)} ticks, expected "
                f"{self._ticks_seen + 1} (decide once per tick of the availability process)"
            )
        self._ticks_seen += 1
        out = self._rule.decide(
            float(t_s),
            np.array([done_s], dtype=np.float64),
            np.array([int(holding)], dtype=np.int8),
            np.array([overhead_left_s], dtype=np.float64),
            np.array([bool(spot_available)]),
        )
        return Choice(int(out[0]))


@dataclass(frozen=True, slots=True)
class RulePolicy:
    """A named policy whose controllers are size-1 batch rules."""

    name: str
    factory: RuleFactory
    summary: str = ""

    def start(self, job: DeadlineJob) -> DeadlineController:
        return RuleController(job, self.factory)

    def batch(self, job: DeadlineJob, n: int) -> BatchRule:
        return self.factory(job, n)
