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

1. **Size** (``buffer_gpus``): the GPUs that arrived over the last ``window_s`` give a rate
   (GPUs per second); over the horizon — provisioning delay + scan interval, the time a new node
   takes to be asked for and to boot — the GPUs that arrive are taken as Poisson with that rate
   × horizon as mean. The buffer is that distribution's ``quantile``, capped at ``max_gpus``.
   Only the past is read: a quiet hour shrinks the buffer to nothing and the fleet still scales
   to zero.
2. **Scale-up** (``placeholders``): while the free GPUs on ready nodes are fewer than the
   buffer, scale-up is asked for the difference as 1-GPU placeholder pods, after the real
   pending pods: booting nodes absorb them first, and the launch is whatever scale-up picks for
   a 1-GPU pod (spot where its price wins: a placeholder loses no work to a reclaim).
3. **Scale-down** (``spare_gpus``): disruption may take capacity away only down to the buffer
   (``DisruptionPolicy.decide``'s ``spare_gpus``): a command whose nodes, less its replacement,
   hold more GPUs than the free GPUs above the buffer is not made.

Example (``tests/control/test_headroom.py``): 36 GPUs arrived over the last hour (0.01 GPU/s);
horizon 180 + 10 = 190 s, mean 1.9 GPUs; the Poisson CDF at 0..3 is 0.150, 0.434, 0.704, 0.874,
at 4 0.956 ≥ 0.9 → a buffer of 4 GPUs. With 1.5 GPUs free on ready nodes, scale-up is asked for 3
placeholders (4 − 1.5, rounded up) and disruption may remove nothing (spare −2.5). "Free" is
``free_gpus``: wholly free GPUs on ready nodes, what a 1-GPU arrival can start on.

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


@dataclass(slots=True)
class ArrivalRate:
    """GPUs that arrived over the trailing window (``arrived`` in time order)."""

    window_s: float
    _seen: deque[tuple[float, float]] = field(default_factory=deque)
    _gpus: float = 0.0

    def arrived(self, at: float, gpus: float) -> None:
        self._seen.append((at, gpus))
        self._gpus += gpus

    def gpus_per_s(self, now: float) -> float:
        seen = self._seen
        while seen and seen[0][0] <= now - self.window_s:
            self._gpus -= seen.popleft()[1]
        if not seen:
            self._gpus = 0.0  # no float drift once the window is empty
        return max(0.0, self._gpus) / self.window_s


def buffer_gpus(gpus_per_s: float, cfg: HeadroomSettings) -> int:
    """Step 1: the buffer in whole GPUs."""
    return poisson_quantile(gpus_per_s * cfg.horizon_s, cfg.quantile, cfg.max_gpus)


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
        self.rate = ArrivalRate(cfg.window_s)

    def arrived(self, at: float, gpus: float) -> None:
        self.rate.arrived(at, gpus)

    def buffer(self, now: float) -> int:
        return buffer_gpus(self.rate.gpus_per_s(now), self.cfg)
