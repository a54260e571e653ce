"""A job's lifecycle in the simulated cluster: enqueue, bind, start, stop, finish, interrupt,
requeue, checkpoint — the books each transition keeps (running and done counts, the lost-work
and allocation tallies, recoveries; the teams' usage and spend in ``sim.team_books``) — and the
scheduling pass.

:class:`JobLifecycle` is a component of the driver (``sim.cluster.ClusterSim`` holds one) with
its dependencies named in its constructor: the scenario, the engine (the clock), the job
records, the control layer's policies (``Controls``), the books, the simulated nodes and their
snapshot, the spot exposure clock, the deadline guards, the placement RNG — and four calls back
into the driver: ``at`` (schedule an event), ``apply`` (apply decisions: the driver's one
place), ``scan_at`` (a scan at the time the scan clock names), ``node_changed`` (a node's load
changed) and ``finish`` (the run is over).

The transitions here are the world's; every *choice* is the control layer's and arrives as a
``Decision`` through ``apply``: the scheduling pass is ``control.cycle.plan_cycle`` on this
driver's translation of its jobs (``sim.translate``: ``job_unit``, ``job_victim``), with gang
room's input from ``sim.gang_room``, whose ``Bind``s and ``Preempt``s go through ``apply``; a
recovery strategy's ``Requeue`` comes from ``interrupt``; a deadline guard's ``Pin`` goes into
``set_on_demand_only``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from gpufleet.catalog.gpus import GpuCatalog
from gpufleet.config import Scenario
from gpufleet.control.admission import request_now
from gpufleet.control.cycle import DRAIN, CyclePlan, PendingUnit, QuotaInput, plan_cycle
from gpufleet.control.deadline import DeadlineGuards, DeadlineView, urgent
from gpufleet.control.nominations import Nominations
from gpufleet.control.policies import Controls
from gpufleet.control.queue import PendingQueue
from gpufleet.control.right_size import cap_for, pins_node, rows_within
from gpufleet.decisions import Bind, Decision, Requeue
from gpufleet.placement.mig import bind_masks
from gpufleet.provisioning.binpack import fits_shape
from gpufleet.queueing.preemption import Victim
from gpufleet.queueing.teams.budget import restrictions
from gpufleet.queueing.teams.quota import QuotaBook
from gpufleet.recovery import NoticeView, SpotExposure, checkpoint_interval
from gpufleet.sim.books import Tally, held_milli
from gpufleet.sim.cloud import SimCloud, SimNode
from gpufleet.sim.engine import Engine
from gpufleet.sim.events import CKPT_DONE, FINISH, PASS
from gpufleet.sim.gang_room import SimGangRoom
from gpufleet.sim.job_table import JobTable
from gpufleet.sim.jobrun import DONE, GAVE_UP, PENDING, RUNNING, JobRun
from gpufleet.sim.nodes import SimFleet
from gpufleet.sim.progress import ProgressGuard
from gpufleet.sim.team_books import TeamBooks
from gpufleet.sim.translate import gang_victims, job_unit, job_victim
from gpufleet.state import FleetState, ResourceRequest


class JobLifecycle:
    """The jobs of one simulation and their transitions (see the module docstring)."""

    def __init__(
        self,
        *,
        scenario: Scenario,
        engine: Engine,
        jobs: JobTable,
        controls: Controls,
        tally: Tally,
        nodes: SimFleet,
        exposure: SpotExposure,
        gpu_catalog: GpuCatalog,
        gpu_mtbf_s: float | None,
        deadlines: DeadlineGuards | None,
        rng: np.random.Generator,
        at: Callable[..., None],
        apply: Callable[[list[Decision]], int],
        scan_at: Callable[[float | None], None],
        node_changed: Callable[[SimNode], None],
        finish: Callable[[], None],
        preemptible: bool,
    ) -> None:
        self.sc = scenario
        self.engine = engine
        self.jobs = jobs
        self.ctl = controls
        self.tally = tally
        self.nodes = nodes
        self.exposure = exposure
        self.gpu_catalog = gpu_catalog
        self.gpu_mtbf_s = gpu_mtbf_s
        self.deadlines = deadlines
        self.rng = rng
        self._at = at
        self._apply = apply
        self._scan_at = scan_at
        self._node_changed = node_changed
        self._finish = finish
        self.pending = PendingQueue()
        self.running = 0
        self.done = 0
        self._by_id = {j.spec.job_id: j for j in jobs}
        self.progress = ProgressGuard(self._describe)
        self._new: list[int] = []
        self._freed = True
        self._blocked: set = set()
        self._pass_at: float | None = None
        self._recent_recoveries: list[float] = []
        self._units: dict[int, tuple[tuple, PendingUnit]] = {}
        self._sizes: dict[ResourceRequest, tuple[int, ...]] = {}  # node sizes that fit it
        # preemption needs two priorities; a workload with one never builds victims
        self._preemptible = preemptible
        self._running_idx: set[int] = set()  # running jobs (single-replica ones are victims)
        # the teams' usage, demand, spend and budgets (scenario ``teams:``; ``sim.team_books``)
        self.team_books = TeamBooks(scenario=scenario, engine=engine, jobs=jobs, nodes=nodes,
                                    gpu_catalog=gpu_catalog, at=at)
        self.nominations = Nominations()  # reclaim's claimants (``control.nominations``)
        self._renew_at: float | None = None  # when a restricted team's budget period renews
        # gang room (``control.gang_room``; ``sim.gang_room``): None when gangs are not priced
        self.gang_room = None if controls.gang_room is None else SimGangRoom(
            scenario=scenario, engine=engine, jobs=jobs, controls=controls, tally=tally,
            nodes=nodes, at=at, scan_at=scan_at)

    @property
    def now(self) -> float:
        return self.engine.now

    @property
    def state(self) -> FleetState:
        return self.nodes.state

    @property
    def cloud(self) -> SimCloud:
        return self.nodes.cloud

    def enqueue(self, j: JobRun) -> None:
        if self.progress.give_up(j.idx, j.spec.job_id):  # ``sim.progress``: never queued again
            j.state = GAVE_UP
            if self.deadlines is not None:
                self.deadlines.done(j.idx)
            self._ended(j)
            if self.all_done():
                self._finish()
            return
        self.team_books.queued(j)
        j.state = PENDING
        self.pending.push(j, self.now)
        self._new.append(j.idx)
        self.want_pass()
        self._scan_at(self.ctl.scan.demand(self.now))

    def set_on_demand_only(self, j: JobRun, flag: bool) -> None:
        if j.on_demand_only == flag:
            return
        if j.state != PENDING:
            j.on_demand_only = flag
            return
        self.pending.pin(j, flag)
        self._freed = True
        self.want_pass()
        # a different request now: scale-up must look again (the pinned pod's spot node, if one
        # is booting, no longer absorbs it)
        self._scan_at(self.ctl.scan.demand(self.now))

    def deadline_view(self, j: JobRun) -> DeadlineView:
        running = j.state == RUNNING
        return DeadlineView(
            j.spec, j.state == PENDING, running, j.on_demand_only, j.on_spot,
            j.progress(self.now)[0] if running else j.work_s,
            max(0.0, j.seg_start + j.overhead - self.now) if running else 0.0,
        )

    def bind(self, bind: Bind) -> None:
        """Apply one replica's ``Bind`` (MIG slices from its slots); the job starts with the
        last replica's."""
        j = self.job_by_id(bind.job_id.rpartition("#")[0])
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
        self.team_books.charge(node)
        self._node_changed(node)
        j.on_spot = j.on_spot or node.spot
        if len(j.binds) == j.spec.replicas:
            self._start(j)

    def node_cap(self, j: JobRun) -> int | None:
        """The largest node (GPUs) ``j`` may use now (``control.right_size``): on an
        autoscaled fleet, a job that cannot move and outlasts scale-down is kept off nodes
        it would strand; None: any node."""
        sc = self.sc
        if not sc.autoscaling or not pins_node(
                j.spec.checkpointable and sc.checkpointing, j.spec.replicas,
                j.spec.duration_s - j.work_s, sc.scale_down_unneeded_s):
            return None  # (the cheap test first: most jobs can move)
        req = j.req
        if req not in self._sizes:
            offers = self.nodes.offers
            self._sizes[req] = tuple(it.gpus for it in offers.types.values()
                                     if fits_shape(req, offers.shape(it, req.mig_profile
                                                                     is not None)))
        # an urgent deadline job cannot wait for a node of its size: it takes any room
        return cap_for(req, j.spec.checkpointable and sc.checkpointing, j.spec.replicas,
                       j.spec.duration_s - j.work_s, sc.scale_down_unneeded_s,
                       urgent(j.spec, j.work_s, bool(j.interruptions), self.now,
                              self.ctl.guards), self._sizes[req])

    def _start(self, j: JobRun) -> None:
        self.progress.started(j.idx, self.now)
        self.team_books.team_usage(j, +1)
        rec = j.start(self.now, self._tau(j, j.on_spot))
        if rec is not None:
            self.tally.recoveries.append(rec)
            self._recent_recoveries.append(rec)
        self.running += 1
        self._running_idx.add(j.idx)
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
            self.team_books.charge(node)
            self._node_changed(node)
        j.binds = []
        self.team_books.team_usage(j, -1)
        self.running -= 1
        self._running_idx.discard(j.idx)
        self._freed = True
        self.ctl.scan.pod_moved()
        self.want_pass()

    def on_finish(self, payload: tuple[int, int]) -> None:
        idx, version = payload
        j = self.jobs.get(idx)  # (None: a stale event of a streamed job that has ended)
        if j is None or j.version != version or j.state != RUNNING:
            return
        self._stop(j, self.now)
        j.state = DONE
        j.work_s = j.spec.duration_s
        j.finish_s = self.now
        self.tally.useful_gpu_s += j.useful_gpu_s
        self.done += 1
        if self.deadlines is not None:
            self.deadlines.done(idx)
        self._ended(j)
        if self.all_done():
            self._finish()

    def arrives(self, j: JobRun) -> None:
        """A streamed job joins the run (a list's jobs are all known from the start)."""
        self._by_id[j.spec.job_id] = j

    def _ended(self, j: JobRun) -> None:
        """``j`` finished or was given up on: its record is kept; a streamed run forgets the
        job and what was kept about it (``sim.job_table``)."""
        self.jobs.ended(j)
        if not self.jobs.keep:
            del self._by_id[j.spec.job_id]
            self._units.pop(j.idx, None)
            self.team_books.forget(j.idx)
            self.progress.forget(j.idx)

    def _describe(self, idx: int) -> str:
        """A job as a progress report names it: its id, and its team when it has one."""
        spec = self.jobs[idx].spec
        return spec.job_id + (f" (team {spec.tenant})" if self.sc.teams is not None else "")

    def all_done(self) -> bool:
        """Every job finished, or given up on (``sim.progress``)."""
        return self.done + len(self.progress.given_up) == len(self.jobs)

    def interrupt(self, j: JobRun, notice: float, why: str, graceful: bool = False) -> bool:
        """Interrupt a running job once per leave: a job already leaving (checkpointing at an
        earlier notice, e.g. from another node of its gang) is not interrupted again — its
        progress was settled then. The recovery strategy's ``Requeue`` is applied through
        ``apply``. Returns whether the job was interrupted now."""
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
        plan = self.ctl.recovery.on_notice(view)
        if graceful and why.startswith(DRAIN) and self.now > j.bound_s:
            self.progress.drained(j.idx, plan.resume_work_s > j.work_s, why)
        self._apply([plan])
        return True

    def requeue(self, j: JobRun, plan: Requeue) -> None:
        """Apply a recovery strategy's ``Requeue``: book the work lost, then leave the nodes
        now or after a checkpoint (the GPUs stay held until it is written)."""
        now = self.now
        done, saved = j.progress(now)
        self.tally.lose(j, max(0.0, done - plan.resume_work_s))
        j.requeue(plan.resume_work_s, plan.ahead_of_new_work, plan.checkpoint_now, saved)
        if plan.on_demand_only:
            self.set_on_demand_only(j, True)
        if plan.checkpoint_now:
            self._at(now + j.ckpt_cost, CKPT_DONE, (j.idx, j.version))
        else:
            self._stop(j, now)
            self.enqueue(j)

    def on_ckpt_done(self, payload: tuple[int, int]) -> None:
        idx, version = payload
        j = self.jobs.get(idx)
        if j is not None and j.version == version and j.state == RUNNING and j.binds:
            self.ckpt_done_now(j, failed=False)

    def ckpt_done_now(self, j: JobRun, failed: bool) -> None:
        """The job leaves its nodes after checkpointing (``failed``: a node died first, so the
        job falls back to its previous checkpoint and the work since is lost)."""
        if failed:
            kept = min(j.work_s, j.saved_s if j.leaving else j.progress(self.now)[1])
            self.tally.lose(j, j.work_s - kept)
            j.work_s = kept
        self._stop(j, self.now)
        self.enqueue(j)

    def is_running(self, job_id: str) -> bool:
        j = self.job_by_id(job_id)
        return j is not None and j.state == RUNNING

    def job_by_id(self, job_id: str) -> JobRun | None:
        return self._by_id.get(job_id)

    def take_recoveries(self) -> tuple[float, ...]:
        out = tuple(self._recent_recoveries)
        self._recent_recoveries.clear()
        return out

    # -- the scheduling pass (pending jobs to Binds) ----------------------------------------
    def capacity_freed(self) -> None:
        """Capacity grew (a node is ready): every pending job is tried again."""
        self._freed = True
        self.want_pass()

    def want_pass(self) -> None:
        if self._pass_at != self.now:
            self._pass_at = self.now
            self._at(self.now, PASS)

    def on_pass(self, _: object) -> None:
        plan = self.plan_pass()
        if plan is not None:
            self._apply([*plan.binds, *plan.evictions])

    def plan_pass(self) -> CyclePlan | None:
        """One ``control.cycle`` over the jobs worth trying: every pending job when capacity
        was freed since the last pass, else only the new arrivals (a shape that failed stays
        blocked until capacity grows). None when there is nothing to try."""
        self._pass_at = None
        books = self.team_books
        draining = any(v.draining for v in books.budget_now().values())
        if not self.pending and not draining:
            self._new.clear()
            return None
        gang_room = self.gang_room
        if gang_room is not None and gang_room.lapsed():
            self._freed = True  # a gang's wait or reservation lapsed: price it again
        if self._renew_at is not None and self.now >= self._renew_at:
            self._renew_at = None  # a held team's budget period renewed: try everything
            self._freed = True
            self._scan_at(self.ctl.scan.demand(self.now))  # and scale up for it
        jobs = self.jobs
        if self._freed:
            self._freed = False
            self._blocked = set()
            cand = [jobs[i] for _, i in self.pending]
        else:
            cand = [jobs[i] for i in dict.fromkeys(self._new) if jobs[i].state == PENDING]
        self._new.clear()
        if not cand and not draining:
            return None
        victims: list[Victim] = []
        leaving = False
        quota = None
        if books.quotas is not None:
            books.team_usage()
            held = restrictions(books.verdicts)
            quota = QuotaInput(QuotaBook(books.quotas, books.team_milli, books.team_model_milli),
                               books.history, held)
            # a restricted team's work is tried again when its period renews (a spot-only
            # team's may wait for spot that never comes, as a held team's waits)
            ends = [v.period_end_s for v in held.values()]
            if ends and self._renew_at is None:
                self._renew_at = min(ends)
                self._at(self._renew_at, PASS)
        if self._preemptible or quota is not None:
            # a job checkpointing to leave still holds the room it frees
            running = [jobs[i] for i in sorted(self._running_idx)]
            leaving = any(j.leaving for j in running)
            victims = [job_victim(j, books.job_milli(j) if quota else 0)
                       for j in running if j.spec.replicas == 1 and not j.leaving]
            if quota is not None:  # reclaim takes a borrowed gang whole
                victims += [v for j in running if j.spec.replicas > 1 and not j.leaving
                            for v in gang_victims(j, books.job_milli(j))]
        room = None if gang_room is None else gang_room.cycle_input(cand, self._running_idx)
        plan = plan_cycle(
            self.state, self._units_now(cand), self.ctl.placement, self.rng,
            backfill=self.ctl.backfill, now=self.now, victims=victims, evicting=leaving,
            blocked=self._blocked, shapes_present=len(self.pending.shapes), explain=False,
            quota=quota, gang_room=room,
            nominated=self.nominations.current(self.now) if quota is not None else ())
        self._blocked = plan.blocked
        if quota is not None:
            self.nominations.apply(plan.started, plan.nominated, self.now)
        if gang_room is not None:
            gang_room.chosen(plan)
        return plan

    def _units_now(self, cand: list[JobRun]) -> list[PendingUnit]:
        """The candidates' units, each capped job's limited to the rows within its cap
        (``node_cap``; one mask per cap per pass)."""
        masks: dict[int, np.ndarray] = {}
        out = []
        for j in cand:
            u = self._unit(j)
            cap = self.node_cap(j)
            if cap is not None:
                mask = masks.get(cap)
                if mask is None:
                    mask = masks[cap] = rows_within(self.state, cap)
                u = replace(u, eligible=mask if u.eligible is None else u.eligible & mask)
            out.append(u)
        return out

    def _unit(self, j: JobRun) -> PendingUnit:
        """``job_unit(j)``, rebuilt only when the job's queue key changed (re-queued, pinned)."""
        got = self._units.get(j.idx)
        if got is None or got[0] is not j.key:
            books = self.team_books
            got = (j.key, job_unit(j, books.job_milli(j) if books.quotas is not None else 0))
            self._units[j.idx] = got
        return got[1]
