"""A job's lifecycle in the simulated cluster: enqueue, bind, start, stop, finish, interrupt,
requeue, checkpoint — the books each transition keeps (running and done counts, the lost-work
and allocation tallies, recoveries) — and the scheduling pass.

:class:`JobLifecycle` is a component of the driver (``sim.cluster.ClusterSim`` holds one) with
its dependencies named in its constructor: the scenario, the engine (the clock), the job
records, the control layer's policies (``Controls``), the books, the simulated nodes and their
snapshot, the spot exposure clock, the deadline guards, the placement RNG — and four calls back
into the driver: ``at`` (schedule an event), ``apply`` (apply decisions: the driver's one
place), ``scan_at`` (a scan at the time the scan clock names), ``node_changed`` (a node's load
changed) and ``finish`` (the run is over).

The transitions here are the world's; every *choice* is the control layer's and arrives as a
``Decision`` through ``apply``: the scheduling pass is ``control.cycle.plan_cycle`` on this
driver's translation of its jobs (:func:`job_unit`, :func:`job_victim`), whose ``Bind``s and
``Preempt``s go through ``apply``; a recovery strategy's ``Requeue`` comes from ``interrupt``; a
deadline guard's ``Pin`` goes into ``set_on_demand_only``.
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
from gpufleet.control.gang_room import (
    GangRoomBook,
    GangRoomInput,
    Movable,
    Room,
    eviction_loss_s,
    gpu_hour_usd,
)
from gpufleet.control.nominations import Nominations
from gpufleet.control.policies import Controls
from gpufleet.control.queue import PendingQueue, effective_shape, is_urgent
from gpufleet.control.right_size import cap_for, pins_node, rows_within
from gpufleet.control.teams import Gate, scale_up_gates
from gpufleet.control.views import may_move
from gpufleet.decisions import Bind, CapacityType, Decision, Requeue
from gpufleet.placement.mig import bind_masks
from gpufleet.provisioning.binpack import fits_shape
from gpufleet.queueing.preemption import Victim
from gpufleet.queueing.teams.budget import (
    BudgetVerdict,
    budget_verdicts,
    exhaustion_s,
    restrictions,
)
from gpufleet.queueing.teams.fairshare import UsageHistory
from gpufleet.queueing.teams.quota import QuotaBook
from gpufleet.queueing.teams.shares import gpu_equivalent_milli
from gpufleet.queueing.teams.spend import SpendLedger, node_rates
from gpufleet.recovery import NoticeView, SpotExposure, checkpoint_interval
from gpufleet.sim.books import Tally, held_milli
from gpufleet.sim.cloud import SimCloud, SimNode
from gpufleet.sim.engine import Engine
from gpufleet.sim.events import CKPT_DONE, FINISH, PASS
from gpufleet.sim.jobrun import DONE, GAVE_UP, PENDING, RUNNING, JobRun
from gpufleet.sim.nodes import SimFleet
from gpufleet.sim.progress import ProgressGuard
from gpufleet.state import FleetState, ResourceRequest

INF = float("inf")


def job_unit(j: JobRun, milli: int = 0) -> PendingUnit:
    """The simulator's translation of a pending job for ``control.cycle``: its replicas are the
    members (``job#0``…, all needed together), its place in the queue the key
    ``control.queue`` gave it (priority, urgent, requeued, enqueued time, sequence), a pin to
    on-demand its ``pin``; every node is eligible (the request's constraints say the rest).
    Its team is its tenant, ``milli`` its size in GPU-equivalents (read only under quotas)."""
    sid = j.spec.job_id
    n = j.spec.replicas
    return PendingUnit(
        sid, j.req, j.spec.priority, tuple(f"{sid}#{r}" for r in range(n)), n,
        submit_s=j.enqueued_s, seq=j.key[-1], requeued=j.requeued, urgent=is_urgent(j),
        pin=CapacityType.ON_DEMAND if j.on_demand_only else None, shape=effective_shape(j),
        team=j.spec.tenant, milli=milli)


def job_victim(j: JobRun, milli: int = 0) -> Victim:
    """A running single-replica job as a preemption (or, under quotas, reclaim) victim (a gang
    is not torn apart)."""
    bind, masks = j.binds[0]
    return Victim(j.spec.job_id, j.spec.priority, j.bound_s, request_now(j.req, j.on_demand_only),
                  bind, masks, team=j.spec.tenant, milli=milli)


def gang_victims(j: JobRun, milli: int) -> list[Victim]:
    """A running multi-replica job as reclaim sees it: one victim per replica, all of workload
    ``job_id`` (``milli``: the whole job's), so that reclaim takes the gang whole and priority
    preemption leaves it alone. The ``Preempt`` comes back under the job's id."""
    req = request_now(j.req, j.on_demand_only)
    n = len(j.binds)
    sid = j.spec.job_id
    return [Victim(sid, j.spec.priority, j.bound_s, req, bind, masks, team=j.spec.tenant,
                   milli=milli // n + (1 if r < milli % n else 0), workload=sid)
            for r, (bind, masks) in enumerate(j.binds)]


class JobLifecycle:
    """The jobs of one simulation and their transitions (see the module docstring)."""

    def __init__(
        self,
        *,
        scenario: Scenario,
        engine: Engine,
        jobs: list[JobRun],
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
        self._preemptible = len({j.spec.priority for j in jobs}) > 1
        self._running_idx: set[int] = set()  # running jobs (single-replica ones are victims)
        # team quotas (scenario ``teams:``): None without them
        teams = scenario.teams
        self.quotas = None if teams is None else teams.quotas()
        self.history = None if teams is None else UsageHistory(teams.half_life_s)
        self.nominations = Nominations()  # reclaim's claimants (``control.nominations``)
        self.team_milli: dict[str, int] = {}  # GPU-equivalents of the running jobs, per tenant
        self.team_gpu_s: dict[str, float] = {}  # their integral: GPU-equivalent·seconds used
        # demand (queued + running GPU-equivalents) per tenant, and per team with a quota the
        # integrals of min(used, nominal) and min(demand, nominal): the entitled share it got
        # and the one it asked for (the summary's ``entitled_delivered``)
        self.team_demand: dict[str, int] = {}
        self.team_delivered_s: dict[str, float] = {}
        self.team_owed_s: dict[str, float] = {}
        # per GPU model (teams with per-model quotas read it): team → model → milli, and the
        # model each running job holds
        self.team_model_milli: dict[str, dict[str, int]] = {}
        self._job_model: dict[int, str] = {}
        self._nominal = {t.name: t.nominal_milli for t in (teams.nominal() if teams else ())}
        self._team_t = 0.0
        self._milli: dict[int, int] = {}
        # budgets: per-team spend from the nodes' prices (``queueing.teams.spend``), the last
        # verdicts, the spend rate when each (team, period end)'s action first applied, and
        # when a held team's period renews (a pass is due then)
        self.budgets = {} if teams is None else teams.budgets()
        self.ledger = None if teams is None else SpendLedger(
            {t: b.period for t, b in self.budgets.items()})
        self.verdicts: dict[str, BudgetVerdict] = {}
        self.budget_triggers: dict[tuple[str, float], float] = {}
        self._renew_at: float | None = None
        # when a ``hold-and-drain`` budget is next spent at the current rates (a pass is due
        # then: the spend crosses the amount between events, and the drain must not wait)
        self._drain_budgets = {t: b for t, b in self.budgets.items()
                               if b.action == "hold-and-drain"}
        self._drain_at: float | None = None
        # gang room (``control.gang_room``): each pending gang's priced choice, when the next
        # lapses (a full pass is due then), and each request's $/GPU-h
        self.gang_book = GangRoomBook() if controls.gang_room is not None else None
        self._reprice_at: float | None = None
        self._gpu_rates: dict[ResourceRequest, float | None] = {}

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
            if self.all_done():
                self._finish()
            return
        if self.history is not None:
            self.team_usage()
            t = j.spec.tenant
            self.team_demand[t] = self.team_demand.get(t, 0) + self.job_milli(j)
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
        self.charge(node)
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

    def job_milli(self, j: JobRun) -> int:
        """The job's size in milli-GPU-equivalents, all replicas (``queueing.teams.shares``)."""
        got = self._milli.get(j.idx)
        if got is None:
            got = gpu_equivalent_milli(j.req, self.gpu_catalog) * j.spec.replicas
            self._milli[j.idx] = got
        return got

    def team_usage(self, j: JobRun | None = None, sign: int = 0) -> None:
        """Bring the teams' usage history and GPU-equivalent·seconds up to now under the usage
        held since the last change, then apply ``j`` starting (+1) or stopping (-1)."""
        if self.history is None:
            return
        now = self.now
        dt = now - self._team_t
        if dt > 0:
            for team, milli in self.team_milli.items():
                self.team_gpu_s[team] = self.team_gpu_s.get(team, 0.0) + milli * dt / 1000
            for team, nominal in self._nominal.items():
                used = min(self.team_milli.get(team, 0), nominal)
                owed = min(self.team_demand.get(team, 0), nominal)
                self.team_delivered_s[team] = (self.team_delivered_s.get(team, 0.0)
                                               + used * dt / 1000)
                self.team_owed_s[team] = self.team_owed_s.get(team, 0.0) + owed * dt / 1000
            self.history.advance(now, {t: {"gpu": float(m)} for t, m in self.team_milli.items()})
            self._team_t = now
        if j is not None:
            team = j.spec.tenant
            self.team_milli[team] = self.team_milli.get(team, 0) + sign * self.job_milli(j)
            model = (self.cloud.nodes[j.binds[0][0].node].itype.gpu_model if sign > 0
                     else self._job_model.pop(j.idx, ""))
            if sign > 0:
                self._job_model[j.idx] = model
            per = self.team_model_milli.setdefault(team, {})
            per[model] = per.get(model, 0) + sign * self.job_milli(j)
            if sign < 0:  # it leaves the nodes: no longer demand until queued again
                self.team_demand[team] = self.team_demand.get(team, 0) - self.job_milli(j)

    def charge(self, node: SimNode) -> None:
        """The node's split among the teams on it changed: the ledger integrates the old split up
        to now and takes the new one (``queueing.teams.spend.node_rates``: its price pro rata of
        the GPU-equivalents each team holds there)."""
        if self.ledger is None:
            return
        self.ledger.advance(self.now)
        if self.budgets:  # a budget may cross its threshold with nothing pending: note the
            self.budget_now()  # rate that crossed it before the split changes
        milli: dict[str, int] = {}
        for idx, count in node.jobs.items():
            j = self.jobs[idx]
            t = j.spec.tenant
            milli[t] = milli.get(t, 0) + self.job_milli(j) * count // j.spec.replicas
        self.ledger.set_node(node.name, node_rates(node.usd_per_hour, milli))
        if self.budgets:
            self.budget_now()

    def budget_now(self) -> dict[str, BudgetVerdict]:
        """The budgeted teams' verdicts now (``budget_verdicts`` on the ledger's spend and
        rates); remembers the rate at which each period's action first applied (the summary's
        overspend in hours of spend rate)."""
        if self.ledger is None or not self.budgets:
            return {}
        now = self.now
        self.ledger.advance(now)
        self.verdicts = budget_verdicts(self.budgets, self.ledger.spent_micro(),
                                        self.ledger.rates, now)
        for t, v in self.verdicts.items():
            if v.action is not None:
                self.budget_triggers.setdefault((t, v.period_end_s), v.rate_micro_per_s)
        if self._drain_budgets:
            ats = [exhaustion_s(b, self.verdicts[t].spent_micro,
                                self.verdicts[t].rate_micro_per_s, now)
                   for t, b in self._drain_budgets.items() if not self.verdicts[t].draining]
            at = min((a for a in ats if a is not None and a > now), default=None)
            if at is not None and (self._drain_at is None or self._drain_at <= now
                                   or at < self._drain_at):
                self._drain_at = at
                self._at(at, PASS)
        return self.verdicts

    def gates(self, jobs: list[JobRun]) -> list[Gate] | None:
        """What scale-up may launch for each of ``jobs`` (queue order; ``control.teams``);
        None without teams."""
        if self.sc.teams is None:
            return None
        self.team_usage()
        book = QuotaBook(self.quotas or (), self.team_milli)
        return scale_up_gates([(j.spec.tenant, self.job_milli(j)) for j in jobs], book,
                              restrictions(self.budget_now()))

    def _start(self, j: JobRun) -> None:
        self.progress.started(j.idx, self.now)
        self.team_usage(j, +1)
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
            self.charge(node)
            self._node_changed(node)
        j.binds = []
        self.team_usage(j, -1)
        self.running -= 1
        self._running_idx.discard(j.idx)
        self._freed = True
        self.ctl.scan.pod_moved()
        self.want_pass()

    def on_finish(self, payload: tuple[int, int]) -> None:
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
        if self.all_done():
            self._finish()

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
        j = self.jobs[idx]
        if j.version == version and j.state == RUNNING and j.binds:
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
        draining = any(v.draining for v in self.budget_now().values())
        if not self.pending and not draining:
            self._new.clear()
            return None
        if self._reprice_at is not None and self.now >= self._reprice_at:
            self._reprice_at = None  # a gang's wait or reservation lapsed: price it again
            self._freed = True
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
        if self.quotas is not None:
            self.team_usage()
            held = restrictions(self.verdicts)
            quota = QuotaInput(QuotaBook(self.quotas, self.team_milli, self.team_model_milli),
                               self.history, held)
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
            victims = [job_victim(j, self.job_milli(j) if quota else 0)
                       for j in running if j.spec.replicas == 1 and not j.leaving]
            if quota is not None:  # reclaim takes a borrowed gang whole
                victims += [v for j in running if j.spec.replicas > 1 and not j.leaving
                            for v in gang_victims(j, self.job_milli(j))]
        gang_room = self._gang_room_input(cand)
        plan = plan_cycle(
            self.state, self._units_now(cand), self.ctl.placement, self.rng,
            backfill=self.ctl.backfill, now=self.now, victims=victims, evicting=leaving,
            blocked=self._blocked, shapes_present=len(self.pending.shapes), explain=False,
            quota=quota, gang_room=gang_room,
            nominated=self.nominations.current(self.now) if quota is not None else ())
        self._blocked = plan.blocked
        if quota is not None:
            self.nominations.apply(plan.started, plan.nominated, self.now)
        if self.gang_book is not None:
            self._gang_room_chosen(plan)
        return plan

    # -- gang room (``control.gang_room``) ---------------------------------------------------
    def gpu_rate(self, req: ResourceRequest) -> float | None:
        """$/GPU-h of ``req``'s GPUs: the cheapest fitting on-demand list price."""
        if req not in self._gpu_rates:
            self._gpu_rates[req] = gpu_hour_usd(req, self.nodes.offers.on_demand_offers(0.0))
        return self._gpu_rates[req]

    def _gang_room_input(self, cand: list[JobRun]) -> GangRoomInput | None:
        """The cycle's gang-room input: the running pods (every replica, with the time its
        declared work ends) and the movable ones only when some candidate gang is due; None
        when no gang is due and no rows are reserved (the step would do nothing)."""
        book = self.gang_book
        settings = self.ctl.gang_room
        if book is None or settings is None:
            return None
        now = self.now
        if not any(j.spec.replicas > 1 and book.due(j.spec.job_id, now) for j in cand):
            # nothing to price: the step only has reservations to keep, if any
            return GangRoomInput(settings, book, self.gpu_rate) if book.reserved(now) else None
        running: list[Victim] = []
        ends: dict[str, float] = {}
        moves: list[Movable] = []
        for i in sorted(self._running_idx):
            j = self.jobs[i]
            if j.leaving:
                continue
            ends[j.spec.job_id] = j.finish_time()
            if j.spec.replicas > 1:
                running += gang_victims(j, 0)
                continue
            v = job_victim(j)
            running.append(v)
            m = self._movable(j, v)
            if m is not None:
                moves.append(m)
        return GangRoomInput(settings, book, self.gpu_rate, running, ends, moves)

    def _movable(self, j: JobRun, v: Victim) -> Movable | None:
        """``j`` as an eviction for a gang may take it: a checkpointing single pod whose move
        cannot cost its deadline, with what its recovery strategy would lose on the notice a
        preemption gives (none: it has until it is done)."""
        spec = j.spec
        if not (spec.checkpointable and self.sc.checkpointing):
            return None  # (the cheap test first)
        now = self.now
        done, saved = j.progress(now)
        if not may_move(spec, done, j.ckpt_cost, now,
                        self.ctl.guards):  # consolidation's rule (pod_view's): one place
            return None
        plan = self.ctl.recovery.on_notice(NoticeView(
            job_id=spec.job_id, checkpointable=True, work_done_s=done, last_checkpoint_s=saved,
            checkpoint_cost_s=j.ckpt_cost, notice_s=INF, interruptions=j.interruptions + 1,
            on_spot=j.on_spot))
        write = j.ckpt_cost if plan.checkpoint_now else 0.0
        return Movable(v, eviction_loss_s(max(0.0, done - plan.resume_work_s), write,
                                          spec.restart_overhead_s), write)

    def _gang_room_chosen(self, plan: CyclePlan) -> None:
        """Book the cycle's gang-room choices: a scale-up is new demand for the scan, a wait
        or a reservation lapses into a full pass."""
        book = self.gang_book
        assert book is not None
        now = self.now
        for _gid, costs, room in book.apply(plan.started, plan.gang_room, now):
            if room is Room.SCALE_UP:
                self._scan_at(self.ctl.scan.demand(now))
            elif room is Room.PREEMPT:
                self.tally.gang_room_evictions += len(costs.victims)
        nxt = book.next_due()
        if nxt is not None and (self._reprice_at is None or nxt < self._reprice_at):
            self._reprice_at = nxt
            self._at(nxt, PASS)

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
            got = (j.key, job_unit(j, self.job_milli(j) if self.quotas is not None else 0))
            self._units[j.idx] = got
        return got[1]
