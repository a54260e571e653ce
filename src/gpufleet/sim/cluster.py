"""The simulation driver: a simulated cloud and cluster run by the control layer's decisions.

The driver contract (what any driver, this one or the Kubernetes one, implements):

1. *Events into state.* Turn the world's events (job submitted, node ready, spot notice, node
   gone or failed, job done, checkpoint written) into the ``FleetState`` snapshot and the job
   records; nothing else reads the world. Here: ``sim.events`` (event kinds and their order),
   ``sim.nodes`` (node lifecycle and snapshot rows), ``sim.books`` (ledger and series),
   ``sim.jobs`` (the job lifecycle: enqueue, bind, start, stop, finish, interrupt, requeue,
   checkpoint, and the scheduling pass; a component ``ClusterSim`` holds), the node handlers.
2. *Ask the control layer, with the clock and the snapshot.* Admission (``control.admission``)
   on submit; the pending queue (``control.queue``); the deadline guards (``control.deadline``)
   on arrival, before scale-up and on every availability tick (``market_signal``); when to
   scan and which steps are due (``control.scan``: the driver reports node and demand changes
   and schedules the time it answers); offers and views for scale-up and disruption
   (``control.offers``, ``control.views``); the node cap and the consolidation set
   (``control.limits``); the fixed fleet (``control.fleet``), keeping it at size and whether a
   lost node is replaced (``control.replacement``); checkpoint intervals (``recovery``); the
   placement, queueing, provisioning and recovery policies. Each answers with data:
   ``Decision``s, a ``Replacement``, a time, a yes or no. The spot market is read through
   ``market.view.SpotMarketView``. The autoscaler's scan (scale-up, disruption, the spot
   swap) asks its part in ``sim.autoscaler``, a component ``ClusterSim`` holds.
3. *Apply every Decision in one place* (``_apply``: one ``match`` over ``Bind``, ``Launch``,
   ``Terminate``, ``Pin``, ``Preempt``, ``Requeue``), skipping one the world has overtaken (a
   node no longer ready, a job no longer running), and report the reaction back as events. A
   ``Replacement`` is applied by ``_replace`` (its launches in order until the cloud accepts
   one, as a fleet request with prioritised overrides would).

What stays here is the world and its plumbing: the event loop, the node event handlers, which
job is where, and ``_apply``. Left: the disruption views (``sim.autoscaler``) and the deadline
views (``sim.jobs``) are still assembled in the driver from ``SimNode``/``JobRun`` fields.

Hot-path notes (82k Philly jobs must replay in well under a minute): a scheduling pass runs once
per timestamp at most; when no capacity was freed since the last pass only the newly arrived
jobs are tried; a shape that failed is not tried again until capacity grows; progress and
checkpoints are computed in closed form (no per-checkpoint events); scans run only while there is
pending work or a node may become removable.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import numpy as np

from gpufleet.catalog.gpus import default_gpu_catalog
from gpufleet.catalog.instances import InstanceType
from gpufleet.config import Scenario
from gpufleet.control.admission import effective_request, tolerates_spot
from gpufleet.control.deadline import market_signal
from gpufleet.control.fleet import fixed_fleet
from gpufleet.control.limits import may_launch
from gpufleet.control.offers import OfferBook
from gpufleet.control.policies import controls_for, deadline_guards
from gpufleet.control.queue import PendingQueue
from gpufleet.control.replacement import FixedFleet, Replacement, replaces_lost_node
from gpufleet.control.value_of_time import DelayDefaults, with_delay
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
from gpufleet.errors import NoProgress
from gpufleet.market.spot_cost import ReclaimHazard
from gpufleet.market.spot_model import SpotMarket
from gpufleet.recovery import SpotExposure
from gpufleet.sim.autoscaler import SimAutoscaler
from gpufleet.sim.books import Series, Tally
from gpufleet.sim.cloud import SimCloud, SimNode
from gpufleet.sim.engine import Engine
from gpufleet.sim.events import (
    ARRIVAL,
    DEADLINE,
    FAIL,
    GONE,
    NAMES,
    NOTICE,
    PASS,
    PASSIVE,
    PRIO,
    READY,
    SAMPLE,
    SCAN,
)
from gpufleet.sim.job_table import JobTable
from gpufleet.sim.jobrun import INF, PENDING, RUNNING, JobRun
from gpufleet.sim.jobs import JobLifecycle
from gpufleet.sim.nodes import Allocation, Became, SimFleet
from gpufleet.sim.progress import events_bound, report
from gpufleet.state import GPU_MILLI, FleetState, ResourceRequest
from gpufleet.traces.jobs import JobSource, JobSpec


class ClusterSim:
    """One scenario over one workload; ``run_until`` advances it."""

    def __init__(
        self,
        scenario: Scenario,
        jobs: JobSource,
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
        self._delay = DelayDefaults.of(scenario)
        # a list is held whole; a stream is read as the jobs arrive (``sim.job_table``)
        self.jobs = JobTable(len(jobs), keep=isinstance(jobs, list))
        if self.jobs.keep:
            for i, spec in enumerate(jobs):
                self.jobs.add(self._job(i, spec))
            self._arrivals: Iterator[JobRun] = iter(sorted(self.jobs,
                                                           key=lambda j: j.spec.submit_s))
        else:
            self._arrivals = self._streamed(jobs)
        self.offers = OfferBook(self.types, self.market, mig=any(
            r.mig_profile is not None for _, r in self._requests(jobs)))
        self.fleet = FixedFleet(self.offers, self.market, self.ctl.spot_strategy)
        self.exposure = SpotExposure()
        self.hazard = ReclaimHazard()  # reclaims per node-hour per (type, zone), seen so far
        self.nodes = SimFleet(self.market, self.offers, scenario.pricing,
                              scenario.utilization_threshold, self.exposure, self.hazard)
        self.arrived = 0
        self.finished = False
        self.end_s: float | None = None
        self.deadlines = deadline_guards(scenario, jobs, self.market is not None,
                                         self.market.availability_gap(scenario.price_tick_s)
                                         if self.market is not None else 0.0, self.ctl.guards)
        self.life = JobLifecycle(
            scenario=scenario, engine=self.engine, jobs=self.jobs, controls=self.ctl,
            tally=self.tally, nodes=self.nodes, exposure=self.exposure,
            gpu_catalog=self.gpu_catalog, gpu_mtbf_s=self.gpu_mtbf_s, deadlines=self.deadlines,
            rng=self.rng, at=self._at, apply=self._apply, scan_at=self._scan_at,
            node_changed=self._node_changed, finish=self._finish,
            preemptible=len({s.priority for s in jobs}) > 1)
        self.autoscaler = SimAutoscaler(
            scenario=scenario, engine=self.engine, jobs=self.jobs, life=self.life,
            controls=self.ctl, tally=self.tally, nodes=self.nodes, offers=self.offers,
            market=self.market, hazard=self.hazard, deadlines=self.deadlines, apply=self._apply,
            scan_at=self._scan_at)
        self._periodic = 0
        life = self.life
        self._handlers: list[Callable[[Any], None]] = [
            self._on_arrival, life.on_finish, self._on_ready, self._on_notice, self._on_gone,
            self._on_scan, life.on_pass, self._on_sample, life.on_ckpt_done, self._on_deadline,
            self._on_fail,
        ]
        self._next_arrival()
        self._periodic_at(0.0, SAMPLE)
        if not scenario.autoscaling:
            self._fixed_fleet(jobs)
        if self.deadlines is not None:
            self._periodic_at(0.0, DEADLINE)

    @property
    def now(self) -> float:
        return self.engine.now

    @property
    def state(self) -> FleetState:
        return self.nodes.state

    @property
    def cloud(self) -> SimCloud:
        return self.nodes.cloud

    @property
    def pending(self) -> PendingQueue:
        return self.life.pending

    # -- setup --------------------------------------------------------------------------------
    def _job(self, i: int, spec: JobSpec) -> JobRun:
        """The job as the run carries it: its price of delay resolved (the trace's, else its
        team's, else the scenario's: ``control.value_of_time``), its request admitted."""
        spec, req = self._admitted(spec)
        key = (req, spec.replicas)
        shape = self._shapes.setdefault(key, len(self._shapes))
        return JobRun(i, spec, req, shape)

    def _admitted(self, spec: JobSpec) -> tuple[JobSpec, ResourceRequest]:
        """``spec`` with its price of delay resolved, and its request admitted."""
        spec = with_delay(spec, self._delay)
        return spec, effective_request(spec, self.sc.sharing, self.sc.spot,
                                       self.sc.checkpointing)

    def _requests(self, jobs: JobSource) -> Iterator[tuple[JobSpec, ResourceRequest]]:
        """Each job of ``jobs`` with the request ``_job`` gives it (a list's from its
        ``JobRun``s, a stream's worked out again as it is read)."""
        if self.jobs.keep:
            return ((s, j.req) for s, j in zip(jobs, self.jobs, strict=True))
        return ((s, self._admitted(s)[1]) for s in jobs)

    def _streamed(self, jobs: JobSource) -> Iterator[JobRun]:
        """A streamed workload's jobs, each added to the table as it is read (one arrival
        ahead of the clock); a job out of arrival order is an error naming it."""
        last = 0.0
        for i, spec in enumerate(jobs):
            if spec.submit_s < last:
                raise ValueError(f"job {spec.job_id}: a streamed workload must come in arrival "
                                 f"order; it submits at {spec.submit_s} s, after a job at "
                                 f"{last} s")
            last = spec.submit_s
            j = self._job(i, spec)
            self.jobs.add(j)
            self.life.arrives(j)
            yield j

    def _next_arrival(self) -> None:
        """Schedule the next job's arrival (one at a time: arrivals are the only events of
        their priority, so the order matches scheduling them all at the start)."""
        j = next(self._arrivals, None)
        if j is not None:
            self._at(j.spec.submit_s, ARRIVAL, j.idx)

    def _fixed_fleet(self, jobs: JobSource) -> None:
        """Launch the fixed fleet ``control.fleet.fixed_fleet`` sizes."""
        groups = fixed_fleet(
            list(self._requests(jobs)), list(self.types.values()),
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
    def _at(self, t: float, kind: int, payload: object = None) -> None:
        self.engine.schedule(t, kind, payload, PRIO[kind])

    def _periodic_at(self, t: float, kind: int) -> None:
        """Periodic events keep running only while other work is queued (else the run ends)."""
        if self.finished or len(self.engine) <= self._periodic:
            return
        self._periodic += 1
        self._at(t, kind)

    def run_until(self, t: float) -> bool:
        """Advance to ``t``; False once all work is done. Raises ``NoProgress`` when the run
        stops making progress at one instant (``sim.progress``)."""
        eng = self.engine
        heap = eng._heap
        handlers = self._handlers
        floor = events_bound(len(self.jobs), 0)
        kind = PASS
        try:
            while heap and heap[0][0] <= t:
                ev = eng.pop()
                kind = ev[3]
                if eng.at_instant > floor:
                    self._check_instant()
                if kind in PASSIVE:
                    self._periodic -= 1
                handlers[kind](ev[4])
                if self.finished:
                    return False
        except NoProgress as err:
            raise report(err, NAMES[kind]) from None
        if len(heap) <= self._periodic and not self.finished:
            self._finish()
            return False
        if eng.now < t and not self.finished:
            eng.now = t
        return not self.finished

    def _check_instant(self) -> None:
        bound = events_bound(len(self.jobs), len(self.cloud.nodes))
        if self.engine.at_instant > bound:
            raise self.life.progress.stalled(self.now, self.engine.at_instant, bound,
                                             [i for _, i in self.pending])

    def _finish(self) -> None:
        now = self.now
        for node in list(self.cloud.live.values()):
            self._end_node(node, now)
        self.finished = True
        self.end_s = now

    # -- arrivals and the scheduling pass -----------------------------------------------------
    def _on_arrival(self, idx: int) -> None:
        self.arrived += 1
        self._next_arrival()
        j = self.jobs[idx]
        if j.req.mig_profile is None:  # MIG pods take slices: no part in milli fragmentation
            tasks = self.typical.observe(j.req)
            if tasks is not None:
                self.ctl.placement.set_typical_tasks(tasks)
        dl = self.deadlines
        if dl is not None and dl.watches(j.spec, tolerates_spot(j.req)):
            self._apply(dl.on_arrival(idx, self.life.deadline_view(j), self.now))
        if self.ctl.headroom is not None:
            self.ctl.headroom.arrived(self.now, j.replica_milli * j.spec.replicas / GPU_MILLI)
        self.life.enqueue(j)

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
        self.life.capacity_freed()

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
            self.life.interrupt(self.jobs[idx], notice, "spot notice")
        self._at(self.now + (0.0 if was_provisioning else notice), GONE, name)

    def _on_gone(self, name: str) -> None:
        node = self.cloud.nodes[name]
        for idx in list(node.jobs):  # jobs still checkpointing when the node dies
            j = self.jobs[idx]
            if j.state == RUNNING and j.binds:
                self.life.ckpt_done_now(j, failed=True)
        self._end_node(node, self.now)
        if replaces_lost_node(self.sc.autoscaling, not self.life.all_done(), node.reclaimed,
                              failed=False):
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
            if self.life.interrupt(self.jobs[idx], 0.0, "node failure"):
                self.tally.failure_interruptions += 1
        for idx in list(node.jobs):  # a zero-cost checkpoint "fits" a zero notice: done now
            j = self.jobs[idx]
            if j.state == RUNNING and j.binds:
                self.life.ckpt_done_now(j, failed=idx in leaving)
        self._end_node(node, self.now)
        if replaces_lost_node(self.sc.autoscaling, not self.life.all_done(), reclaimed=False,
                              failed=True):
            rep = self.fleet.failed(name, node.itype, node.spot, node.mig, self.now)
            self._replace(rep, self.sc.provisioning_delay_s)
        # an autoscaled fleet replaces the capacity through scale-up: requeueing the node's jobs
        # (above) scans at once

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
        self.autoscaler.scan(self.arrived < len(self.jobs))

    def _rebalance(self) -> None:
        """Fixed spot fleet: empty fallback nodes back to spot (``control.replacement``); a
        refused launch ends the round (the market is out)."""
        idle = [(n.name, n.itype, n.mig) for n in self.nodes.empty.values()]
        for rep in self.fleet.rebalance(idle, self.now):
            if not self._replace(rep, self.sc.provisioning_delay_s):
                return

    def _apply_launch(self, launch: Launch) -> int:
        it = self.types[launch.instance_type]
        spot = launch.capacity_type == CapacityType.SPOT
        mig = launch.mig_config is not None
        n = 0
        for _ in range(launch.count):
            if not may_launch(len(self.cloud.live), self.sc.max_nodes):
                break
            if self._launch_one(it, launch.zone, spot, launch.max_price,
                                self.sc.provisioning_delay_s, mig):
                n += 1
        return n

    # -- deadline-aware spot fallback ---------------------------------------------------------
    def _on_deadline(self, _: object) -> None:
        dl = self.deadlines
        if self.life.all_done() or dl is None:
            return
        now = self.now
        avail, spot_p, od_p = market_signal(
            {n: t.gpus for n, t in self.types.items()},
            {n: float(t.usd_per_hour) for n, t in self.types.items()}, self.market, now)
        views = {i: self.life.deadline_view(self.jobs[i]) for i in dl.live
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
                    self.life.bind(d)
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
                    j = self.life.job_by_id(job_id)
                    assert j is not None, job_id
                    if capacity_type == CapacityType.ON_DEMAND:
                        self.tally.deadline_switches += 1
                    self.life.set_on_demand_only(j, capacity_type == CapacityType.ON_DEMAND)
                case Preempt(job_id, reason):
                    j = self.life.job_by_id(job_id)
                    if j is not None and j.state == RUNNING:
                        self.life.interrupt(j, INF, reason, graceful=True)
                case Requeue(job_id):
                    j = self.life.job_by_id(job_id)
                    if j is not None and j.state == RUNNING and not j.leaving:
                        self.life.requeue(j, d)
                case _:
                    raise TypeError(f"decision not applied here: {d!r}")
        return launched

    # -- sampling -----------------------------------------------------------------------------
    def _on_sample(self, _: object) -> None:
        now = self.now
        self.series.sample(now, self.cloud.live.values(), self.cloud.accrued_usd(now),
                           len(self.pending), self.tally.interruptions)
        if self.sc.teams is not None:
            self.life.team_books.team_usage()
            self.series.sample_teams((q.name for q in self.sc.teams.queues),
                                     self.life.team_books.team_milli)
        self._periodic_at(now + self.sc.sample_interval_s, SAMPLE)
