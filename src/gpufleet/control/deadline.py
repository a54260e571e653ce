"""The deadline controller and its guards, as the control layer runs them for a driver.

For each interruptible job with a deadline on a spot fleet, the control layer decides which
capacity type it may use, and says so with ``Pin`` decisions (``ON_DEMAND``: the job stops
tolerating spot; ``None``: back to any capacity it tolerates):

* at arrival (``on_arrival``): a job that cannot checkpoint is pinned at once when a rerun from
  zero would not fit (``deadline_guard.rerun_fits``); a checkpointing job is checked again before
  the next scale-up (``check_arrivals``) with the controller's safety net, evaluated as if its
  first availability tick were now — so scale-up launches the on-demand node the net asks for
  instead of a spot node the job would then leave;
* on every tick of the availability process (``tick``, every ``gap_s``): the deadline policy
  (``gpufleet.market.deadline``) decides per checkpointing job; a pin of a job running on spot
  also preempts it (``Preempt``: checkpoint and move); a ``SPOT`` choice unpins a pending job.
  Jobs without checkpoints stay on the arrival rule (pinned while pending once a rerun stops
  fitting; once started they stay where they are).

The guards need an autoscaler: on a fixed spot fleet the only on-demand capacity is the fallback
nodes, so pinning a job there would only make it wait; the safety net alone is skipped there.
A *hopeless* job (even a fresh node launched now cannot make the deadline) is never narrowed to
on-demand by the guards: only capacity that frees up can save it.

The driver reports jobs as ``DeadlineView``s and the spot market as one availability bit and
two prices of the reference type (``spot_reference_type``: the smallest spot-offered type).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from gpufleet.control.deadline_guard import cannot_wait, fresh_node_fits, move_fits, rerun_fits
from gpufleet.decisions import CapacityType, Cause, Decision, Pin, Preempt
from gpufleet.market.deadline import (
    Choice,
    DeadlineController,
    DeadlineJob,
    DeadlinePolicy,
    safety_net,
)
from gpufleet.market.view import SpotMarketView
from gpufleet.traces.jobs import JobSpec

MOVE_REASON = "deadline: move to on-demand"


@dataclass(frozen=True, slots=True)
class DeadlineView:
    """One deadline job as the driver sees it now."""

    spec: JobSpec
    pending: bool
    running: bool
    on_demand_only: bool
    on_spot: bool
    done_s: float  # work done by now (settled work when not running)
    overhead_left_s: float = 0.0  # restart overhead still to pay in the current run


@dataclass(frozen=True, slots=True)
class GuardConfig:
    """The fleet settings the guards read (a scenario's, or a live controller's)."""

    autoscaling: bool
    checkpointing: bool
    provisioning_delay_s: float
    max_pending_wait_s: float


def deadline_of(spec: JobSpec) -> float:
    """The deadline of a job the guards watch (``DeadlineGuards.watches`` admits only jobs that
    have one): a job without one here is a driver bug, not a job to plan for."""
    if spec.deadline_s is None:
        raise ValueError(f"job {spec.job_id}: the deadline guards got a job without a deadline")
    return spec.deadline_s


def hopeless(v: DeadlineView, now: float, cfg: GuardConfig) -> bool:
    """Even a fresh node launched now cannot make the deadline."""
    left = v.spec.duration_s - v.done_s
    return not fresh_node_fits(now, deadline_of(v.spec), left, cfg.provisioning_delay_s)


def _rerun_fits(spec: JobSpec, now: float, cfg: GuardConfig) -> bool:
    return rerun_fits(now, deadline_of(spec), spec.duration_s, spec.restart_overhead_s,
                      cfg.provisioning_delay_s)


def urgent(spec: JobSpec, work_s: float, interrupted: bool, now: float, cfg: GuardConfig) -> bool:
    """A pending deadline job whose slack cannot absorb scale-up's wait trigger plus a boot."""
    if spec.deadline_s is None:
        return False
    overhead = spec.restart_overhead_s if interrupted else 0.0
    return cannot_wait(now, spec.deadline_s, spec.duration_s - work_s, overhead,
                       cfg.provisioning_delay_s, cfg.max_pending_wait_s)


