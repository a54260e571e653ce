"""The simulation driver: a simulated cloud and cluster run by the control layer's decisions.

The driver contract (what any driver, this one or the Kubernetes one, must do):

1. *Events into state.* Turn the world's events (job submitted, node ready, spot notice, node
   gone or failed, job done, checkpoint written) into the ``FleetState`` snapshot and the
   driver's job records; nothing else reads the world.
2. *Ask the control layer.* Admission (``control.admission``) on submit; the pending queue
   (``control.queue``) for order and pins; the deadline guards (``control.deadline``) on arrival,
   before scale-up and on every availability tick; the fixed-fleet plan (``control.fleet``);
   checkpoint intervals (``recovery.exposure``); the placement, queueing, provisioning and
   recovery policies. Each answers with data, mostly ``Decision``s.
3. *Apply every Decision in one place* (``_apply``: one ``match`` over ``Launch``,
   ``Terminate``, ``Pin``, ``Preempt``), skipping one the world has overtaken (a node no longer
   ready, a job no longer running), and report the reaction back as events.

Still decided here and due to move to ``gpufleet.control`` (issue 10): scan timing (when
scale-up and disruption run, ``_on_scan``/``_disrupt``/``_node_changed`` timers), the views
they see (``_view``, ``_fresh_offers``), fixed-fleet node replacement and spot rebalance
(``_replace_node``, ``_on_gone``/``_on_fail``, ``_rebalance``), and the ``Requeue``
a recovery strategy returns is applied in ``_interrupt`` (with the lost-work books), not yet in
``_apply``.

Hot-path notes (82k Philly jobs must replay in well under a minute): a scheduling pass runs once
per timestamp at most; when no capacity was freed since the last pass only the newly arrived
jobs are tried; a shape that failed is not tried again until capacity grows; progress and
checkpoints are computed in closed form (no per-checkpoint events); scans run only while there is
pending work or a node may become removable.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal

import numpy as np

from gpufleet.catalog.commitments import on_demand_rate
from gpufleet.catalog.gpus import default_gpu_catalog
from gpufleet.catalog.instances import InstanceType
from gpufleet.control.admission import (
    SPOT_TAINT,
    effective_request,
    request_now,
    tolerates_spot,
)
from gpufleet.control.deadline import (
    DeadlineGuards,
    DeadlineView,
    GuardConfig,
    movable,
    spot_reference_type,
    urgent,
)
from gpufleet.control.fleet import fixed_fleet
from gpufleet.control.queue import PendingQueue, effective_shape
from gpufleet.decisions import (
    Bind,
    CapacityType,
    Decision,
    Launch,
    Pin,
    Preempt,
    Terminate,
)
from gpufleet.market.bidding import get_spot_strategy
from gpufleet.placement import PlacementResult, get_policy
from gpufleet.provisioning import (
    MIG_CONFIG,
    MIG_CONFIG_LABEL,
    DisruptionPolicy,
    InFlight,
    NodeShape,
    NodeView,
    Offer,
    PendingPod,
    PodView,
    ScaleUpPolicy,
    on_demand_zone,
)
from gpufleet.queueing import BackfillPass
from gpufleet.queueing.gang import place_gang
from gpufleet.recovery import (
    IntervalPolicy,
    NoticeView,
    SpotExposure,
    checkpoint_interval,
    get_recovery_strategy,
)
from gpufleet.sim.cloud import MICRO, SimCloud, SimNode
from gpufleet.sim.engine import Engine
from gpufleet.sim.jobrun import DONE, INF, PENDING, RUNNING, JobRun
from gpufleet.sim.scenario import Scenario
from gpufleet.sim.spot import SpotMarket
from gpufleet.state import GPU_MILLI, FleetState, NodeInfo, ResourceRequest
from gpufleet.traces.jobs import JobSpec

# event kinds (dispatch table index) and priorities at equal times
ARRIVAL, FINISH, READY, NOTICE, GONE, SCAN, PASS, SAMPLE, CKPT_DONE, DEADLINE, FAIL = range(11)
PRIO = {FINISH: 0, GONE: 0, CKPT_DONE: 0, READY: 1, NOTICE: 1, FAIL: 1, ARRIVAL: 2, DEADLINE: 3,
        PASS: 5, SCAN: 6, SAMPLE: 9}
# events that do not keep a run alive: when only these are left, nothing else can happen
PASSIVE = (SAMPLE, DEADLINE, FAIL)


@dataclass(slots=True)
class Series:
    """Time series for the report (one row per sample)."""

    t: list[float] = field(default_factory=list)
    alloc_gpus: list[float] = field(default_factory=list)
    od_gpus: list[int] = field(default_factory=list)
    spot_gpus: list[int] = field(default_factory=list)
    cost_usd: list[float] = field(default_factory=list)
    pending: list[int] = field(default_factory=list)
    interruptions: list[int] = field(default_factory=list)


@dataclass(slots=True)
class Tally:
    """Exact integrals and counters (not sampled)."""

    alloc_gpu_s: float = 0.0
    useful_gpu_s: float = 0.0
    interruptions: int = 0
    reclaims: int = 0
    lost_gpu_s: float = 0.0
    recoveries: list[float] = field(default_factory=list)
    cost_by_tenant_micro: Counter = field(default_factory=Counter)
    launches_failed: int = 0
    consolidations: int = 0
    deadline_switches: int = 0
    node_failures: int = 0
    replacements: int = 0  # nodes launched by multi-node consolidation
    failure_interruptions: int = 0


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
        self.cloud = SimCloud()
        self.state = FleetState()
        self.market = market if scenario.spot else None
        self.gpu_catalog = default_gpu_catalog()
        self.types = {t.name: t for t in types}
        self.tally = Tally()
        self.series = Series()
        self.policy = self._placement_policy(jobs)
        self.recovery = get_recovery_strategy(scenario.recovery)
        self.interval = IntervalPolicy()
        self.scale_up = ScaleUpPolicy(scenario.pending_gpu_threshold, scenario.max_pending_wait_s)
        self.disruption = DisruptionPolicy(
            scenario.scale_down_unneeded_s, scenario.utilization_threshold, scenario.consolidation,
            multi_node=scenario.multi_node_consolidation,
        )
        self.spot_strategy = get_spot_strategy(scenario.spot_strategy) if scenario.spot else None
        self.backfill = BackfillPass(scenario.starvation_s)
        self._shapes: dict[tuple, int] = {}
        self.jobs = [self._job(i, s) for i, s in enumerate(jobs)]
        self._mig_jobs = any(j.req.mig_profile is not None for j in self.jobs)
        self.pending = PendingQueue()
        self.running = 0
        self.done = 0
        self.arrived = 0
        self._new: list[int] = []
        self._freed = True
        self._blocked: set[int] = set()
        self._pass_at: float | None = None
        self._scans: set[float] = set()
        self._last_consolidation = -INF
        self._last_due_n = 0
        self._changed = True
        self.exposure = SpotExposure()
        self._recent_recoveries: list[float] = []
        self.finished = False
        self.end_s: float | None = None
        self.guard_cfg = GuardConfig(scenario.autoscaling, scenario.checkpointing,
                                     scenario.provisioning_delay_s, scenario.max_pending_wait_s)
        self.deadlines: DeadlineGuards | None = None
        self._periodic = 0
        self._dead_rows = 0
        self._empty: dict[str, SimNode] = {}
        self._under: dict[str, SimNode] = {}
        self._shape_cache: dict[tuple[str, bool], NodeShape] = {}
        self._booting: dict[str, SimNode] = {}
        self._fallback: set[str] = set()
        self._demand_changed = True
        self._last_scale_up = -INF
        self._offer_cache: tuple[tuple[int, int], list[Offer]] | None = None
        # on-demand nodes per (type, zone), for the zone choice (provisioning.on_demand_zone)
        self._od_nodes: Counter = Counter()
        self._od_version = 0
        self._home_zone: dict[str, str] = {}  # fixed fleets: the node group's one zone
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
        self._setup_deadlines()

    # -- setup --------------------------------------------------------------------------------
    def _placement_policy(self, jobs: list[JobSpec]) -> object:
        from gpufleet.placement import DEFAULT_POLICY
        from gpufleet.placement.typical import TypicalLearner

        name = self.sc.placement or (DEFAULT_POLICY if self.sc.packing else "spread")
        # FGD's typical tasks are learned from arrived jobs only (_on_arrival), never the trace
        self.typical = TypicalLearner()
        return get_policy(name)

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
        for g in groups:
            it = g.instance_type
            # a static cluster is one placement group, so one zone: chosen once, kept for
            # replacements (gangs must fit inside one zone)
            self._home_zone.setdefault(it.name, self._od_zone(it))
            for k in range(g.nodes):
                self._replace_node(it, spot=self.sc.spot and k >= g.on_demand_nodes, delay=0.0,
                                   mig=g.mig)

    def _replace_node(self, it: InstanceType, spot: bool, delay: float, mig: bool = False) -> None:
        """Fixed-size node group: launch one node, spot where the strategy finds a zone."""
        if spot and self.market is not None and self.spot_strategy is not None:
            plan = self.spot_strategy.plan(it.name, self.market.markets(it.name, self.now), 1)
            for launch in plan:
                if self._launch_one(it, launch.zone, True, launch.max_price, delay, mig):
                    return
        zone = self._home_zone.get(it.name) or self._od_zone(it)
        node = self._launch_one(it, zone, False, None, delay, mig)
        if spot and node is not None:
            self._fallback.add(node.name)  # wanted spot: rebalanced when spot comes back

    def _setup_deadlines(self) -> None:
        if not (self.sc.spot and self.sc.deadline_policy and self.market is not None):
            return
        if not any(j.spec.deadline_s is not None and j.spec.interruptible for j in self.jobs):
            return
        from gpufleet.market.deadline import DEFAULT_DEADLINE_POLICY, get_deadline_policy

        name = self.sc.deadline_policy
        policy = get_deadline_policy(DEFAULT_DEADLINE_POLICY if name == "default" else name)
        self.deadlines = DeadlineGuards(policy, self._availability_gap(), self.guard_cfg)
        self._periodic_at(0.0, DEADLINE)

    def _availability_gap(self) -> float:
        m = self.market
        if m is not None and m.mode == "trace" and m.avail:
            return float(min(a.gap_s for a in m.avail.values()))
        return self.sc.price_tick_s

    # -- engine plumbing ----------------------------------------------------------------------
    @property
    def now(self) -> float:
        return self.engine.now

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
        self._demand_changed = True
        self._want_pass()
        if self.sc.autoscaling:
            self._ensure_scan(self.now)

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
        self._demand_changed = True
        if self.sc.autoscaling:
            self._ensure_scan(self.now)

    def _on_arrival(self, idx: int) -> None:
        self.arrived += 1
        j = self.jobs[idx]
        if j.req.mig_profile is None:  # MIG pods take slices: no part in milli fragmentation
            tasks = self.typical.observe(j.req)
            if tasks is not None:
                self.policy.set_typical_tasks(tasks)  # type: ignore[attr-defined]
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
        res = self.backfill.run(
            cand, self.now, self._try_start, len(self.pending.shapes), self._blocked
        )
        self._blocked = res.blocked

    def _try_start(self, idx: int) -> bool:
        j = self.jobs[idx]
        req = request_now(j.req, j.on_demand_only)
        state = self.state
        if j.spec.replicas == 1:
            res = self.policy.place(state, req, self.rng)  # type: ignore[attr-defined]
            if not isinstance(res, PlacementResult):
                return False
            placed = [res]
        else:
            got = place_gang(state, req, j.spec.replicas, self.policy, self.rng, j.spec.job_id)
            if not isinstance(got, list):
                return False
            placed = got
        self.pending.remove(j)
        self._start(j, req, placed)
        return True

    def _start(self, j: JobRun, req: ResourceRequest, placed: list[PlacementResult]) -> None:
        now = self.now
        state = self.state
        j.binds = []
        on_spot = False
        held = 0
        for r, res in enumerate(placed):
            bind = res.to_bind(state, f"{j.spec.job_id}#{r}")
            masks = res.mig_masks()
            state.allocate(req, bind, masks)
            j.binds.append((bind, masks))
            held += self._held_milli(bind, masks)
            node = self.cloud.nodes[bind.node]
            node.jobs[j.idx] = node.jobs.get(j.idx, 0) + 1
            node.alloc_milli += j.replica_milli
            self._node_changed(node)
            on_spot = on_spot or node.spot
        j.on_spot = on_spot
        j.state = RUNNING
        j.bound_s = now
        j.held_milli = held
        j.seg_start = now
        j.overhead = j.spec.restart_overhead_s if j.interruptions else 0.0
        j.ckpt_tau = self._tau(j, on_spot)
        if j.first_start_s is None:
            j.first_start_s = now
        if j.notice_s is not None:
            rec = now + j.overhead - j.notice_s
            self.tally.recoveries.append(rec)
            self._recent_recoveries.append(rec)
            j.notice_s = None
        self.running += 1
        j.version += 1
        self._at(j.finish_time(), FINISH, (j.idx, j.version))

    def _held_milli(self, bind: Bind, masks: tuple[tuple[int, int, int], ...]) -> int:
        """Milli-GPU a bind actually holds: its GPUs × milli each, or for MIG the instances'
        compute slices as a share of their GPU (the allocation ledger's unit)."""
        if bind.mig:
            mig = self.gpu_catalog[self.cloud.nodes[bind.node].itype.gpu_model].mig
            slices = mig.compute_slices if mig is not None else 1
            return sum(compute * GPU_MILLI // slices for _, _, compute in masks)
        return len(bind.gpus) * bind.milli_per_gpu

    def _tau(self, j: JobRun, on_spot: bool) -> float:
        """The job's checkpoint interval for this start (``recovery.checkpoint_interval``)."""
        return checkpoint_interval(
            self.interval, checkpoints=self.sc.checkpointing and j.spec.checkpointable,
            fixed_interval_s=self.sc.checkpoint_interval_s, checkpoint_cost_s=j.ckpt_cost,
            node_gpus=sum(self.cloud.nodes[n].gpus for n in {b.node for b, _ in j.binds}),
            gpu_mtbf_s=self.gpu_mtbf_s, on_spot=on_spot, reclaims=self.tally.reclaims,
            spot_exposure_s=self.exposure.at(self.now),
        )

    def _stop(self, j: JobRun, at: float) -> None:
        """Release j's GPUs at ``at`` and book its allocated GPU-time (the ledger: bind to
        release × milli-GPU held) and cost share."""
        seg = max(0.0, at - j.bound_s)
        held = seg * j.held_milli / GPU_MILLI
        j.alloc_gpu_s += held
        self.tally.alloc_gpu_s += held
        j.held_milli = 0
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
            if node.gpus:
                share = per_replica / (GPU_MILLI * node.gpus)
                self.tally.cost_by_tenant_micro[j.spec.tenant] += int(
                    node.usd_per_hour * MICRO * share * seg / 3600.0
                )
            self._node_changed(node)
        j.binds = []
        self.running -= 1
        self._freed = True
        self._changed = True
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

    # -- nodes --------------------------------------------------------------------------------
    def _launch_one(
        self, it: InstanceType, zone: str, spot: bool, max_price: Decimal | None, delay: float,
        mig: bool = False,
    ) -> SimNode | None:
        now = self.now
        m = self.market
        if spot:
            if m is None or not m.available(it.name, zone, now):
                self.tally.launches_failed += 1
                return None
            price = m.price(it.name, zone, now)
        else:
            price = on_demand_rate(it, self.sc.pricing)
        bid = float(max_price) if max_price is not None else None
        node = self.cloud.launch(it, zone, spot, price, now, delay, bid, mig=mig)
        if not spot:
            self._od_nodes[(it.name, zone)] += 1
            self._od_version += 1
        self._booting[node.name] = node
        self._at(node.ready_s, READY, node.name)
        if spot and m is not None:
            t = m.reclaim_time(it.name, zone, now, bid)
            if t is not None:
                self._at(max(t, now), NOTICE, node.name)
        return node

    def _on_ready(self, name: str) -> None:
        node = self.cloud.nodes[name]
        if node.state != "provisioning":
            return
        del self._booting[name]
        self._demand_changed = True
        it = node.itype
        gm = self.gpu_catalog[it.gpu_model]
        labels = {"nvidia.com/gpu.product": it.gpu_model,
                  "karpenter.sh/capacity-type": "spot" if node.spot else "on-demand",
                  "topology.kubernetes.io/zone": node.zone}
        mig_kw: dict = {}
        if node.mig and gm.mig is not None:
            labels[MIG_CONFIG_LABEL] = MIG_CONFIG
            labels["nvidia.com/mig.strategy"] = "mixed"
            mig_kw = dict(mig_gpus=range(it.gpus), mig_compute_slices=gm.mig.compute_slices)
        info = NodeInfo(
            name=name, instance_type=it.name, zone=node.zone,
            capacity_type=CapacityType.SPOT if node.spot else CapacityType.ON_DEMAND,
            labels=labels,
            taints=frozenset({SPOT_TAINT}) if node.spot else frozenset(),
        )
        self.state.add_node(
            name, gpu_model=it.gpu_model, num_gpus=it.gpus, cpu_milli=it.cpu_milli,
            memory_mib=it.memory_mib, gpu_memory_mib=gm.memory_mib,
            nvlink_domains=it.nvlink_domain_of(), cuda_driver=it.cuda_driver, info=info,
            **mig_kw,
        )
        node.state = "ready"
        node.ready_s = self.now
        if self.gpu_mtbf_s is not None and it.gpus:
            # exponential time to failure, rate = GPUs / GPU-MTBF; passive (see PASSIVE)
            self._periodic += 1
            self._at(self.now + self.fail_rng.exponential(self.gpu_mtbf_s / it.gpus), FAIL, name)
        node.empty_since = self.now
        self._empty[name] = node
        if node.spot:
            self.exposure.node_ready(node.ready_s)
        if self.sc.autoscaling:
            self._ensure_scan(self.now + self.sc.scale_down_unneeded_s)
        self._freed = True
        self._want_pass()

    def _node_changed(self, node: SimNode) -> None:
        now = self.now
        if node.state != "ready":
            return
        if not node.jobs:
            if node.empty_since is None:
                node.empty_since = now
                self._empty[node.name] = node
                if self.sc.autoscaling:
                    self._ensure_scan(now + self.sc.scale_down_unneeded_s)
                elif node.name in self._fallback:
                    self._ensure_scan(now)
            node.underused_since = None
            self._under.pop(node.name, None)
            return
        if node.empty_since is not None:
            node.empty_since = None
            del self._empty[node.name]
        under = node.alloc_milli < self.sc.utilization_threshold * GPU_MILLI * node.gpus
        if under and node.underused_since is None:
            node.underused_since = now
            self._under[node.name] = node
            if self.sc.autoscaling and self.sc.consolidation:
                self._ensure_scan(now + self.sc.scale_down_unneeded_s)
        elif not under and node.underused_since is not None:
            node.underused_since = None
            del self._under[node.name]

    def _retire(self, node: SimNode) -> None:
        """Take a node out of scheduling (drain); billing continues until _end_node."""
        if node.state == "ready":
            self.state.remove_node(node.name)
            self._empty.pop(node.name, None)
            self._under.pop(node.name, None)
            if node.spot:
                self.exposure.node_gone(node.ready_s)
            self._dead_rows += 1
            if self._dead_rows > 256 and self._dead_rows > 2 * len(self.state.index):
                self._compact()
            if node.spot:
                self.exposure.close(self.now - node.ready_s)
        if self._booting.pop(node.name, None) is not None:
            self._demand_changed = True
        node.state = "draining"

    def _compact(self) -> None:
        """Rebuild FleetState without dead rows (rows are never reused; an autoscaled fleet
        launches tens of thousands of nodes over months, and every placement is a pass over all
        rows). Live nodes keep their order; running jobs' binds are re-applied by node name."""
        old = self.state
        new = FleetState(max_gpus=old.max_gpus, capacity=max(64, 2 * len(old.index)))
        for name in sorted(old.index, key=old.index.__getitem__):
            i = old.index[name]
            info = old.nodes[i]
            g = int(old.num_gpus[i])
            node = self.cloud.nodes[name]
            it = node.itype
            new.add_node(
                name, gpu_model=it.gpu_model, num_gpus=g, cpu_milli=int(old.cpu_total[i]),
                memory_mib=int(old.mem_total[i]), gpu_memory_mib=int(old.gpu_mem_total[i, 0]),
                nvlink_domains=[int(x) for x in old.nvlink_domain[i, :g]],
                cuda_driver=int(old.cuda_driver[i]),
                mig_gpus=[k for k in range(g) if old.mig_enabled[i, k]], info=info,
                mig_compute_slices=int(old.mig_compute_total[i, :g].max(initial=0)) or 7,
            )
        for name in new.index:
            for idx in self.cloud.nodes[name].jobs:
                j = self.jobs[idx]
                for bind, masks in j.binds:
                    if bind.node == name:
                        new.allocate(j.req, bind, masks)
        self.state = new
        self._dead_rows = 0

    def _end_node(self, node: SimNode, at: float) -> None:
        if node.state == "gone":
            return
        if node.state == "ready":
            self._retire(node)
        if not node.spot:
            self._od_nodes[(node.itype.name, node.zone)] -= 1
            self._od_version += 1
        bill = None
        if node.spot and self.market is not None and self.market.mode == "price":
            bill = round(
                self.market.cost_usd(node.itype.name, node.zone, node.launched_s, at) * MICRO
            )
        self.cloud.end(node, at, bill)

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
            self._replace_node(node.itype, spot=True, delay=self.sc.provisioning_delay_s,
                               mig=node.mig)
        elif self.sc.autoscaling:
            self._ensure_scan(self.now)

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
            spot = node.spot or name in self._fallback
            self._fallback.discard(name)
            self._replace_node(node.itype, spot=spot, delay=self.sc.provisioning_delay_s,
                               mig=node.mig)
        # an autoscaled fleet replaces the capacity through scale-up: requeueing the node's jobs
        # (above) scans at once

    def _all_done(self) -> bool:
        return self.done == len(self.jobs)

    # -- interruptions and recovery -----------------------------------------------------------
    def _interrupt(self, j: JobRun, notice: float, why: str, graceful: bool = False) -> bool:
        """Interrupt a running job once per leave: a job already leaving (checkpointing at an
        earlier notice, e.g. from another node of its gang) is not interrupted again — its
        progress was settled then. Returns whether the job was interrupted now."""
        if j.state != RUNNING or j.leaving:
            return False
        now = self.now
        done, saved = j.progress(now)
        view = NoticeView(
            job_id=j.spec.job_id, checkpointable=j.spec.checkpointable and self.sc.checkpointing,
            work_done_s=done, last_checkpoint_s=saved, checkpoint_cost_s=j.ckpt_cost,
            notice_s=notice, interruptions=j.interruptions + 1, on_spot=j.on_spot,
        )
        plan = self.recovery.on_notice(view)  # a Requeue, applied here with the job's books
        lost = max(0.0, done - plan.resume_work_s)
        j.lost_work_s += lost
        self.tally.lost_gpu_s += lost * j.gpus
        if not graceful:
            self.tally.interruptions += 1
            if j.notice_s is None:
                j.notice_s = now
        j.interruptions += 1
        j.work_s = plan.resume_work_s
        j.requeued = plan.ahead_of_new_work
        if plan.on_demand_only:
            self._set_on_demand_only(j, True)
        j.version += 1  # the pending FINISH is stale now
        if plan.checkpoint_now:
            # progress is settled now (work_s); the GPUs stay held until the checkpoint is written
            j.leaving = True
            j.saved_s = min(saved, plan.resume_work_s)
            self._at(now + j.ckpt_cost, CKPT_DONE, (j.idx, j.version))
        else:
            self._stop(j, now)
            self._enqueue(j)
        return True

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
            lost = j.work_s - kept
            j.lost_work_s += lost
            self.tally.lost_gpu_s += lost * j.gpus
            j.work_s = kept
        self._stop(j, self.now)
        self._enqueue(j)

    # -- autoscaler scan ----------------------------------------------------------------------
    def _ensure_scan(self, t: float) -> None:
        iv = self.sc.scan_interval_s
        at = math.ceil(t / iv) * iv
        if at < self.now:
            at = self.now
        if at not in self._scans:
            self._scans.add(at)
            self._at(at, SCAN, at)

    def _on_scan(self, at: float) -> None:
        self._scans.discard(at)
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
        if self.pending and (
            self._demand_changed
            or self.now - self._last_scale_up >= self.sc.max_pending_wait_s
        ):
            # nothing new since the last look and no pod crossed the wait trigger: same answer
            self._demand_changed = False
            self._last_scale_up = self.now
            launched = self._scale_up()
        self._disrupt()
        inflight = bool(self._booting)
        more_work = self.running or inflight or self.arrived < len(self.jobs) or launched
        if self.pending and more_work:
            self._ensure_scan(self.now + self.sc.scan_interval_s)
        elif self.pending and not launched:  # below the GPU threshold: look again when the
            oldest = min(self.jobs[i].enqueued_s for _, i in self.pending)  # wait trigger fires
            if oldest + self.sc.max_pending_wait_s > self.now:  # (a lone 1-GPU or CPU-only job
                self._ensure_scan(max(oldest, self._last_scale_up)  # was stranded)
                                  + self.sc.max_pending_wait_s)

    def _rebalance(self) -> None:
        """Fixed spot fleet: swap an empty on-demand fallback node for spot when a zone has
        capacity again (EC2 Auto Scaling's capacity rebalancing, in spirit)."""
        if self.market is None or self.spot_strategy is None:
            return
        for name in sorted(self._fallback):
            node = self.cloud.nodes[name]
            if node.state != "ready" or node.jobs:
                continue
            it = node.itype
            plan = self.spot_strategy.plan(it.name, self.market.markets(it.name, self.now), 1)
            if not plan:
                return
            launched = False
            for launch in plan:
                if self._launch_one(it, launch.zone, True, launch.max_price,
                                    self.sc.provisioning_delay_s, node.mig):
                    launched = True
                    break
            if not launched:
                return
            self._fallback.discard(name)
            self._end_node(node, self.now)

    def _offers(self) -> list[Offer]:
        """Offers change only when a spot market ticks or the on-demand fleet changes (the
        on-demand zone depends on it); cached until then."""
        tick = int(self.now // self.market.tick_s) if self.market is not None else 0
        key = (tick, self._od_version)
        if self._offer_cache is not None and self._offer_cache[0] == key:
            return self._offer_cache[1]
        out = self._fresh_offers()
        self._offer_cache = (key, out)
        return out

    def _od_zone(self, it: InstanceType) -> str:
        """Zone for the next on-demand node of ``it`` (the pure rule in provisioning.zones)."""
        price = float(it.usd_per_hour)
        counts = {z: self._od_nodes[(it.name, z)] for z in it.zones}
        return on_demand_zone(it.zones, dict.fromkeys(it.zones, price), counts)

    def _fresh_offers(self) -> list[Offer]:
        out = []
        now = self.now
        for it in self.types.values():
            mig_capable = self._mig_jobs and self.gpu_catalog[it.gpu_model].mig is not None
            for mig in (False, True) if mig_capable else (False,):
                shape = self._shape(it, mig)
                out.append(Offer(it.name, CapacityType.ON_DEMAND, shape, float(it.usd_per_hour),
                                 self._od_zone(it)))
                if self.market is not None:
                    p = self.market.best_price(it.name, now)
                    if p is not None:
                        out.append(Offer(it.name, CapacityType.SPOT, shape, p))
        return out

    def _shape(self, it: InstanceType, mig: bool = False) -> NodeShape:
        shape = self._shape_cache.get((it.name, mig))
        if shape is None:
            shape = NodeShape.of(it, mig)
            self._shape_cache[(it.name, mig)] = shape
        return shape

    def _scale_up(self) -> int:
        now = self.now
        if len(self.cloud.live) >= self.sc.max_nodes:
            return 0
        pods = []
        for _, i in self.pending[: self.scale_up.max_pods]:
            j = self.jobs[i]
            req = request_now(j.req, j.on_demand_only)
            spot_ok = tolerates_spot(req)
            hurry = urgent(j.spec, j.work_s, bool(j.interruptions), now, self.guard_cfg)
            for _r in range(j.spec.replicas):
                pods.append(PendingPod(j.spec.job_id, req, spot_ok, now - j.enqueued_s, hurry,
                                       j.spec.replicas))
        inflight = [InFlight(self._shape(n.itype, n.mig), n.spot, n.zone)
                    for n in self._booting.values()]
        markets = {}
        if self.market is not None:
            markets = {name: self.market.markets(name, now) for name in self.types
                       if self.market.zones(name)}
        launches = self.scale_up.decide(pods, self._offers(), inflight, markets,
                                        self.spot_strategy)
        return self._apply(launches)

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
        due_empty = any(now - n.empty_since >= unneeded for n in self._empty.values()
                        if n.empty_since is not None)
        recheck = self.sc.consolidation_recheck_s
        due_n = sum(
            1 for n in self._under.values()
            if n.underused_since is not None and now - n.underused_since >= unneeded
        ) if self.sc.consolidation else 0
        under_due = due_n > 0
        # same pods and no new candidate since the last look: same answer (more candidates can
        # make multi-node consolidation possible without any pod having moved)
        fresh = self._changed or due_n > self._last_due_n
        due_under = under_due and fresh and now - self._last_consolidation >= recheck
        if not (due_empty or due_under):
            if under_due:
                self._ensure_scan(max(now, self._last_consolidation) + recheck)
            return
        if due_under:
            self._last_consolidation = now
            self._changed = False
            self._last_due_n = due_n
            # candidates plus every node with room to take their pods; full nodes cannot help
            views = [
                self._view(n, room_only=n.underused_since is None
                           or now - n.underused_since < unneeded)
                for n in self.cloud.live.values()
                if n.state == "ready" and n.alloc_milli < GPU_MILLI * n.gpus
            ]
        else:
            views = [self._view(n) for n in self._empty.values()]
        offers = [o for o in self._offers() if o.capacity_type == CapacityType.ON_DEMAND] \
            if due_under and len(self.cloud.live) < self.sc.max_nodes else []
        cmd = self.disruption.decide(views, now, offers)
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
        """The disruption policy's view of a node; ``room_only``: a node that can only receive
        pods (not a candidate yet), so its own pods are not listed — a driver shortcut that
        keeps consolidation checks cheap on large fleets."""
        row = self.state.index[n.name]
        st = self.state
        mig_kw: dict = {}
        if n.mig:
            mig_kw = dict(mig_used=tuple(st.mig_used[row, : n.gpus].tolist()),
                          mig_compute_used=tuple(st.mig_compute_used[row, : n.gpus].tolist()))
        if room_only:
            return NodeView(
                n.name, self._shape(n.itype, n.mig), n.spot,
                tuple(st.free_milli[row, : n.gpus].tolist()),
                int(st.cpu_free[row]), int(st.mem_free[row]), (), None, None, **mig_kw,
                usd_per_hour=n.usd_per_hour,
            )
        pods = tuple(
            PodView(self.jobs[i].spec.job_id, self.jobs[i].req,
                    self.jobs[i].spec.checkpointable and self.jobs[i].spec.replicas == 1
                    and self.sc.checkpointing and self._move_fits(self.jobs[i]),
                    tolerates_spot(request_now(self.jobs[i].req, self.jobs[i].on_demand_only)))
            for i in n.jobs
        )
        return NodeView(
            n.name, self._shape(n.itype, n.mig), n.spot,
            tuple(int(x) for x in st.free_milli[row, : n.gpus]),
            int(st.cpu_free[row]), int(st.mem_free[row]), pods, n.empty_since,
            n.underused_since, **mig_kw, usd_per_hour=n.usd_per_hour,
        )

    def _move_fits(self, j: JobRun) -> bool:
        return movable(j.spec, j.progress(self.now)[0], j.ckpt_cost, self.now, self.guard_cfg)

    # -- deadline-aware spot fallback ---------------------------------------------------------
    def _on_deadline(self, _: object) -> None:
        dl = self.deadlines
        if self._all_done() or dl is None:
            return
        now = self.now
        m = self.market
        ref = spot_reference_type({n: t.gpus for n, t in self.types.items()
                                   if m is not None and m.zones(n)})
        avail = bool(m.signal(ref, now, 1)[-1]) if (m is not None and ref) else True
        spot_p = (m.best_price(ref, now) if m is not None and ref else None) or 0.0
        od_p = float(self.types[ref].usd_per_hour) if ref else 1.0
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
                case _:
                    raise TypeError(f"decision not applied here: {d!r}")
        return launched

    # -- sampling -----------------------------------------------------------------------------
    def _on_sample(self, _: object) -> None:
        s = self.series
        now = self.now
        s.t.append(now)
        od = spot = alloc = 0
        for n in self.cloud.live.values():
            alloc += n.alloc_milli
            if n.spot:
                spot += n.gpus
            else:
                od += n.gpus
        s.alloc_gpus.append(alloc / GPU_MILLI)
        s.od_gpus.append(od)
        s.spot_gpus.append(spot)
        s.cost_usd.append(self.cloud.accrued_usd(now))
        s.pending.append(len(self.pending))
        s.interruptions.append(self.tally.interruptions)
        self._periodic_at(now + self.sc.sample_interval_s, SAMPLE)

    def take_recoveries(self) -> tuple[float, ...]:
        out = tuple(self._recent_recoveries)
        self._recent_recoveries.clear()
        return out
