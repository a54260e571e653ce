"""Time-aware fair share: which team above its quota goes next.

Within quota, order does not matter much — everyone's entitled share is reserved. Above it teams
compete for idle capacity, and FIFO would hand it to whoever submits fastest. Instead, as Slurm's
fair-share factor and KAI-Scheduler's time-aware fairness do, each team carries a **decayed usage
history** — GPU-equivalent·seconds, and CPU·seconds, with an exponential half-life — and the team
with the smallest **dominant share** goes first:

    share(team) = max over resources r of  decayed_usage[r] / capacity[r]   ÷  weight(team)

(dominant-resource fairness, Ghodsi et al. NSDI'11, over a usage history rather than an instant).
A team that used a lot recently yields to one that did not; after a few half-lives it is even
again. Deterministic ties: team name.

The clock is passed in (``now_s``); nothing here reads time.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

DEFAULT_HALF_LIFE_S = 7 * 24 * 3600.0  # Slurm's PriorityDecayHalfLife default: 7 days


@dataclass
class UsageHistory:
    """Decayed usage per team and resource, advanced by :meth:`advance`."""

    half_life_s: float = DEFAULT_HALF_LIFE_S
    last_s: float = 0.0
    decayed: dict[str, dict[str, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.half_life_s > 0 or not math.isfinite(self.half_life_s):
            raise ValueError("half_life_s must be a positive number of seconds")

    def advance(self, now_s: float, usage: Mapping[str, Mapping[str, float]]) -> None:
        """Decay what was, then add ``usage`` (team → resource → amount in use) held constant
        since the last call — the exact integral of a constant rate under exponential decay."""
        dt = now_s - self.last_s
        if dt < 0:
            raise ValueError(f"time went backwards: {now_s} < {self.last_s}")
        self.last_s = now_s
        if dt == 0:
            return
        keep, gain = decay(dt, self.half_life_s)
        for res in self.decayed.values():
            for r in res:
                res[r] *= keep
        for team, amounts in usage.items():
            res = self.decayed.setdefault(team, {})
            for r, a in amounts.items():
                res[r] = res.get(r, 0.0) + a * gain


def decay(dt: float, half_life_s: float) -> tuple[float, float]:
    """Over ``dt`` seconds: what is left of 1 (``keep``) and what a rate of 1 held all along
    adds (``gain`` = ∫₀^dt e^{-k(dt-s)} ds, k = ln 2 / half-life).

    >>> decay(604800.0, 604800.0)[0]
    0.5
    """
    k = math.log(2) / half_life_s
    keep = math.exp(-k * dt)
    return keep, (1 - keep) / k


def carried(saved: float, as_of_s: float, now_s: float, usage: float,
            half_life_s: float) -> float:
    """A team's decayed usage brought from a saved value (``as_of_s``) to ``now_s``, with
    ``usage`` taken as held all the while — what a restarted controller goes on from (the
    usage during the outage is unknown; the usage it finds running is the estimate, as the
    spend ledger takes its rate). Example: 1,000 GPU·s saved, 10 s ago, 2 GPUs running, a
    half-life long against 10 s → about 1,020."""
    dt = max(0.0, now_s - as_of_s)
    keep, gain = decay(dt, half_life_s)
    return saved * keep + usage * gain


def dominant_share(history: UsageHistory, team: str, capacity: Mapping[str, float],
                   weight: float = 1.0) -> float:
    """The team's weighted dominant share (module docstring); 0 for a team never seen."""
    res = history.decayed.get(team, {})
    shares = [res.get(r, 0.0) / c for r, c in capacity.items() if c > 0]
    return (max(shares) if shares else 0.0) / weight


def fair_order(teams: Iterable[str], history: UsageHistory, capacity: Mapping[str, float],
               weights: Mapping[str, float]) -> list[str]:
    """Teams by ascending weighted dominant share, ties by name."""
    return sorted(teams, key=lambda t: (dominant_share(history, t, capacity,
                                                       weights.get(t, 1.0)), t))
