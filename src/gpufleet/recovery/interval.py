"""Checkpoint interval from the observed interruption rate (Young 1974, Daly 2006).

Young's first-order optimum ``tau = sqrt(2 * C * MTBF)`` balances the time spent writing
checkpoints (C per tau of work) against the expected rework after a failure (tau / 2 per
failure). The MTBF is not known in advance, so it is estimated from what the fleet has seen:
interruptions per node-second of exposure, blended with a prior so the first hours of a run (no
interruptions yet) do not yield an infinite interval. Pure: callers pass the counts in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class IntervalPolicy:
    """``prior_mtbf_s`` weighs as ``prior_exposure_s`` of observation (one pseudo-failure)."""

    prior_mtbf_s: float = 6 * 3600.0
    prior_exposure_s: float = 6 * 3600.0
    min_interval_s: float = 60.0
    max_interval_s: float = 24 * 3600.0

    def mtbf(self, interruptions: int, exposure_s: float) -> float:
        """Posterior-mean style estimate: (exposure + prior exposure) / (failures + prior)."""
        prior_failures = self.prior_exposure_s / self.prior_mtbf_s
        return (exposure_s + self.prior_exposure_s) / (interruptions + prior_failures)

    def interval(self, checkpoint_cost_s: float, interruptions: int, exposure_s: float) -> float:
        return self.interval_for(checkpoint_cost_s, self.mtbf(interruptions, exposure_s))

    def interval_for(self, checkpoint_cost_s: float, mtbf_s: float) -> float:
        """Young/Daly for a known MTBF (e.g. a stated hardware failure rate), clamped."""
        if checkpoint_cost_s <= 0:
            return self.min_interval_s
        tau = young_daly(checkpoint_cost_s, mtbf_s)
        return min(self.max_interval_s, max(self.min_interval_s, tau))


def young_daly(checkpoint_cost_s: float, mtbf_s: float) -> float:
    """``sqrt(2 C M)``: e.g. C = 30 s, M = 6 h → sqrt(2·30·21600) = 1138.4 s."""
    if checkpoint_cost_s < 0 or mtbf_s <= 0:
        raise ValueError("checkpoint cost must be >= 0 and MTBF > 0")
    return math.sqrt(2.0 * checkpoint_cost_s * mtbf_s)