def movable(spec: JobSpec, done_s: float | Callable[[], float], checkpoint_cost_s: float,
            now: float, cfg: GuardConfig) -> bool:
    """Consolidation may move a deadline job only if the move cannot cost the deadline
    (``done_s``: the work done, or what works it out: read only for a deadline job)."""
    if spec.deadline_s is None:
        return True
    if callable(done_s):
        done_s = done_s()
    return move_fits(now, spec.deadline_s, spec.duration_s - done_s, checkpoint_cost_s,
                     spec.restart_overhead_s, cfg.provisioning_delay_s)


def spot_reference_type(offered: dict[str, int]) -> str | None:
    """The type whose spot market stands for the fleet's: the fewest GPUs, then by name
    (``offered``: spot-offered type → GPUs)."""
    if not offered:
        return None
    return min(offered, key=lambda n: (offered[n], n))


def market_signal(
    gpus: Mapping[str, int], on_demand_usd: Mapping[str, float], market: SpotMarketView | None,
    now: float,
) -> tuple[bool, float, float]:
    """The tick's market inputs: spot available now, its price and the on-demand price, all of
    the reference type (``gpus``/``on_demand_usd``: per instance type of the fleet). Without a
    spot market: available, free, one dollar (the ratio is what the policies read)."""
    m = market
    ref = spot_reference_type({n: g for n, g in gpus.items() if m is not None and m.zones(n)})
    if m is None or ref is None:
        return True, 0.0, 1.0
    avail = bool(m.signal(ref, now, 1)[-1])
    return avail, m.best_price(ref, now) or 0.0, on_demand_usd[ref]


def _keeps_progress(spec: JobSpec, cfg: GuardConfig) -> bool:
    return spec.checkpointable and cfg.checkpointing


def rerun_pin(v: DeadlineView, now: float, cfg: GuardConfig) -> Pin | None:
    """A job that loses its work on a reclaim is pinned to on-demand once a rerun from zero
    would no longer fit (and the job is not hopeless); only an autoscaled fleet pins (a fixed
    one creates no on-demand node for it)."""
    if cfg.autoscaling and not _rerun_fits(v.spec, now, cfg) and not hopeless(v, now, cfg):
        return Pin(v.spec.job_id, CapacityType.ON_DEMAND, "deadline: rerun would not fit")
    return None


def safety_net_pin(v: DeadlineView, now: float, cfg: GuardConfig, gap_s: float) -> Pin | None:
    """A checkpointing job the deadline controller's safety net sends to on-demand, evaluated
    as if its first availability tick were now (idle, no work done)."""
    spec = v.spec
    if spec.deadline_s is None or v.on_demand_only or hopeless(v, now, cfg):
        return None
    idle = np.array([Choice.IDLE], dtype=np.int8)
    job = DeadlineJob(task_s=spec.duration_s, deadline_s=spec.deadline_s - spec.submit_s,
                      overhead_s=spec.restart_overhead_s, gap_s=gap_s)
    net = safety_net(idle, job=job, t_s=now - spec.submit_s, done_s=np.zeros(1),
                     holding=idle, overhead_left_s=np.zeros(1))
    if int(net[0]) == Choice.ON_DEMAND:
        return Pin(spec.job_id, CapacityType.ON_DEMAND, "deadline: safety net")
    return None


def pending_pin(v: DeadlineView, now: float, cfg: GuardConfig, gap_s: float) -> Pin | None:
    """The guards' answer for a pending watched job, level-triggered: what a driver that
    re-reads its jobs every cycle (the live one) asks each cycle. A checkpointing job gets the
    safety net, any other the rerun rule — the two checks the simulator makes at arrival
    (:meth:`DeadlineGuards.on_arrival`, :meth:`DeadlineGuards.check_arrivals`). Only on an
    autoscaled fleet, and never for a job already pinned or running."""
    if not v.pending or v.on_demand_only or not cfg.autoscaling:
        return None
    if _keeps_progress(v.spec, cfg):
        return safety_net_pin(v, now, cfg, gap_s)
    return rerun_pin(v, now, cfg)


