"""The ``teams:`` section of a scenario / controller config, validated, and what it builds.

```yaml
teams:
  half_life_s: 604800            # fair-share usage half-life (Slurm's default, 7 days)
  enforce_quotas: true           # false: quotas are measured and reported, not acted on
  queues:
    - name: vision               # the trace's tenant / the namespace label's value
      gpus: 16                   # nominal quota in GPU-equivalents (fractions, MIG by share);
                                 # omit for a budget-only queue (no quota: admitted as before)
      cohort: research           # borrow idle quota from / lend to the cohort's other queues
      borrowing_limit: 8         # at most this many GPU-equivalents above nominal (omit: any)
      weight: 1                  # fair-share weight above quota
      models: {H100-80GB: 4}     # per-GPU-model nominal within the total (unlisted: total only)
      budget: {usd: 5000, period: month, action: spot-only}   # or hold / hold-and-drain / notify
      value_of_time_usd_per_gpu_hour: 10   # $ its owners lose per GPU-hour of delay
      latency_sensitive: false   # true: never moved for the fleet's sake (control.value_of_time)
```

Amounts are GPUs in the file (what people write) and milli-GPU inside (what placement counts);
dollars in the file, integer micro-dollars inside.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from gpufleet.queueing.teams.budget import MICRO, Budget
from gpufleet.queueing.teams.fairshare import DEFAULT_HALF_LIFE_S
from gpufleet.queueing.teams.quota import TeamQuota


class BudgetSettings(BaseModel):
    """A queue's dollar budget per period, and what happens as it runs out (docs/teams.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    usd: float = Field(gt=0, le=1e12, description="Dollars per period.")
    period: Literal["day", "week", "month"] = Field(default="month", description=(
        "The budget's period."))
    action: Literal["spot-only", "hold", "hold-and-drain", "notify"] = Field(
        default="notify", description=(
            "What the budget does as it runs out: spot-only (the team's work goes to spot), "
            "hold (new work waits), hold-and-drain (as hold; once spent, running work is "
            "evicted too), notify (reported only)."))
    lookahead_s: float = Field(default=3600.0, ge=0, le=31 * 86400, description=(
        "The budget is low when the spend rate would exhaust it within this many seconds."))

    def build(self) -> Budget:
        return Budget(round(self.usd * MICRO), self.period, self.action, self.lookahead_s)


class QueueSettings(BaseModel):
    """One team's queue: its quota in GPU-equivalents (fractions and MIG by their share), the
    cohort it borrows from and lends to, and its budget."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: str = Field(min_length=1, max_length=63, description=(
        "The queue: the trace's tenant, or the value of a Namespace's gpufleet.io/queue label."))
    gpus: float | None = Field(default=None, ge=0, le=1e6, description=(
        "Nominal quota in GPU-equivalents; null: a budget-only queue (admitted as without "
        "quotas)."))
    cohort: str | None = Field(default=None, min_length=1, max_length=63, description=(
        "Borrow idle quota from, and lend to, the cohort's other queues."))
    borrowing_limit: float | None = Field(default=None, ge=0, le=1e6, description=(
        "At most this many GPU-equivalents above nominal; null: any."))
    weight: float = Field(default=1.0, gt=0, le=1e6, description=(
        "Fair-share weight above quota."))
    # written as a mapping {model: GPUs}; kept as sorted pairs so the settings stay hashable,
    # and described to editors as the mapping it is written as
    models: Annotated[tuple[tuple[str, float], ...], WithJsonSchema({
        "type": "object", "maxProperties": 64,
        "additionalProperties": {"type": "number", "minimum": 0, "maximum": 1e6}})] = Field(
        default=(), max_length=64, json_schema_extra={"default": {}}, description=(
            "Per-GPU-model nominal quota within gpus, as {model: GPUs} (unlisted models: the "
            "total only)."))
    budget: BudgetSettings | None = Field(default=None, description="The queue's budget.")
    value_of_time_usd_per_gpu_hour: float | None = Field(default=None, ge=0, le=1e6, description=(
        "What a GPU-hour of delay of the team's work costs it, $ (control.value_of_time), for "
        "jobs that set none; null: the scenario's value_of_time_usd_per_gpu_hour."))
    latency_sensitive: bool | None = Field(default=None, description=(
        "true: the team's work is never swapped to spot, consolidated or evicted for a gang, "
        "and goes to spot only where that pays with its delay priced (never with a value of "
        "time of 0), for jobs that do not say; null: not latency-sensitive."))

    @field_validator("models", mode="before")
    @classmethod
    def _pairs(cls, v: Any) -> Any:
        return tuple(sorted(v.items())) if isinstance(v, dict) else v

    @model_validator(mode="after")
    def _models(self) -> QueueSettings:
        for m, g in self.models:
            if not 0 <= g <= 1e6:
                raise ValueError(f"queue {self.name}: models.{m} must be between 0 and 1e6 GPUs")
            if self.gpus is None:
                raise ValueError(f"queue {self.name}: per-model quotas need a total (gpus)")
        return self

    def quota(self) -> TeamQuota | None:
        """The queue's quota; None for a budget-only queue (``gpus`` omitted)."""
        if self.gpus is None:
            return None
        limit = None if self.borrowing_limit is None else round(self.borrowing_limit * 1000)
        models = tuple((m, round(g * 1000)) for m, g in self.models)
        return TeamQuota(self.name, round(self.gpus * 1000), self.cohort, limit, self.weight,
                         models)


class TeamsSettings(BaseModel):
    """Team queues: quotas with cohort borrowing and reclaim, time-aware fair share, budgets
    (docs/teams.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    half_life_s: float = Field(default=DEFAULT_HALF_LIFE_S, gt=0, le=10 * 365 * 86400,
                               description="Fair-share usage half-life, seconds.")
    enforce_quotas: bool = Field(default=True, description=(
        "false: a dry run - usage against the quotas is measured and reported but nothing is "
        "refused, ordered or reclaimed for them; budgets still act."))
    queues: tuple[QueueSettings, ...] = Field(default=(), description="The queues.")

    @model_validator(mode="after")
    def _unique(self) -> TeamsSettings:
        seen: set[str] = set()
        for q in self.queues:
            if q.name in seen:
                raise ValueError(f"queue {q.name!r} is defined twice")
            seen.add(q.name)
        return self

    def quotas(self) -> list[TeamQuota]:
        """The quotas that act (none when ``enforce_quotas`` is off)."""
        return self.nominal() if self.enforce_quotas else []

    def nominal(self) -> list[TeamQuota]:
        """Every queue's quota, acting or not (what the per-team figures measure against)."""
        return [t for t in (q.quota() for q in self.queues) if t is not None]

    def budgets(self) -> dict[str, Budget]:
        return {q.name: q.budget.build() for q in self.queues if q.budget is not None}


def jain_index(xs: Sequence[float]) -> float:
    """Jain's fairness index (Σx)² / (n·Σx²): 1 when every x is equal, 1/n when one takes all.
    Used over each team's delivered / entitled ratio. 1.0 for an empty or all-zero input."""
    n = len(xs)
    sq = sum(x * x for x in xs)
    return 1.0 if n == 0 or sq == 0 else sum(xs) ** 2 / (n * sq)
