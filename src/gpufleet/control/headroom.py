"""Headroom: spare GPUs kept ready, sized from the arrivals seen, so that a job that arrives
starts at once instead of waiting a provisioning delay.

Why: an autoscaled fleet runs with little free room, so a job that arrives when none is left
waits for a node to be launched and to boot. On the first 20,000 Philly jobs gpufleet's median
JCT is 1,379.5 s against static's 1,258 s, yet the median job is not slower once it runs: the
median of JCT minus queue is 1,252.5 s. 47 % of the jobs near the median wait, almost all for
130–200 s, which is the 180 s provisioning delay. With a zero provisioning delay the median is
1,256.5 s. Kubernetes' answer is capacity held for pods that are not there yet:
cluster-autoscaler's over-provisioning (low-priority placeholder pods) and its CapacityBuffer
API. This is that buffer, sized from the demand seen instead of a fixed count.

The rule (``Scenario.headroom``, on in the embedded ``gpufleet``; measured in docs/simulator.md):

1. **Size** (``buffer_gpus``): for each job that arrived over the last ``window_s``, the GPUs
   that arrived over the horizon up to and including it — provisioning delay + scan interval,
   the time a new node takes to be asked for and to boot, so the demand a buffer must have held
   for that job to start at once. The buffer is the ``quantile`` of those demands over the
   arrivals (the least k that at least that share of them needed no more than), capped at
   ``max_gpus``. Below ``min_sample`` arrivals (10 at 0.9) that quantile would be the largest
   demand seen, and arrivals are too rare for a buffer to wait for them: the buffer is then
   the ``quantile`` of a Poisson count at the window's mean rate (GPUs per second × horizon),
   which weighs the chance that anything arrives at all. Only the past is read: a quiet hour
   shrinks the buffer to nothing and the fleet still scales to zero.
2. **Scale-up** (``placeholders``): while the free GPUs on ready nodes are fewer than the
   buffer, scale-up is asked for the difference as 1-GPU placeholder pods, after the real
   pending pods: booting nodes absorb them first, and the launch is whatever scale-up picks for
   a 1-GPU pod (spot where its price wins: a placeholder loses no work to a reclaim).
3. **Scale-down** (``spare_gpus``): disruption may take capacity away only down to the buffer
   (``DisruptionPolicy.decide``'s ``spare_gpus``): a command whose nodes, less its replacement,
   hold more GPUs than the free GPUs above the buffer is not made.

Why the arrivals' quantile and not the time's (until 2026-12-05 the buffer was always the Poisson
one): jobs arrive in bursts, and the buffer is for the jobs, not for the clock. On Philly the
GPUs arriving per 190 s have a variance 27 times their mean; the Poisson buffer covered 90 % of
190-s windows (measured: 9.9 % of them held more) but only 38 % of the jobs, because most jobs
arrive in the busy 10 %. The share of jobs that find their room is what the quantile now counts.

Example (``tests/control/test_headroom.py``): horizon 190 s; 1-GPU jobs at 0, 300, …, 2,400 s
(nine, each alone in its horizon: a demand of 1), a 4-GPU job at 2,500 s (with the 2,400 s one:
5) and a 2-GPU job at 2,510 s (1 + 4 + 2 = 7). At 2,600 s the eleven demands sorted are nine 1s,
5, 7: the 90 % quantile is the least k that 9.9 of the 11 needed no more than: the 10th, 5 GPUs
(the Poisson rule: 15 GPUs an hour, mean 0.79 over 190 s, CDF 0.453, 0.812, 0.954 → 2). With
1.5 GPUs free on ready nodes, scale-up is asked for 4 placeholders (5 − 1.5, rounded up) and
disruption may remove nothing (spare −3.5). "Free" is ``free_gpus``: wholly free GPUs on ready
nodes, what a 1-GPU arrival can start on.

Both drivers apply it: the simulator counts each job once, at its arrival; the live capacity
controller counts each of its pods once, at its creation time, the first time a cycle sees it
(a requeued pod replaces an interrupted one and is no arrival). The live count is in memory: a
restarted controller counts the pods still in the API, so its buffer starts smaller, never
larger.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from gpufleet.provisioning.scale_up import PendingPod
from gpufleet.state import GPU_MILLI, FleetState, ResourceRequest

PLACEHOLDER = "headroom-placeholder"


@dataclass(frozen=True, slots=True)
class HeadroomSettings:
    """The rule's knobs (module docstring); ``horizon_s`` comes from the scenario."""

    horizon_s: float
    window_s: float = 3600.0
    quantile: float = 0.9
    max_gpus: int = 64


def poisson_quantile(mean: float, q: float, cap: int) -> int:
    """The least k with P(X ≤ k) ≥ q for X ~ Poisson(mean), at most ``cap`` (the CDF summed
    term by term: k stays small here, and the cap bounds the loop)."""
    if mean <= 0:
        return 0
    term = math.exp(-mean)
    cdf = term
    k = 0
    while cdf < q and k < cap:
        k += 1
        term *= mean / k
        cdf += term
    return k


def min_sample(q: float) -> int:
    """The fewest arrivals whose empirical ``q`` quantile is not simply their maximum:
    ⌈1 / (1 − q)⌉ (10 for 0.9)."""
    return math.ceil(1.0 / (1.0 - q) - 1e-9)


