"""One job's life in the simulator: progress, checkpoints, interruptions.

Progress is computed, not stepped: within a running segment that started at ``seg_start`` the
job first pays ``overhead`` (restart after an interruption), then alternates ``tau`` seconds of
work with ``ckpt_cost`` seconds of writing a checkpoint. So at elapsed ``e`` past the overhead,
``n = e // (tau + C)`` checkpoints are complete and the work done is ``n·tau + min(e − n(tau+C),
tau)``. The finish time of a segment with ``R`` seconds of work left is ``R + (ceil(R/tau) − 1)·C``
after the overhead (no checkpoint after the last chunk). No event fires per checkpoint.
"""

from __future__ import annotations

import math

from gpufleet.decisions import Bind
from gpufleet.provisioning.binpack import gpu_milli_of
from gpufleet.state import GPU_MILLI, ResourceRequest
from gpufleet.traces.jobs import JobSpec

PENDING, RUNNING, DONE, WAITING = 1, 2, 3, 0
INF = float("inf")


class JobRun:
    __slots__ = (
        "binds",
        "ckpt_cost",
        "ckpt_tau",
        "ctl",
        "enqueued_s",
        "finish_s",
        "first_start_s",
        "gpu_milli",
        "idx",
        "interruptions",
        "key",
        "lost_work_s",
        "notice_s",
        "on_demand_only",
        "on_spot",
        "overhead",
        "replica_milli",
        "req",
        "requeued",
        "seg_start",
        "shape",
        "spec",
        "state",
        "useful_gpu_s",
        "version",
        "work_s",
    )

    def __init__(self, idx: int, spec: JobSpec, req: ResourceRequest, shape: int) -> None:
        self.idx = idx
        self.spec = spec
        self.req = req
        self.shape = shape
        # a MIG instance holds its compute share of the GPU (1g of 7 = 142 milli)
        self.replica_milli = gpu_milli_of(req)
        self.gpu_milli = self.replica_milli * spec.replicas
        # useful work is the request's own size (not what the exclusive baseline rounds it to)
        self.useful_gpu_s = spec.duration_s * spec.replicas * gpu_milli_of(spec.request) / GPU_MILLI
        self.state = WAITING
        self.work_s = 0.0
        self.seg_start = 0.0
        self.overhead = 0.0
        self.ckpt_tau = INF
        self.ckpt_cost = spec.checkpoint_cost_s
        self.binds: list[tuple[Bind, tuple[tuple[int, int, int], ...]]] = []
        self.version = 0
        self.enqueued_s = spec.submit_s
        self.first_start_s: float | None = None
        self.finish_s: float | None = None
        self.interruptions = 0
        self.lost_work_s = 0.0
        self.notice_s: float | None = None
        self.requeued = False
        self.on_demand_only = False
        self.on_spot = False
        self.key: tuple = ()
        self.ctl: object | None = None

    @property
    def gpus(self) -> float:
        return self.gpu_milli / GPU_MILLI

    def progress(self, now: float) -> tuple[float, float]:
        """(work done, work saved by the last complete checkpoint) at ``now``."""
        e = now - self.seg_start - self.overhead
        if e <= 0:
            return self.work_s, self.work_s
        tau = self.ckpt_tau
        if tau == INF:
            return min(self.spec.duration_s, self.work_s + e), self.work_s
        cycle = tau + self.ckpt_cost
        n = math.floor(e / cycle)
        within = e - n * cycle
        done = min(self.spec.duration_s, self.work_s + n * tau + min(within, tau))
        return done, min(done, self.work_s + n * tau)

    def finish_time(self) -> float:
        remaining = max(0.0, self.spec.duration_s - self.work_s)
        base = self.seg_start + self.overhead + remaining
        if self.ckpt_tau == INF or remaining <= 0:
            return base
        k = max(0, math.ceil(remaining / self.ckpt_tau) - 1)
        return base + k * self.ckpt_cost
