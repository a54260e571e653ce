"""Spot or on-demand by expected cost: the reclaim hazard learned online, and the price of a
reclaim to the job that suffers it.

Why: a spot discount is only worth what the reclaims leave of it. A reclaim costs the job the
work since its last checkpoint, its restart overhead and the wait for new capacity (the
re-provisioning delay), all of which must be bought again; a job that cannot checkpoint loses
everything, and a deadline job whose slack cannot absorb one reclaim loses its deadline. So for
one hour of a job's work:

* on-demand costs ``od`` (the on-demand $ per useful GPU-hour of the best on-demand launch);
* spot costs ``spot × (1 + C/τ) + λ × (τ/2 + R + P) × od``: the spot price, plus the time spent
  writing checkpoints every ``τ`` (cost ``C``), plus the expected rework per hour — ``λ``
  reclaims per hour, each losing on average half an interval of work plus the restart overhead
  ``R`` and the provisioning delay ``P`` — valued at the on-demand rate (the capacity the job
  falls back to and the slack it burns).

The job's owner waits through that loss too. A job with a **value of time** ``v`` ($ per
GPU-hour of delay, ``control.value_of_time``) prices it at ``od + v`` instead: spot costs
``spot × (1 + C/τ) + λ × (τ/2 + R + P) × (od + v)``, computed as the formula above plus the
term ``λ × (τ/2 + R + P) × v`` (0 for ``v`` = 0: the figures stay exactly what they were).
A latency-sensitive job (``SpotRisk.latency_sensitive``) never goes to spot with ``v`` = 0
(its delay would count as free), and otherwise only by this comparison with its ``v``.

Spot is chosen only when it is the cheaper of the two. ``τ`` is Young/Daly for the hazard
(``sqrt(2·C/λ)``, as ``recovery.interval`` picks it for the job) but never more than the work
left. A job that cannot checkpoint (``τ`` would be its whole run), or a deadline job whose
slack is smaller than one reclaim's loss, never goes to spot.

The hazard ``λ`` per instance type and zone is a Gamma-Poisson posterior mean from what the
fleet has seen so far (no future information): ``(a + reclaims) / (b + node-hours of spot
exposure)``. The prior (``a`` = 1 reclaim in ``b`` = 6 node-hours) is the checkpoint interval's
prior (``recovery.interval.IntervalPolicy``: MTBF 6 h weighted as 6 h), so a zone nobody has
used yet is judged as the checkpointing already assumes.

Example (worked in ``tests/market/test_spot_cost.py``): a p3.2xlarge at 0.918 $/h spot against
3.06 $/h on-demand, λ = 0.5 per node-hour, C = 30 s, R = 120 s, P = 180 s, 10 h of work left:
τ = sqrt(2·30·7200) = 657.3 s; spot costs 0.918 × (1 + 30/657.3) + 0.5 × (328.6 + 300)/3600
× 3.06 = 0.9599 + 0.2672 = 1.2271 $ per work-hour < 3.06 → spot. At λ = 20 per node-hour
(a zone reclaiming every three minutes): τ = 103.9 s, 0.918 × 1.2887 + 20 × 351.96/3600 ×
3.06 = 1.1830 + 5.9833 = 7.166 > 3.06 → on-demand. At λ = 0.5 with v = 10 $/GPU-h: the loss
term is 0.5 × 628.6/3600 × (3.06 + 10) = 1.1403, spot 2.1002 < 3.06 → still spot; at λ = 2
(τ = 328.6 s): 0.918 × 1.0913 + 2 × 464.3/3600 × 13.06 = 1.0018 + 3.3688 = 4.3707 > 3.06 →
on-demand, where v = 0 gives 1.0018 + 0.7893 = 1.7911 → spot.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gpufleet.recovery.exposure import SpotExposure
from gpufleet.recovery.interval import young_daly

INF = math.inf
HOUR_S = 3600.0


@dataclass(frozen=True, slots=True)
class SpotRisk:
    """What one pending job stands to lose on spot (the job's side of the formula).

    ``remaining_s``: work left; ``checkpoints``: it can checkpoint and the fleet lets it;
    ``slack_s``: deadline − now − work left (None: no deadline); ``value_of_time``: $ per
    GPU-hour of its delay (``control.value_of_time``); ``latency_sensitive``: spot only where
    it pays with that price, never with ``value_of_time`` 0."""

    remaining_s: float
    checkpoint_cost_s: float
    restart_overhead_s: float
    checkpoints: bool
    slack_s: float | None = None
    value_of_time: float = 0.0
    latency_sensitive: bool = False


def reclaim_loss_s(risk: SpotRisk, hazard_per_h: float, provisioning_delay_s: float) -> float:
    """Seconds of work and waiting one reclaim costs the job: half a checkpoint interval of
    rework (the whole run's half without checkpoints) + restart overhead + re-provisioning."""
    return interval_s(risk, hazard_per_h) / 2 + risk.restart_overhead_s + provisioning_delay_s


def interval_s(risk: SpotRisk, hazard_per_h: float) -> float:
    """The job's checkpoint interval on spot at this hazard: Young/Daly, at most the work left
    (without checkpoints: the work left)."""
    left = max(risk.remaining_s, 0.0)
    if not risk.checkpoints or hazard_per_h <= 0:
        return left
    return min(left, young_daly(risk.checkpoint_cost_s, HOUR_S / hazard_per_h))


def spot_cost_per_work_hour(
    spot_usd_h: float, od_usd_h: float, hazard_per_h: float, risk: SpotRisk,
    provisioning_delay_s: float,
) -> float:
    """Expected $ for one hour of the job's work on spot (``INF``: spot is ruled out — the job
    cannot checkpoint, or one reclaim would cost its deadline, or it is latency-sensitive with
    no value of time). Prices are per useful GPU-hour (or per node-hour: both sides in the same
    unit); the delay term prices the loss's hours at ``risk.value_of_time`` on top of
    ``od_usd_h``."""
    if not risk.checkpoints or (risk.latency_sensitive and risk.value_of_time <= 0):
        return INF
    loss_s = reclaim_loss_s(risk, hazard_per_h, provisioning_delay_s)
    if risk.slack_s is not None and risk.slack_s < loss_s:
        return INF
    tau = interval_s(risk, hazard_per_h)
    writing = risk.checkpoint_cost_s / tau if tau > 0 else 0.0
    return (spot_usd_h * (1.0 + writing) + hazard_per_h * loss_s / HOUR_S * od_usd_h
            + hazard_per_h * loss_s / HOUR_S * risk.value_of_time)


@dataclass(slots=True)
class ReclaimHazard:
    """Reclaims per spot node-hour, per (instance type, zone), learned from the fleet's own
    nodes: a Gamma(``prior_reclaims``, ``prior_node_hours``) prior updated by each reclaim and
    each node-second of exposure (the posterior mean is the estimate). The driver reports
    spot nodes becoming ready and leaving; nothing else is read."""

    prior_reclaims: float = 1.0
    prior_node_hours: float = 6.0
    _exposure: dict[tuple[str, str], SpotExposure] = field(default_factory=dict)
    _reclaims: dict[tuple[str, str], int] = field(default_factory=dict)

    def node_ready(self, instance_type: str, zone: str, ready_s: float) -> None:
        key = (instance_type, zone)
        self._exposure.setdefault(key, SpotExposure()).node_ready(ready_s)

    def node_gone(
        self, instance_type: str, zone: str, ready_s: float, now: float, reclaimed: bool
    ) -> None:
        """A ready spot node left scheduling at ``now`` (``reclaimed``: the market took it)."""
        key = (instance_type, zone)
        exp = self._exposure.setdefault(key, SpotExposure())
        exp.node_gone(ready_s)
        exp.close(max(0.0, now - ready_s))
        if reclaimed:
            self._reclaims[key] = self._reclaims.get(key, 0) + 1

    def reclaims(self, instance_type: str, zone: str) -> int:
        return self._reclaims.get((instance_type, zone), 0)

    def node_hours(self, instance_type: str, zone: str, now: float) -> float:
        exp = self._exposure.get((instance_type, zone))
        return exp.at(now) / HOUR_S if exp is not None else 0.0

    def rate_per_h(self, instance_type: str, zone: str, now: float) -> float:
        """The posterior mean reclaim rate per node-hour."""
        k = self.reclaims(instance_type, zone)
        return (self.prior_reclaims + k) / (
            self.prior_node_hours + self.node_hours(instance_type, zone, now))