class DeadlineGuards:
    """Per-job deadline controllers plus the guards; ``gap_s`` is the tick period."""

    def __init__(self, policy: DeadlinePolicy, gap_s: float, cfg: GuardConfig) -> None:
        self.policy = policy
        self.gap_s = gap_s
        self.cfg = cfg
        self.live: set[int] = set()  # jobs the controller watches (driver's job index)
        self._arrivals: list[int] = []  # checkpointing jobs to check before the next scale-up
        self._ctl: dict[int, tuple[DeadlineController, bytearray]] = {}

    @staticmethod
    def watches(spec: JobSpec, spot_tolerant: bool) -> bool:
        return spec.deadline_s is not None and spot_tolerant

    def on_arrival(self, idx: int, v: DeadlineView, now: float) -> list[Decision]:
        """A watched job arrives (before it is queued)."""
        self.live.add(idx)
        cfg = self.cfg
        if cfg.autoscaling and _keeps_progress(v.spec, cfg):
            self._arrivals.append(idx)
            return []
        pin = rerun_pin(v, now, cfg)
        return [pin] if pin is not None else []

    def done(self, idx: int) -> None:
        """The job finished or left the run: it is no longer watched, and its controller (its
        policy's state and tick history) is dropped."""
        self.live.discard(idx)
        self._ctl.pop(idx, None)

    def controlled(self, idx: int) -> bool:
        """Whether the deadline policy has started a controller for the job (its first tick)."""
        return idx in self._ctl

    def arrivals_to_check(self) -> list[int]:
        """The arrivals ``check_arrivals`` wants views of (and forgets afterwards)."""
        return self._arrivals

    def check_arrivals(self, views: dict[int, DeadlineView], now: float) -> list[Decision]:
        """The safety net for new arrivals, before scale-up (see the module docstring)."""
        out: list[Decision] = []
        for idx in self._arrivals:
            v = views[idx]
            if not v.pending or idx in self._ctl:
                continue
            pin = safety_net_pin(v, now, self.cfg, self.gap_s)
            if pin is not None:
                out.append(pin)
        self._arrivals.clear()
        return out

    def tick(
        self, views: dict[int, DeadlineView], now: float, spot_available: bool,
        spot_price: float, on_demand_price: float,
    ) -> list[Decision]:
        """One availability tick: ``views`` holds the live jobs that are pending or running."""
        cfg = self.cfg
        out: list[Decision] = []
        for idx in sorted(views):
            v = views[idx]
            spec = v.spec
            if cfg.autoscaling and not _keeps_progress(spec, cfg):
                pin = rerun_pin(v, now, cfg) if v.pending and not v.on_demand_only else None
                if pin is not None:
                    out.append(pin)
                continue
            got = self._ctl.get(idx)
            if got is None:
                got = self._ctl[idx] = (self.policy.start(DeadlineJob(
                    task_s=spec.duration_s, deadline_s=deadline_of(spec) - spec.submit_s,
                    overhead_s=spec.restart_overhead_s, gap_s=self.gap_s,
                    spot_price_per_hour=min(spot_price, on_demand_price),
                    on_demand_price_per_hour=on_demand_price)), bytearray())
            ctl, seen = got
            seen.append(1 if spot_available else 0)
            history = np.frombuffer(bytes(seen), dtype=np.int8)
            holding = (Choice.SPOT if v.on_spot else Choice.ON_DEMAND) if v.running \
                else Choice.IDLE
            choice = ctl.decide(t_s=now - spec.submit_s, done_s=v.done_s, holding=holding,
                                overhead_left_s=v.overhead_left_s, spot_available=spot_available,
                                history=history)
            # A fixed fleet creates no on-demand capacity for a pinned job: it would wait for a
            # node that never comes (and end the run unfinished), so only autoscaled fleets pin.
            if choice == Choice.ON_DEMAND and not v.on_demand_only and cfg.autoscaling:
                out.append(Pin(spec.job_id, CapacityType.ON_DEMAND, "deadline: controller"))
                if v.running and v.on_spot:
                    out.append(Preempt(spec.job_id, MOVE_REASON, Cause.DEADLINE_MOVE))
            elif choice == Choice.SPOT and v.on_demand_only and v.pending:
                out.append(Pin(spec.job_id, None, "deadline: spot again"))
        return out
