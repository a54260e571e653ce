"""Checkpoint-interval choice for one job start, and the spot exposure it is estimated from.

Young/Daly (``interval.IntervalPolicy``) needs the mean time between interruptions. A job can be
interrupted two ways: a spot reclaim (rate estimated from what the fleet has seen: reclaims per
node-second of spot exposure) and a hardware failure of one of its nodes (the operator's stated
GPU MTBF, divided by the GPUs the job's nodes hold). The rates add. An on-demand job with no
failure rate configured never checkpoints (nothing to insure against).

Example: 30 s checkpoints, no spot, 8 GPUs at a GPU MTBF of 1e6 h: node MTBF 450,000 s,
``tau = sqrt(2·30·450000) ≈ 5196 s``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpufleet.recovery.interval import IntervalPolicy

INF = math.inf


@dataclass(slots=True)
class SpotExposure:
    """Node-seconds of spot exposure so far, in closed form: nodes that left contribute their
    ready time; nodes still up contribute ``now - ready_s`` (kept as a count and a sum)."""

    closed_s: float = 0.0
    ready_n: int = 0
    ready_sum: float = 0.0

    def node_ready(self, ready_s: float) -> None:
        self.ready_n += 1
        self.ready_sum += ready_s

    def node_gone(self, ready_s: float) -> None:
        """A ready spot node leaves scheduling (call ``close`` once its exposure is final)."""
        self.ready_n -= 1
        self.ready_sum -= ready_s

    def close(self, seconds: float) -> None:
        self.closed_s += seconds

    def at(self, now: float) -> float:
        return self.closed_s + self.ready_n * now - self.ready_sum


def checkpoint_interval(
    policy: IntervalPolicy,
    *,
    checkpoints: bool,
    fixed_interval_s: float | None,
    checkpoint_cost_s: float,
    node_gpus: int,
    gpu_mtbf_s: float | None,
    on_spot: bool,
    reclaims: int,
    spot_exposure_s: float,
) -> float:
    """Seconds of work between checkpoints for a job starting now (``INF``: never).

    ``checkpoints``: the job can checkpoint and the fleet lets it; ``fixed_interval_s``: the
    operator's fixed interval (wins); ``node_gpus``: GPUs of the nodes the job runs on (the
    hardware-failure exposure); ``reclaims``/``spot_exposure_s``: what the fleet has seen.
    """
    if not checkpoints:
        return INF
    if fixed_interval_s is not None:
        return fixed_interval_s
    fail_rate = 0.0
    if gpu_mtbf_s is not None:
        fail_rate = node_gpus / gpu_mtbf_s
    if not on_spot:
        if fail_rate <= 0:
            return INF  # nothing to insure against
        return policy.interval_for(checkpoint_cost_s, 1.0 / fail_rate)
    reclaim_mtbf = policy.mtbf(reclaims, spot_exposure_s)
    return policy.interval_for(checkpoint_cost_s, 1.0 / (1.0 / reclaim_mtbf + fail_rate))
