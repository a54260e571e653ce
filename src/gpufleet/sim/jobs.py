"""A job's lifecycle in the simulated cluster: enqueue, bind, start, stop, finish, interrupt,
requeue, checkpoint — and the books each transition keeps (running and done counts, the lost-work
and allocation tallies, recoveries).

:class:`JobLifecycle` is a part of the driver (``sim.cluster.ClusterSim`` inherits it), kept in
its own module so that the driver module holds only event plumbing, node events and ``_apply``.
The transitions here are the world's; every *choice* is still the control layer's and arrives as
a ``Decision`` through the driver's ``_apply`` (a recovery strategy's ``Requeue`` from
``_interrupt``, a deadline guard's ``Pin`` into ``_set_on_demand_only``).

The scheduling pass lives here too (``_want_pass``/``_on_pass``/``_try_start``: the queueing
policy's backfill pass over the pending queue, the placement policy's ``Bind``s applied through
``_apply``). What it needs from the driver (the attributes annotated below, and these
methods): ``_at`` (schedule an event), ``_apply`` (apply decisions), ``_scan_at`` (a scan at
the time the scan clock names), ``_node_changed`` (a node's load changed), ``_finish`` (the run
is over).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gpufleet.catalog.gpus import GpuCatalog
from gpufleet.config import Scenario
from gpufleet.control.admission import request_now
from gpufleet.control.deadline import DeadlineGuards, DeadlineView
from gpufleet.control.policies import Controls
from gpufleet.control.queue import PendingQueue, effective_shape
from gpufleet.decisions import Bind, Decision, Requeue
from gpufleet.placement import PlacementResult
from gpufleet.placement.mig import bind_masks
from gpufleet.queueing.gang import place_gang
from gpufleet.recovery import NoticeView, SpotExposure, checkpoint_interval
from gpufleet.sim.books import Tally, held_milli
from gpufleet.sim.cloud import SimCloud, SimNode
from gpufleet.sim.engine import Engine
from gpufleet.sim.events import CKPT_DONE, FINISH, PASS
from gpufleet.sim.jobrun import DONE, PENDING, RUNNING, JobRun
from gpufleet.sim.nodes import SimFleet
from gpufleet.state import FleetState


class JobLifecycle:
    """The job transitions of ``ClusterSim`` (see the module docstring for the contract)."""

    sc: Scenario
    engine: Engine
    jobs: list[JobRun]
    ctl: Controls
    tally: Tally
    pending: PendingQueue
    nodes: SimFleet
    exposure: SpotExposure
    gpu_catalog: GpuCatalog
    gpu_mtbf_s: float | None
    deadlines: DeadlineGuards | None
    running: int
    done: int
    _new: list[int]
    _blocked: set[int]
    _pass_at: float | None
    rng: np.random.Generator
    _freed: bool
    _recent_recoveries: list[float]
    _by_id: dict[str, JobRun]
    _at: Callable[..., None]
    _apply: Callable[[list[Decision]], int]
    _scan_at: Callable[[float | None], None]
    _node_changed: Callable[[SimNode], None]
    _finish: Callable[[], None]

    @property
    def now(self) -> float:
        return self.engine.now

    @property
    def state(self) -> FleetState:
        return self.nodes.state

    @property
    def cloud(self) -> SimCloud:
        return self.nodes.cloud

    def _enqueue(self, j: JobRun) -> None:
        j.state = PENDING
        self.pending.push(j, self.now)
        self._new.append(j.idx)
        self._want_pass()
        self._scan_at(self.ctl.scan.demand(self.now))

    def _set_on_demand_only(self, j: JobRun, flag: bool) -> None:
        if j.on_demand_only == flag:
            return
        if j.state != PENDING:
            j.on_demand_only = flag
            return
        self.pending.pin(j, flag)
        self._freed = True
        self._want_pass()
        # a different request now: scale-up must look again (the pinned pod's spot node, if one
        # is booting, no longer absorbs it)
        self._scan_at(self.ctl.scan.demand(self.now))

    def _deadline_view(self, j: JobRun) -> DeadlineView:
        running = j.state == RUNNING
        return DeadlineView(
            j.spec, j.state == PENDING, running, j.on_demand_only, j.on_spot,
            j.progress(self.now)[0] if running else j.work_s,
            max(0.0, j.seg_start + j.overhead - self.now) if running else 0.0,
        )

    def _bind(self, bind: Bind) -> None:
        """Apply one replica's ``Bind`` (MIG slices from its slots); the job starts with the
        last replica's."""
        j = self._job_by_id(bind.job_id.rpartition("#")[0])
        assert j is not None and j.state == PENDING, bind
        if not j.binds:
            self.pending.remove(j)
            j.held_milli = 0
            j.on_spot = False
        masks = bind_masks(self.state, bind, self.gpu_catalog)
        self.state.allocate(request_now(j.req, j.on_demand_only), bind, masks)
        j.binds.append((bind, masks))
        node = self.cloud.nodes[bind.node]
        j.held_milli += held_milli(bind, masks, node, self.gpu_catalog)
        node.jobs[j.idx] = node.jobs.get(j.idx, 0) + 1
        node.alloc_milli += j.replica_milli
        self._node_changed(node)
        j.on_spot = j.on_spot or node.spot
        if len(j.binds) == j.spec.replicas:
            self._start(j)

    def _start(self, j: JobRun) -> None:
        rec = j.start(self.now, self._tau(j, j.on_spot))
        if rec is not None:
            self.tally.recoveries.append(rec)
            self._recent_recoveries.append(rec)
        self.running += 1
        self._at(j.finish_time(), FINISH, (j.idx, j.version))

    def _tau(self, j: JobRun, on_spot: bool) -> float:
        """The job's checkpoint interval for this start (``recovery.checkpoint_interval``)."""
        return checkpoint_interval(
            self.ctl.interval, checkpoints=self.sc.checkpointing and j.spec.checkpointable,
            fixed_interval_s=self.sc.checkpoint_interval_s, checkpoint_cost_s=j.ckpt_cost,
            node_gpus=sum(self.cloud.nodes[n].gpus for n in {b.node for b, _ in j.binds}),
            gpu_mtbf_s=self.gpu_mtbf_s, on_spot=on_spot, reclaims=self.tally.reclaims,
            spot_exposure_s=self.exposure.at(self.now),
        )

    def _stop(self, j: JobRun, at: float) -> None:
        """Release j's GPUs at ``at`` and book its allocated GPU-time (the ledger: bind to
        release × milli-GPU held) and cost share."""
        self.tally.release(j, [self.cloud.nodes[b.node] for b, _ in j.binds], at)
        j.leaving = False
        per_replica = j.replica_milli
        for bind, masks in j.binds:
            self.state.release(j.req, bind, masks)
            node = self.cloud.nodes[bind.node]
            cnt = node.jobs.get(j.idx, 0) - 1
            if cnt > 0:
                node.jobs[j.idx] = cnt
            else:
                node.jobs.pop(j.idx, None)
            node.alloc_milli -= per_replica
            self._node_changed(node)
        j.binds = []
        self.running -= 1
        self._freed = True
        self.ctl.scan.pod_moved()
        self._want_pass()

    def _on_finish(self, payload: tuple[int, int]) -> None:
        idx, version = payload
        j = self.jobs[idx]
        if j.version != version or j.state != RUNNING:
            return
        self._stop(j, self.now)
        j.state = DONE
        j.work_s = j.spec.duration_s
        j.finish_s = self.now
        self.tally.useful_gpu_s += j.useful_gpu_s
        self.done += 1
        if self.deadlines is not None:
            self.deadlines.done(idx)
        if self.done == len(self.jobs):
            self._finish()

    def _all_done(self) -> bool:
        return self.done == len(self.jobs)

    def _interrupt(self, j: JobRun, notice: float, why: str, graceful: bool = False) -> bool:
        """Interrupt a running job once per leave: a job already leaving (checkpointing at an
        earlier notice, e.g. from another node of its gang) is not interrupted again — its
        progress was settled then. The recovery strategy's ``Requeue`` is applied by ``_apply``.
        Returns whether the job was interrupted now."""
        if j.state != RUNNING or j.leaving:
            return False
        done, saved = j.progress(self.now)
        view = NoticeView(
            job_id=j.spec.job_id, checkpointable=j.spec.checkpointable and self.sc.checkpointing,
            work_done_s=done, last_checkpoint_s=saved, checkpoint_cost_s=j.ckpt_cost,
            notice_s=notice, interruptions=j.interruptions + 1, on_spot=j.on_spot,
        )
        if not graceful:  # a preemption we asked for is not an interruption the job suffered
            self.tally.interruptions += 1
            if j.notice_s is None:
                j.notice_s = self.now
        self._apply([self.ctl.recovery.on_notice(view)])
        return True

    def _requeue(self, j: JobRun, plan: Requeue) -> None:
        """Apply a recovery strategy's ``Requeue``: book the work lost, then leave the nodes
        now or after a checkpoint (the GPUs stay held until it is written)."""
        now = self.now
        done, saved = j.progress(now)
        self.tally.lose(j, max(0.0, done - plan.resume_work_s))
        j.requeue(plan.resume_work_s, plan.ahead_of_new_work, plan.checkpoint_now, saved)
        if plan.on_demand_only:
            self._set_on_demand_only(j, True)
        if plan.checkpoint_now:
            self._at(now + j.ckpt_cost, CKPT_DONE, (j.idx, j.version))
        else:
            self._stop(j, now)
            self._enqueue(j)

    def _on_ckpt_done(self, payload: tuple[int, int]) -> None:
        idx, version = payload
        j = self.jobs[idx]
        if j.version == version and j.state == RUNNING and j.binds:
            self._ckpt_done_now(j, failed=False)

    def _ckpt_done_now(self, j: JobRun, failed: bool) -> None:
        """The job leaves its nodes after checkpointing (``failed``: a node died first, so the
        job falls back to its previous checkpoint and the work since is lost)."""
        if failed:
            kept = min(j.work_s, j.saved_s if j.leaving else j.progress(self.now)[1])
            self.tally.lose(j, j.work_s - kept)
            j.work_s = kept
        self._stop(j, self.now)
        self._enqueue(j)

    def _running(self, job_id: str) -> bool:
        j = self._job_by_id(job_id)
        return j is not None and j.state == RUNNING

    def _job_by_id(self, job_id: str) -> JobRun | None:
        if not hasattr(self, "_by_id"):
            self._by_id = {j.spec.job_id: j for j in self.jobs}
        return self._by_id.get(job_id)

    def take_recoveries(self) -> tuple[float, ...]:
        out = tuple(self._recent_recoveries)
        self._recent_recoveries.clear()
        return out

    # -- the scheduling pass (pending jobs to Binds) ----------------------------------------
    def _want_pass(self) -> None:
        if self._pass_at != self.now:
            self._pass_at = self.now
            self._at(self.now, PASS)

    def _on_pass(self, _: object) -> None:
        self._pass_at = None
        if not self.pending:
            self._new.clear()
            return
        jobs = self.jobs
        if self._freed:
            self._freed = False
            self._blocked = set()
            cand = [(i, effective_shape(jobs[i]), jobs[i].enqueued_s) for _, i in self.pending]
        else:
            new = sorted(
                (jobs[i] for i in self._new if jobs[i].state == PENDING), key=lambda j: j.key
            )
            cand = [(j.idx, effective_shape(j), j.enqueued_s) for j in new]
        self._new.clear()
        if not cand:
            return
        res = self.ctl.backfill.run(
            cand, self.now, self._try_start, len(self.pending.shapes), self._blocked
        )
        self._blocked = res.blocked

    def _try_start(self, idx: int) -> bool:
        """Place a pending job (all replicas of a gang or none): its ``Bind``s are applied."""
        j = self.jobs[idx]
        req = request_now(j.req, j.on_demand_only)
        state = self.state
        if j.spec.replicas == 1:
            res = self.ctl.placement.place(state, req, self.rng)
            if not isinstance(res, PlacementResult):
                return False
            placed = [res]
        else:
            got = place_gang(state, req, j.spec.replicas, self.ctl.placement, self.rng,
                             j.spec.job_id)
            if not isinstance(got, list):
                return False
            placed = got
        self._apply([res.to_bind(state, f"{j.spec.job_id}#{r}") for r, res in enumerate(placed)])
        return True
