"""What delay costs a job's owner, and the latency-sensitive jobs that are kept from it.

Why: the expected-cost rules (``market.spot_cost``, ``control.spot_swap``,
``control.gang_room``) price the time a reclaim, a swap or a wait costs a job at the on-demand
rate: the capacity bought again. The people waiting for the job pay too, and some pay more
than the GPU-hour costs (a model a team waits on, an experiment due at a meeting). So each
job has a **value of time** ``v``, in $ per GPU-hour of delay: every GPU-hour of delay a rule
weighs is priced at the rate it already used *plus* ``v``. With ``v`` = 0 every rule is what
it was without it; the scenario's default is 3 (``config.DEFAULT_VALUE_OF_TIME``: the knee of
the cost-lateness frontier, ``sim.frontier``).

A **latency-sensitive** job is one whose owner does not accept a move made for the fleet's
sake: it is never chosen for an on-demand → spot swap, never moved by consolidation and never
evicted for a gang's room (``control.views.may_move``, which all three ask). It goes to spot
only where its expected cost there, delay included, beats on-demand — ``market.spot_cost``
with its ``v`` — so a latency-sensitive job with ``v`` = 0 (its delay priced at nothing)
never tolerates spot at all (:func:`spot_eligible`): a reclaim's delay would then count as
free, which is what the mark says it is not. The same holds where its risk cannot be weighed
(a live pod that states no work, ``gpufleet.io/duration``).

Where ``v`` and the mark come from, the most specific first: the job (a trace's
``value_of_time_usd_per_gpu_hour`` / ``latency_sensitive``, a pod's ``gpufleet.io/value-of-time``
/ ``gpufleet.io/latency-sensitive`` annotations), then its team (``teams.queues[]``'s fields
of the same names), then the scenario (``Scenario.value_of_time_usd_per_gpu_hour``; not
latency-sensitive). :func:`resolve` is that order; both drivers call it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from gpufleet.traces.jobs import JobSpec

if TYPE_CHECKING:
    from gpufleet.config import Scenario


@dataclass(frozen=True, slots=True)
class Delay:
    """One job's price of delay: ``usd_per_gpu_hour`` (``v``) and whether it is
    latency-sensitive."""

    usd_per_gpu_hour: float = 0.0
    latency_sensitive: bool = False


@dataclass(frozen=True, slots=True)
class DelayDefaults:
    """The settings below a job's own: per team (team → (``v`` or None, mark or None); None:
    the team does not say) and the scenario's ``v``."""

    usd_per_gpu_hour: float = 0.0
    teams: Mapping[str, tuple[float | None, bool | None]] | None = None

    @classmethod
    def of(cls, sc: Scenario) -> DelayDefaults:
        """The scenario's settings: its default ``v`` and its ``teams.queues`` entries that set
        either field."""
        teams: dict[str, tuple[float | None, bool | None]] = {}
        if sc.teams is not None:
            for q in sc.teams.queues:
                if q.value_of_time_usd_per_gpu_hour is not None or q.latency_sensitive is not None:
                    teams[q.name] = (q.value_of_time_usd_per_gpu_hour, q.latency_sensitive)
        return cls(sc.value_of_time_usd_per_gpu_hour, teams or None)

    @property
    def any(self) -> bool:
        """Whether these settings could give a job anything but ``Delay()``."""
        return self.usd_per_gpu_hour != 0.0 or bool(self.teams)


def resolve(own_usd: float | None, own_sensitive: bool | None, team: str | None,
            defaults: DelayDefaults) -> Delay:
    """The job's ``Delay``: each field from the job where it says, else its team where that
    says, else the scenario (``v``: its default; the mark: not latency-sensitive).

    Example: scenario ``v`` 2, team ``vision`` ``v`` 10 and latency-sensitive: a ``vision`` job
    stating ``v`` 40 → (40, sensitive); one stating nothing → (10, sensitive); a job of another
    team → (2, not sensitive)."""
    t_usd, t_sens = (defaults.teams or {}).get(team or "", (None, None))
    usd = own_usd if own_usd is not None else t_usd if t_usd is not None \
        else defaults.usd_per_gpu_hour
    sens = own_sensitive if own_sensitive is not None else bool(t_sens)
    return Delay(usd, sens)


def with_delay(spec: JobSpec, defaults: DelayDefaults) -> JobSpec:
    """``spec`` with its resolved ``Delay`` written into its two fields (the simulator's jobs
    carry it so that every rule reads it off the spec); the same object when nothing
    changes."""
    if not defaults.any:
        return spec
    d = resolve(spec.value_of_time_usd_per_gpu_hour, spec.latency_sensitive, spec.tenant,
                defaults)
    if (d.usd_per_gpu_hour == value_of_time(spec)
            and d.latency_sensitive == latency_sensitive(spec)):
        return spec
    return replace(spec, value_of_time_usd_per_gpu_hour=d.usd_per_gpu_hour,
                   latency_sensitive=d.latency_sensitive)


def value_of_time(spec: JobSpec) -> float:
    """The spec's ``v`` in $ per GPU-hour of delay (0 where it states none)."""
    v = spec.value_of_time_usd_per_gpu_hour
    return 0.0 if v is None else v


def latency_sensitive(spec: JobSpec) -> bool:
    return bool(spec.latency_sensitive)


def spot_eligible(sensitive: bool, usd_per_gpu_hour: float, risk_known: bool = True) -> bool:
    """Whether a job may tolerate spot at all as far as its delay goes: any job that is not
    latency-sensitive; a latency-sensitive one only with a price on its delay (``v`` > 0) and
    a risk the spot rule can weigh (``risk_known``), so that its spot launch is the expected-
    cost rule's call with that price (module docstring).

    ====================  ======  ==========  ========
    latency-sensitive     v       risk known  eligible
    ====================  ======  ==========  ========
    no                    0       any         yes
    yes                   0       yes         no
    yes                   10      yes         yes
    yes                   10      no          no
    ====================  ======  ==========  ========
    """
    return not sensitive or (usd_per_gpu_hour > 0 and risk_known)
