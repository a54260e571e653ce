"""The simulation driver: a simulated cloud and cluster run by the control layer's decisions.

The driver contract (what any driver, this one or the Kubernetes one, implements):

1. *Events into state.* Turn the world's events (job submitted, node ready, spot notice, node
   gone or failed, job done, checkpoint written) into the ``FleetState`` snapshot and the job
   records; nothing else reads the world. Here: ``sim.nodes`` (node lifecycle and snapshot
   rows), ``sim.books`` (ledger and series), the handlers below.
2. *Ask the control layer, with the clock and the snapshot.* Admission (``control.admission``)
   on submit; the pending queue (``control.queue``); the deadline guards (``control.deadline``)
   on arrival, before scale-up and on every availability tick (``market_signal``); when to
   scan and which steps are due (``control.scan``: the driver reports node and demand changes
   and schedules the time it answers); offers and views for scale-up and disruption
   (``control.offers``, ``control.views``); the fixed fleet (``control.fleet``) and keeping it
   at size (``control.replacement``); checkpoint intervals (``recovery``); the placement,
   queueing, provisioning and recovery policies. Each answers with data: ``Decision``s, a
   ``Replacement``, a time. The spot market is read through ``market.view.SpotMarketView``.
3. *Apply every Decision in one place* (``_apply``: one ``match`` over ``Bind``, ``Launch``,
   ``Terminate``, ``Pin``, ``Preempt``, ``Requeue``), skipping one the world has overtaken (a
   node no longer ready, a job no longer running), and report the reaction back as events. A
   ``Replacement`` is applied by ``_replace`` (its launches in order until the cloud accepts
   one, as a fleet request with prioritised overrides would).

What stays here is bookkeeping and the world: the event loop, which job is where, the lost-work
and allocation books, and guards that are the world's limits (``max_nodes``). Left for later:
the fixed-fleet ``max_nodes`` cap and the disruption candidate set (every node with room plus
the due candidates) are still chosen in ``_scale_up``/``_disrupt``.

Hot-path notes (82k Philly jobs must replay in well under a minute): a scheduling pass runs once
per timestamp at most; when no capacity was freed since the last pass only the newly arrived
jobs are tried; a shape that failed is not tried again until capacity grows; progress and
checkpoints are computed in closed form (no per-checkpoint events); scans run only while there is
pending work or a node may become removable.
"""

from __future__ import annotations

from decimal import Decimal

import numpy as np

from gpufleet.catalog.gpus import default_gpu_catalog
from gpufleet.catalog.instances import InstanceType
from gpufleet.control.admission import effective_request, request_now, tolerates_spot
from gpufleet.control.deadline import DeadlineView, market_signal
from gpufleet.control.fleet import fixed_fleet
from gpufleet.control.offers import OfferBook
from gpufleet.control.queue import PendingQueue, effective_shape
from gpufleet.control.replacement import FixedFleet, Replacement
from gpufleet.control.scan import Disrupt
from gpufleet.control.views import node_view, pending_pods, pod_view
from gpufleet.decisions import (
    Bind,
    CapacityType,
    Decision,
    Launch,
    Pin,
    Preempt,
    Requeue,
    Terminate,
)
from gpufleet.placement import PlacementResult
from gpufleet.placement.mig import bind_masks
from gpufleet.provisioning import InFlight, NodeView, Unprovisioned
from gpufleet.queueing.gang import place_gang
from gpufleet.recovery import NoticeView, SpotExposure, checkpoint_interval
from gpufleet.sim.books import Series, Tally, held_milli
from gpufleet.sim.cloud import SimCloud, SimNode
from gpufleet.sim.controls import controls_for, deadline_guards
from gpufleet.sim.engine import Engine
from gpufleet.sim.jobrun import DONE, INF, PENDING, RUNNING, JobRun
from gpufleet.sim.nodes import Allocation, Became, SimFleet
from gpufleet.sim.scenario import Scenario
from gpufleet.sim.spot import SpotMarket
from gpufleet.state import GPU_MILLI, FleetState
from gpufleet.traces.jobs import JobSpec

