"""How big a fixed (non-autoscaled) cluster is: a quantile of the workload's concurrent demand.

Demand is the GPU milli in use if every job ran from its submit time for its duration (no
queueing): a step function of time. The peak (quantile 1) sizes the field report's cluster,
where nothing ever queues; a team sizing for cost takes a high quantile instead (``static-p99``:
the demand exceeded only 1 % of the time) and lets jobs queue in the peaks. The quantile is
time-weighted over the span from the first submit to the last job's end.
"""

from __future__ import annotations

import numpy as np

from gpufleet.provisioning.binpack import gpu_milli_of
from gpufleet.state import GPU_MILLI
from gpufleet.traces.jobs import JobSource, JobSpec


def demand_steps(jobs: JobSource, sharing: bool) -> tuple[np.ndarray, np.ndarray]:
    """(times, demand in milli from each time to the next): the demand step function.

    A MIG instance counts its compute share with sharing on, one whole GPU without (as the
    fixed fleet's node groups do).
    """
    if not jobs:
        return np.zeros(1), np.zeros(0, dtype=np.int64)
    t = np.array([j.submit_s for j in jobs] + [j.submit_s + j.duration_s for j in jobs])
    w = []
    for j in jobs:
        r = j.request
        per = gpu_milli_of(r) if sharing else r.whole_gpus * GPU_MILLI
        w.append(per * j.replicas)
    wa = np.array(w + [-x for x in w], dtype=np.int64)
    order = np.lexsort((wa, t))  # ends before starts at equal times
    return t[order], np.cumsum(wa[order])[:-1]


def peak_demand_milli(jobs: list[JobSpec], sharing: bool) -> int:
    """Peak concurrent GPU demand if every job ran from submit for its duration (a MIG
    instance counts its compute share with sharing on, one whole GPU without)."""
    _, level = demand_steps(jobs, sharing)
    return max(int(level.max()), 0) if level.size else 0  # the steps end at 0


def demand_quantile_milli(jobs: list[JobSpec], sharing: bool, q: float = 1.0) -> int:
    """The time-weighted ``q`` quantile of concurrent demand (q = 1: the peak), in milli."""
    times, level = demand_steps(jobs, sharing)
    if level.size == 0:
        return 0
    if q >= 1.0:
        return int(level.max())
    dt = np.diff(times)
    order = np.argsort(level, kind="stable")
    cum = np.cumsum(dt[order])
    total = cum[-1]
    if total <= 0:
        return int(level.max())
    i = int(np.searchsorted(cum, q * total, side="left"))
    return int(level[order][min(i, level.size - 1)])