@dataclass(slots=True)
class Arrivals:
    """Step 1's sample: per arrival seen over the trailing ``window_s``, its GPUs and the GPUs
    that arrived over the ``horizon_s`` up to and including it (``arrived`` in time order: a
    late one counts at its own time against those already seen). The sorted demands are kept
    until an arrival joins or leaves, so a scan that changes nothing sorts nothing."""

    window_s: float
    horizon_s: float
    _seen: deque[tuple[float, float, float]] = field(default_factory=deque)  # (at, GPUs, demand)
    _gpus: float = 0.0  # GPUs of _seen
    _recent: deque[tuple[float, float]] = field(default_factory=deque)  # (at, GPUs) in horizon
    _recent_gpus: float = 0.0
    _sorted: list[float] | None = None

    def arrived(self, at: float, gpus: float) -> None:
        recent = self._recent
        while recent and recent[0][0] <= at - self.horizon_s:
            self._recent_gpus -= recent.popleft()[1]
        if not recent:
            self._recent_gpus = 0.0  # no float drift once the horizon is empty
        recent.append((at, gpus))
        self._recent_gpus += gpus
        self._seen.append((at, gpus, self._recent_gpus))
        self._gpus += gpus
        self._sorted = None

    def _forget(self, now: float) -> None:
        seen = self._seen
        while seen and seen[0][0] <= now - self.window_s:
            self._gpus -= seen.popleft()[1]
            self._sorted = None
        if not seen:
            self._gpus = 0.0

    def gpus_per_s(self, now: float) -> float:
        """The window's GPUs per second (arrivals at or before ``now - window_s`` have left)."""
        self._forget(now)
        return max(0.0, self._gpus) / self.window_s

    def demands(self, now: float) -> list[float]:
        """The window's demands, sorted."""
        self._forget(now)
        if self._sorted is None:
            self._sorted = sorted(d for _, _, d in self._seen)
        return self._sorted


def demand_quantile(demands: list[float], q: float, cap: int) -> int:
    """The least whole k that at least a share ``q`` of the sorted ``demands`` are ≤ to, at most
    ``cap`` (0 with no sample)."""
    if not demands:
        return 0
    v = demands[max(0, math.ceil(q * len(demands) - 1e-9) - 1)]
    return min(cap, math.ceil(v - 1e-9))


def buffer_gpus(arrivals: Arrivals, now: float, cfg: HeadroomSettings) -> int:
    """Step 1: the buffer in whole GPUs: the demands' quantile from ``min_sample`` arrivals on,
    the Poisson quantile of the window's rate below that."""
    demands = arrivals.demands(now)
    if len(demands) >= min_sample(cfg.quantile):
        return demand_quantile(demands, cfg.quantile, cfg.max_gpus)
    return poisson_quantile(arrivals.gpus_per_s(now) * cfg.horizon_s, cfg.quantile,
                            cfg.max_gpus)


def launch_wanted(buffer: int, free_gpus: float, booting_gpus: float) -> bool:
    """Whether the buffer is short even once the booting nodes are up: a scan has something
    to launch although no pod is pending (the simulator scans on demand; the live loop asks
    scale-up every cycle and needs no such test)."""
    return buffer > free_gpus + booting_gpus


def free_gpus(state: FleetState, closed: Iterable[str] = ()) -> int:
    """The free room the buffer is counted in: wholly free GPUs on the snapshot's nodes (what a
    1-GPU arrival can start on; a MIG GPU offers slices, not a whole GPU, and reads 0 here),
    except on nodes with a taint in ``closed`` (the live driver's cordoned Nodes: the
    simulator's draining nodes are not in its snapshot at all)."""
    free = state.free_milli == GPU_MILLI
    bits = state.toleration_mask(closed)
    if bits:
        free &= ((state.taint_bits & bits) == 0)[:, None]
    return int(np.count_nonzero(free))


def spare_gpus(buffer: int, free_gpus: float) -> float:
    """Step 3: the GPUs disruption may take away (negative: none, the buffer is short). No
    buffer, no limit: disruption runs exactly as without headroom."""
    return free_gpus - buffer if buffer > 0 else math.inf


def placeholders(buffer: int, free_gpus: float) -> list[PendingPod]:
    """Step 2: 1-GPU placeholder pods for the buffer's shortfall on ready nodes (``waited_s``
    infinite: they are the reason to launch now, not a pod that may wait for company)."""
    short = math.ceil(buffer - free_gpus - 1e-9)
    one = ResourceRequest(num_gpu=1)
    return [PendingPod(PLACEHOLDER, one, True, math.inf) for _ in range(max(0, short))]


class Headroom:
    """One fleet's buffer: the arrivals it has seen and the settings."""

    def __init__(self, cfg: HeadroomSettings) -> None:
        self.cfg = cfg
        self.arrivals = Arrivals(cfg.window_s, cfg.horizon_s)

    def arrived(self, at: float, gpus: float) -> None:
        self.arrivals.arrived(at, gpus)

    def buffer(self, now: float) -> int:
        return buffer_gpus(self.arrivals, now, self.cfg)