# event kinds (dispatch table index) and priorities at equal times
ARRIVAL, FINISH, READY, NOTICE, GONE, SCAN, PASS, SAMPLE, CKPT_DONE, DEADLINE, FAIL = range(11)
PRIO = {FINISH: 0, GONE: 0, CKPT_DONE: 0, READY: 1, NOTICE: 1, FAIL: 1, ARRIVAL: 2, DEADLINE: 3,
        PASS: 5, SCAN: 6, SAMPLE: 9}
# events that do not keep a run alive: when only these are left, nothing else can happen
PASSIVE = (SAMPLE, DEADLINE, FAIL)


class ClusterSim:
    """One scenario over one workload; ``run_until`` advances it."""

    def __init__(
        self,
        scenario: Scenario,
        jobs: list[JobSpec],
        types: list[InstanceType],
        market: SpotMarket | None,
        seed: int = 0,
    ) -> None:
        self.sc = scenario
        self.engine = Engine()
        self.rng = np.random.default_rng(seed)
        # own stream: drawing failure times does not shift placement tie-breaks
        self.fail_rng = np.random.default_rng([seed, 104729])
        self.gpu_mtbf_s = (scenario.gpu_mtbf_hours * 3600.0
                           if scenario.gpu_mtbf_hours is not None else None)
        self.market = market if scenario.spot else None
        self.gpu_catalog = default_gpu_catalog()
        self.types = {t.name: t for t in types}
        self.tally = Tally()
        self.series = Series()
        self.ctl = controls_for(scenario)
        self.typical = self.ctl.typical
        self._shapes: dict[tuple, int] = {}
        self.jobs = [self._job(i, s) for i, s in enumerate(jobs)]
        self.offers = OfferBook(self.types, self.market,
                                mig=any(j.req.mig_profile is not None for j in self.jobs))
        self.fleet = FixedFleet(self.offers, self.market, self.ctl.spot_strategy)
        self.exposure = SpotExposure()
        self.nodes = SimFleet(self.market, self.offers, scenario.pricing,
                              scenario.utilization_threshold, self.exposure)
        self.pending = PendingQueue()
        self.unprovisioned: tuple[Unprovisioned, ...] = ()  # the last scale-up's leftovers
        self.running = 0
        self.done = 0
        self.arrived = 0
        self._new: list[int] = []
        self._freed = True
        self._blocked: set[int] = set()
        self._pass_at: float | None = None
        self._recent_recoveries: list[float] = []
        self.finished = False
        self.end_s: float | None = None
        self.deadlines = deadline_guards(scenario, jobs, self.market is not None,
                                         self.market.availability_gap(scenario.price_tick_s)
                                         if self.market is not None else 0.0, self.ctl.guards)
        self._periodic = 0
        self._handlers = [
            self._on_arrival, self._on_finish, self._on_ready, self._on_notice, self._on_gone,
            self._on_scan, self._on_pass, self._on_sample, self._on_ckpt_done, self._on_deadline,
            self._on_fail,
        ]
        for j in self.jobs:
            self._at(j.spec.submit_s, ARRIVAL, j.idx)
        self._periodic_at(0.0, SAMPLE)
        if not scenario.autoscaling:
            self._fixed_fleet(jobs)
        if self.deadlines is not None:
            self._periodic_at(0.0, DEADLINE)

    # -- setup --------------------------------------------------------------------------------
    def _job(self, i: int, spec: JobSpec) -> JobRun:
        req = effective_request(spec, self.sc.sharing, self.sc.spot)
        key = (req, spec.replicas)
        shape = self._shapes.setdefault(key, len(self._shapes))
        return JobRun(i, spec, req, shape)

    def _fixed_fleet(self, jobs: list[JobSpec]) -> None:
        """Launch the fixed fleet ``control.fleet.fixed_fleet`` sizes."""
        groups = fixed_fleet(
            [(s, j.req) for s, j in zip(jobs, self.jobs, strict=True)], list(self.types.values()),
            sharing=self.sc.sharing, spot=self.sc.spot, fixed_nodes=self.sc.fixed_nodes,
            quantile=self.sc.fixed_size_quantile,
        )
        for rep in self.fleet.initial(groups, self.sc.spot):
            self._replace(rep, delay=0.0)

    def _replace(self, rep: Replacement, delay: float) -> bool:
        """Apply a fixed-fleet replacement: its launches in order until the cloud accepts one,
        then its ``Terminate`` (if any). False: every launch was refused."""
        for launch in rep.launches:
            node = self._launch_one(self.types[launch.instance_type], launch.zone,
                                    launch.capacity_type == CapacityType.SPOT, launch.max_price,
                                    delay, launch.mig_config is not None)
            if node is not None:
                self.fleet.launched(node.name, launch, rep)
                if rep.terminate is not None:  # an empty node: nothing to drain, it ends now
                    self._end_node(self.cloud.nodes[rep.terminate.node], self.now)
                return True
        return False

    # -- engine plumbing ----------------------------------------------------------------------
    @property
    def now(self) -> float:
        return self.engine.now

    @property
    def state(self) -> FleetState:
        return self.nodes.state

    @property
    def cloud(self) -> SimCloud:
        return self.nodes.cloud

    def _at(self, t: float, kind: int, payload: object = None) -> None:
        self.engine.schedule(t, kind, payload, PRIO[kind])

    def _periodic_at(self, t: float, kind: int) -> None:
        """Periodic events keep running only while other work is queued (else the run ends)."""
        if self.finished or len(self.engine) <= self._periodic:
            return
        self._periodic += 1
        self._at(t, kind)

    def run_until(self, t: float) -> bool:
        eng = self.engine
        heap = eng._heap
        handlers = self._handlers
        while heap and heap[0][0] <= t:
            ev = eng.pop()
            kind = ev[3]
            if kind in PASSIVE:
                self._periodic -= 1
            handlers[kind](ev[4])
            if self.finished:
                return False
        if len(heap) <= self._periodic and not self.finished:
            self._finish()
            return False
        if eng.now < t and not self.finished:
            eng.now = t
        return not self.finished

    def _finish(self) -> None:
        now = self.now
        for node in list(self.cloud.live.values()):
            self._end_node(node, now)
        self.finished = True
        self.end_s = now

    # -- arrivals and the scheduling pass -----------------------------------------------------
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

    def _on_arrival(self, idx: int) -> None:
        self.arrived += 1
        j = self.jobs[idx]
        if j.req.mig_profile is None:  # MIG pods take slices: no part in milli fragmentation
            tasks = self.typical.observe(j.req)
            if tasks is not None:
                self.ctl.placement.set_typical_tasks(tasks)  # type: ignore[attr-defined]
        dl = self.deadlines
        if dl is not None and dl.watches(j.spec, tolerates_spot(j.req)):
            self._apply(dl.on_arrival(idx, self._deadline_view(j), self.now))
        self._enqueue(j)

    def _deadline_view(self, j: JobRun) -> DeadlineView:
        running = j.state == RUNNING
        return DeadlineView(
            j.spec, j.state == PENDING, running, j.on_demand_only, j.on_spot,
            j.progress(self.now)[0] if running else j.work_s,
            max(0.0, j.seg_start + j.overhead - self.now) if running else 0.0,
        )

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
            res = self.ctl.placement.place(state, req, self.rng)  # type: ignore[attr-defined]
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

    # -- nodes (the world side: sim.nodes) ------------------------------------------------
    def _launch_one(
        self, it: InstanceType, zone: str, spot: bool, max_price: Decimal | None, delay: float,
        mig: bool = False,
    ) -> SimNode | None:
        node, notice = self.nodes.launch(it, zone, spot, max_price, self.now, delay, mig)
        if node is None:
            self.tally.launches_failed += 1
            return None
        self._at(node.ready_s, READY, node.name)
        if notice is not None:
            self._at(notice, NOTICE, node.name)
        return node

    def _on_ready(self, name: str) -> None:
        node = self.nodes.ready(name, self.now)
        if node is None:
            return
        if self.gpu_mtbf_s is not None and node.gpus:
            # exponential time to failure, rate = GPUs / GPU-MTBF; passive (see PASSIVE)
            self._periodic += 1
            self._at(self.now + self.fail_rng.exponential(self.gpu_mtbf_s / node.gpus), FAIL,
                     name)
        self._scan_at(self.ctl.scan.node_ready(self.now))
        self._freed = True
        self._want_pass()

    def _node_changed(self, node: SimNode) -> None:
        became = self.nodes.changed(node, self.now)
        if became is Became.EMPTY:
            self._scan_at(self.ctl.scan.node_empty(self.now, node.name in self.fleet.fallback))
        elif became is Became.UNDERUSED:
            self._scan_at(self.ctl.scan.node_underused(self.now))

    def _allocations(self, name: str) -> list[Allocation]:
        """The binds on node ``name`` (to rebuild the snapshot with)."""
        return [(self.jobs[i].req, b, m) for i in self.cloud.nodes[name].jobs
                for b, m in self.jobs[i].binds if b.node == name]

    def _retire(self, node: SimNode) -> None:
        """Take a node out of scheduling (drain); billing continues until _end_node."""
        if self.nodes.retire(node, self.now, self._allocations):
            self.ctl.scan.capacity_booting_changed()

    def _compact(self) -> None:
        self.nodes.compact(self._allocations)

    def _end_node(self, node: SimNode, at: float) -> None:
        self.nodes.end(node, at, self._allocations)

    def _on_notice(self, name: str) -> None:
        node = self.cloud.nodes[name]
        if node.state == "gone" or node.reclaimed:
            return
        node.reclaimed = True
        self.tally.reclaims += 1
        notice = float(node.itype.notice_seconds)
        was_provisioning = node.state == "provisioning"
        self._retire(node)
        for idx in list(node.jobs):
            self._interrupt(self.jobs[idx], notice, "spot notice")
        self._at(self.now + (0.0 if was_provisioning else notice), GONE, name)

    def _on_gone(self, name: str) -> None:
        node = self.cloud.nodes[name]
        for idx in list(node.jobs):  # jobs still checkpointing when the node dies
            j = self.jobs[idx]
            if j.state == RUNNING and j.binds:
                self._ckpt_done_now(j, failed=True)
        self._end_node(node, self.now)
        if not self.sc.autoscaling and node.reclaimed and not self._all_done():
            self._replace(self.fleet.reclaimed(node.itype, node.mig, self.now),
                          self.sc.provisioning_delay_s)
        else:
            self._scan_at(self.ctl.scan.node_gone(self.now))

    def _on_fail(self, name: str) -> None:
        """Unexpected hardware failure: no notice; running jobs lose the work since their last
        checkpoint (all of it without checkpoints) and are requeued; the node is gone. A job
        already leaving (checkpointing after an earlier notice on another of its nodes) is not
        interrupted again: its checkpoint fails and it falls back to the previous one."""
        node = self.cloud.nodes[name]
        if node.state != "ready" or node.reclaimed:
            return  # already draining or gone: the failure does not matter any more
        self.tally.node_failures += 1
        self._retire(node)
        leaving = {idx for idx in node.jobs if self.jobs[idx].leaving}
        for idx in list(node.jobs):
            if self._interrupt(self.jobs[idx], 0.0, "node failure"):
                self.tally.failure_interruptions += 1
        for idx in list(node.jobs):  # a zero-cost checkpoint "fits" a zero notice: done now
            j = self.jobs[idx]
            if j.state == RUNNING and j.binds:
                self._ckpt_done_now(j, failed=idx in leaving)
        self._end_node(node, self.now)
        if not self.sc.autoscaling and not self._all_done():
            rep = self.fleet.failed(name, node.itype, node.spot, node.mig, self.now)
            self._replace(rep, self.sc.provisioning_delay_s)
        # an autoscaled fleet replaces the capacity through scale-up: requeueing the node's jobs
        # (above) scans at once

    def _all_done(self) -> bool:
        return self.done == len(self.jobs)

    # -- interruptions and recovery -----------------------------------------------------------
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

    # -- autoscaler scan ----------------------------------------------------------------------
    def _scan_at(self, t: float | None) -> None:
        if t is not None:
            self._at(t, SCAN, t)

    def _on_scan(self, at: float) -> None:
        self.ctl.scan.fired(at)
        if self.finished:
            return
        if not self.sc.autoscaling:
            self._rebalance()
            return
        launched = 0
        dl = self.deadlines
        if dl is not None and dl.arrivals_to_check():
            views = {i: self._deadline_view(self.jobs[i]) for i in dl.arrivals_to_check()}
            self._apply(dl.check_arrivals(views, self.now))
        if self.ctl.scan.scale_up_due(self.now, bool(self.pending)):
            launched = self._scale_up()
        self._disrupt()
        more_work = bool(self.running or self.nodes.booting or self.arrived < len(self.jobs)
                         or launched)
        self._scan_at(self.ctl.scan.after_scan(
            self.now, bool(self.pending), more_work,
            lambda: min(self.jobs[i].enqueued_s for _, i in self.pending)))

    def _rebalance(self) -> None:
        """Fixed spot fleet: empty fallback nodes back to spot (``control.replacement``); a
        refused launch ends the round (the market is out)."""
        idle = [(n.name, n.itype, n.mig) for n in self.nodes.empty.values()]
        for rep in self.fleet.rebalance(idle, self.now):
            if not self._replace(rep, self.sc.provisioning_delay_s):
                return

    def _scale_up(self) -> int:
        now = self.now
        if len(self.cloud.live) >= self.sc.max_nodes:
            return 0
        pods = []
        for _, i in self.pending[: self.ctl.scale_up.max_pods]:
            j = self.jobs[i]
            pods += pending_pods(j.spec, j.req, j.on_demand_only, now - j.enqueued_s, j.work_s,
                                 bool(j.interruptions), now, self.ctl.guards)
        inflight = [InFlight(self.offers.shape(n.itype, n.mig), n.spot, n.zone)
                    for n in self.nodes.booting.values()]
        reply = self.ctl.scale_up.plan(pods, self.offers.offers(now), inflight,
                                   self.offers.markets(now), self.ctl.spot_strategy)
        self.unprovisioned = reply.unprovisioned  # the last scan's, for reports and tests
        return self._apply(list(reply.launches))

    def _apply_launch(self, launch: Launch) -> int:
        it = self.types[launch.instance_type]
        spot = launch.capacity_type == CapacityType.SPOT
        mig = launch.mig_config is not None
        n = 0
        for _ in range(launch.count):
            if len(self.cloud.live) >= self.sc.max_nodes:
                break
            if self._launch_one(it, launch.zone, spot, launch.max_price,
                                self.sc.provisioning_delay_s, mig):
                n += 1
        return n

    def _disrupt(self) -> None:
        now = self.now
        unneeded = self.sc.scale_down_unneeded_s
        kind, rescan = self.ctl.scan.disruption_due(
            now, (n.empty_since for n in self.nodes.empty.values() if n.empty_since is not None),
            (n.underused_since for n in self.nodes.under.values() if n.underused_since is not None))
        self._scan_at(rescan)
        due_under = kind is Disrupt.UNDERUSED
        if due_under:
            # candidates plus every node with room to take their pods; full nodes cannot help
            views = [
                self._view(n, room_only=n.underused_since is None
                           or now - n.underused_since < unneeded)
                for n in self.cloud.live.values()
                if n.state == "ready" and n.alloc_milli < GPU_MILLI * n.gpus
            ]
        elif kind is Disrupt.EMPTY:
            views = [self._view(n) for n in self.nodes.empty.values()]
        else:
            return
        offers = self.offers.on_demand_offers(now) \
            if due_under and len(self.cloud.live) < self.sc.max_nodes else []
        cmd = self.ctl.disruption.decide(views, now, offers)
        if cmd is None:
            return
        self.tally.consolidations += sum(1 for d in cmd.decisions if isinstance(d, Preempt)
                                         and self._running(d.job_id))
        self.tally.replacements += self._apply(list(cmd.decisions))

    def _running(self, job_id: str) -> bool:
        j = self._job_by_id(job_id)
        return j is not None and j.state == RUNNING

    def _job_by_id(self, job_id: str) -> JobRun | None:
        if not hasattr(self, "_by_id"):
            self._by_id = {j.spec.job_id: j for j in self.jobs}
        return self._by_id.get(job_id)

    def _view(self, n: SimNode, room_only: bool = False) -> NodeView:
        """The disruption policy's view of a node (``room_only``: not a candidate yet, it can
        only receive pods: ``control.views.node_view``)."""
        now = self.now
        pods = None if room_only else tuple(
            pod_view(j.spec, j.req, j.on_demand_only, j.progress(now)[0], j.ckpt_cost, now,
                     self.ctl.guards)
            for j in (self.jobs[i] for i in n.jobs))
        return node_view(self.state, n.name, self.offers.shape(n.itype, n.mig), n.spot,
                         n.usd_per_hour, pods, n.empty_since, n.underused_since)

    # -- deadline-aware spot fallback ---------------------------------------------------------
    def _on_deadline(self, _: object) -> None:
        dl = self.deadlines
        if self._all_done() or dl is None:
            return
        now = self.now
        avail, spot_p, od_p = market_signal(
            {n: t.gpus for n, t in self.types.items()},
            {n: float(t.usd_per_hour) for n, t in self.types.items()}, self.market, now)
        views = {i: self._deadline_view(self.jobs[i]) for i in dl.live
                 if self.jobs[i].state in (PENDING, RUNNING)}
        self._apply(dl.tick(views, now, avail, spot_p, od_p))
        self._periodic_at(now + dl.gap_s, DEADLINE)

    def _apply(self, decisions: list[Decision]) -> int:
        """Apply the control layer's and the policies' decisions, in order: the one place they
        take effect. A decision the world has overtaken since (a node no longer ready, a job no
        longer running) is skipped. Returns the nodes launched."""
        launched = 0
        for d in decisions:
            match d:
                case Bind():
                    self._bind(d)
                case Launch():
                    launched += self._apply_launch(d)
                case Terminate(node=name, only_if_empty=empty_only):
                    node = self.cloud.nodes[name]
                    if node.state != "ready" or (empty_only and node.jobs):
                        continue
                    self._retire(node)
                    wait = max((self.jobs[i].ckpt_cost for i in node.jobs), default=0.0)
                    self._at(self.now + wait, GONE, name)
                case Pin(job_id, capacity_type):
                    j = self._job_by_id(job_id)
                    assert j is not None, job_id
                    if capacity_type == CapacityType.ON_DEMAND:
                        self.tally.deadline_switches += 1
                    self._set_on_demand_only(j, capacity_type == CapacityType.ON_DEMAND)
                case Preempt(job_id, reason):
                    j = self._job_by_id(job_id)
                    if j is not None and j.state == RUNNING:
                        self._interrupt(j, INF, reason, graceful=True)
                case Requeue(job_id):
                    j = self._job_by_id(job_id)
                    if j is not None and j.state == RUNNING and not j.leaving:
                        self._requeue(j, d)
                case _:
                    raise TypeError(f"decision not applied here: {d!r}")
        return launched

    # -- sampling -----------------------------------------------------------------------------
    def _on_sample(self, _: object) -> None:
        now = self.now
        self.series.sample(now, self.cloud.live.values(), self.cloud.accrued_usd(now),
                           len(self.pending), self.tally.interruptions)
        self._periodic_at(now + self.sc.sample_interval_s, SAMPLE)

    def take_recoveries(self) -> tuple[float, ...]:
        out = tuple(self._recent_recoveries)
        self._recent_recoveries.clear()
        return out
