"""One job's life in the simulator: progress, checkpoints, interruptions.

Progress is computed, not stepped: within a running segment that started at ``seg_start`` the
job first pays ``overhead`` (restart after an interruption), then alternates ``tau`` seconds of
work with ``ckpt_cost`` seconds of writing a checkpoint. So at elapsed ``e`` past the overhead,
``n = e // (tau + C)`` checkpoints are complete and the work done is ``n·tau + min(e − n(tau+C),
tau)``. The finish time of a segment with ``R`` seconds of work left is ``R + (ceil(R/tau) − 1)·C``
after the overhead (no checkpoint after the last chunk). No event fires per checkpoint.

*Leaving*: a job told to checkpoint at a notice keeps its GPUs until the checkpoint is written,
but its progress is settled at the notice: ``work_s`` already holds the work kept, so
``progress`` stops advancing (it returns ``work_s``, and ``saved_s`` as the work a failed
checkpoint falls back to). A job is interrupted once per leave, whatever number of its nodes go.

*Allocation ledger*: ``alloc_gpu_s`` sums bind-to-release time × the milli-GPU its binds hold
(``bound_s``, ``held_milli``), kept apart from the progress fields so that
``gpufleet.sim.invariants`` can check progress against it.
"""

from __future__ import annotations

import math

from gpufleet.decisions import Bind
from gpufleet.provisioning.binpack import gpu_milli_of
from gpufleet.queueing import QueueKey
from gpufleet.state import GPU_MILLI, ResourceRequest
from gpufleet.traces.jobs import JobSpec

PENDING, RUNNING, DONE, WAITING, GAVE_UP = 1, 2, 3, 0, 4
INF = float("inf")


class JobRun:
    __slots__ = (
        "alloc_gpu_s",
        "binds",
        "bound_s",
        "ckpt_cost",
        "ckpt_tau",
        "ctl",
        "enqueued_s",
        "finish_s",
        "first_start_s",
        "gpu_milli",
        "held_milli",
        "idx",
        "interruptions",
        "key",
        "leaving",
        "lost_work_s",
        "notice_s",
        "on_demand_only",
        "on_spot",
        "overhead",
        "replica_milli",
        "req",
        "requeued",
        "saved_s",
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
        self.key: QueueKey = (0, 0, 0, 0.0, 0)  # the queue sets it when the job is pushed
        self.ctl: object | None = None
        self.leaving = False  # checkpointing at a notice: progress settled, GPUs still held
        self.saved_s = 0.0  # while leaving: the work kept if the checkpoint fails
        self.alloc_gpu_s = 0.0  # ledger: GPU-seconds held, closed segments
        self.bound_s = 0.0  # ledger: when the current binds were made
        self.held_milli = 0  # ledger: milli-GPU the current binds hold

    @property
    def gpus(self) -> float:
        return self.gpu_milli / GPU_MILLI

    def start(self, now: float, tau: float) -> float | None:
        """Its last replica is bound: a running segment starts at ``now`` (the restart overhead
        first after an interruption, then a checkpoint every ``tau``). Returns the recovery time
        (notice to running again) when a notice interrupted it, else None."""
        self.state = RUNNING
        self.bound_s = now
        self.seg_start = now
        self.overhead = self.spec.restart_overhead_s if self.interruptions else 0.0
        self.ckpt_tau = tau
        if self.first_start_s is None:
            self.first_start_s = now
        rec = None
        if self.notice_s is not None:
            rec = now + self.overhead - self.notice_s
            self.notice_s = None
        self.version += 1
        return rec

    def requeue(self, resume_work_s: float, ahead_of_new_work: bool, checkpoint_now: bool,
                saved_s: float) -> None:
        """Interrupted: progress settles at ``resume_work_s``; with ``checkpoint_now`` it keeps
        its GPUs (leaving) until the checkpoint is written, falling back to ``saved_s`` if that
        fails."""
        self.interruptions += 1
        self.work_s = resume_work_s
        self.requeued = ahead_of_new_work
        self.version += 1  # the pending FINISH is stale now
        if checkpoint_now:
            self.leaving = True
            self.saved_s = min(saved_s, resume_work_s)

    def progress(self, now: float) -> tuple[float, float]:
        """(work done, work saved by the last complete checkpoint) at ``now``."""
        if self.leaving:
            return self.work_s, self.saved_s
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
