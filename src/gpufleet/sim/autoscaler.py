"""The cluster autoscaler's scan in the simulated cluster: scale-up, disruption (emptiness and
consolidation) and the on-demand → spot swap, each on the control layer's rules.

:class:`SimAutoscaler` is a component of the driver (``sim.cluster.ClusterSim`` holds one and
calls :meth:`SimAutoscaler.scan` when a scan of an autoscaled fleet fires), with its
dependencies named in its constructor: the scenario, the engine (the clock), the job records and
their lifecycle (``sim.jobs``: the pending queue, the teams' scale-up gates, the gang-room book),
the control layer's policies (``Controls``), the books, the simulated nodes, the offers and the
spot market, the reclaim hazard, the deadline guards — and two calls back into the driver:
``apply`` (apply decisions: the driver's one place) and ``scan_at`` (a scan at the time the
scan clock names).

What it asks, in order (``scan``): the deadline guards' arrival checks; the scan clock whether
scale-up is due (``control.scan``), then scale-up's plan for the pending pods the teams' gates
let through (``control.teams``), with the headroom buffer's placeholders
(``control.headroom``) under the node cap (``control.limits``); the disruption policy on the
empty or underused nodes' views (``control.views``, ``control.limits.consolidation_set``); the
spot swap (``control.spot_swap``) when the disruption found nothing. Each answers with
``Decision``s, applied through ``apply``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from functools import cache, partial

from gpufleet.config import Scenario
from gpufleet.control.deadline import DeadlineGuards
from gpufleet.control.headroom import (
    PLACEHOLDER,
    free_gpus,
    launch_wanted,
    placeholders,
    spare_gpus,
)
from gpufleet.control.limits import consolidation_set, launch_room, launches_under_cap, may_launch
from gpufleet.control.offers import OfferBook
from gpufleet.control.policies import Controls
from gpufleet.control.scan import Disrupt
from gpufleet.control.spot_swap import (
    SwapLook,
    SwapNode,
    SwapSettings,
    first_swap,
    judge_swap,
    spot_plan,
    swap_look,
    swap_order,
    swap_owed,
)
from gpufleet.control.teams import Gate
from gpufleet.control.value_of_time import value_of_time
from gpufleet.control.views import may_swap, node_view, pending_pods, pod_view
from gpufleet.decisions import Decision, Launch, Preempt
from gpufleet.market.bidding import ZoneMarket, bids_anywhere
from gpufleet.market.spot_cost import ReclaimHazard
from gpufleet.market.spot_model import SpotMarket
from gpufleet.provisioning import (
    InFlight,
    NodeView,
    Offer,
    PendingPod,
    PodView,
    PriceScores,
    ScaleUpReply,
    Unprovisioned,
)
from gpufleet.sim.books import Tally
from gpufleet.sim.cloud import SimCloud, SimNode
from gpufleet.sim.engine import Engine
from gpufleet.sim.job_table import JobTable
from gpufleet.sim.jobrun import JobRun
from gpufleet.sim.jobs import JobLifecycle
from gpufleet.sim.nodes import SimFleet
from gpufleet.state import FleetState


class SimAutoscaler:
    """The scan of one simulation's autoscaled fleet (see the module docstring)."""

    def __init__(
        self,
        *,
        scenario: Scenario,
        engine: Engine,
        jobs: JobTable,
        life: JobLifecycle,
        controls: Controls,
        tally: Tally,
        nodes: SimFleet,
        offers: OfferBook,
        market: SpotMarket | None,
        hazard: ReclaimHazard,
        deadlines: DeadlineGuards | None,
        apply: Callable[[list[Decision]], int],
        scan_at: Callable[[float | None], None],
    ) -> None:
        self.sc = scenario
        self.engine = engine
        self.jobs = jobs
        self.life = life
        self.ctl = controls
        self.tally = tally
        self.nodes = nodes
        self.offers = offers
        self.market = market
        self.hazard = hazard
        self.deadlines = deadlines
        self._apply = apply
        self._scan_at = scan_at
        self.unprovisioned: tuple[Unprovisioned, ...] = ()  # the last scale-up's leftovers
        self.cap_held = False  # the last scale-up's: the node cap held pods' launches back
        # (market step, whether the strategy bids anywhere then)
        self._bids: tuple[tuple[int, ...], bool] | None = None
        # room-only node views, per node name, with what they were read from (``_view``)
        self._room_views: dict[str, tuple[FleetState, tuple[int, int, float], NodeView]] = {}

    @property
    def now(self) -> float:
        return self.engine.now

    @property
    def state(self) -> FleetState:
        return self.nodes.state

    @property
    def cloud(self) -> SimCloud:
        return self.nodes.cloud

    def scan(self, arriving: bool) -> None:
        """One scan of an autoscaled fleet (the driver has told the scan clock it fired):
        the deadline guards' arrival checks, scale-up and disruption when due, the spot swap's
        look, and the next scan's time. ``arriving``: jobs are still to arrive."""
        launched = 0
        dl = self.deadlines
        if dl is not None and dl.arrivals_to_check():
            views = {i: self.life.deadline_view(self.jobs[i]) for i in dl.arrivals_to_check()}
            self._apply(dl.check_arrivals(views, self.now))
        room = self._room()
        short = room is not None and launch_wanted(*room, sum(
            n.gpus for n in self.nodes.booting.values() if not n.mig))
        if self.ctl.scan.scale_up_due(self.now, bool(self.life.pending) or short):
            launched = self._scale_up(room)
        # pods the node cap holds back: the buffer's idle nodes may go (``launches_under_cap``)
        found = self._disrupt(None if self.cap_held else room)
        if self.ctl.spot_swap is not None:
            look = swap_look(found, len(self.cloud.live), self.sc.max_nodes)
            if look is SwapLook.LOOK:
                self._spot_swap(self.ctl.spot_swap)
            elif look is SwapLook.NEXT_CYCLE and self._swap_owed(self.ctl.spot_swap):
                self._scan_at(self.ctl.scan.swap_deferred(self.now))
        more_work = bool(self.life.running or self.nodes.booting or arriving or launched)
        self._scan_at(self.ctl.scan.after_scan(
            self.now, bool(self.life.pending) or short, more_work,
            lambda: (self.jobs[i].enqueued_s for _, i in self.life.pending)))

    def _room(self) -> tuple[int, float] | None:
        """(headroom buffer, wholly free GPUs on ready nodes: what a 1-GPU arrival can start
        on; MIG GPUs offer slices, not whole GPUs) where the scenario keeps headroom
        (``control.headroom``), else None."""
        hr = self.ctl.headroom
        if hr is None:
            return None
        return hr.buffer(self.now), float(free_gpus(self.state))

    def _scale_up(self, room: tuple[int, float] | None = None) -> int:
        """``room``: the headroom buffer and the free GPUs (``_room``): the shortfall joins
        the pending pods as placeholders."""
        now = self.now
        if not may_launch(len(self.cloud.live), self.sc.max_nodes):
            return 0
        pods = []
        jobs = [self.jobs[i] for _, i in self.life.pending[: self.ctl.scale_up.max_pods]]
        # teams: no launch for work its quota or budget holds
        gates = self.life.team_books.gates(jobs)
        # a gang that waits for room, or for its victims to leave
        book = None if self.life.gang_room is None else self.life.gang_room.book
        for k, j in enumerate(jobs):
            gate = Gate.ANY if gates is None else gates[k]
            if gate is Gate.SKIP or (book is not None and book.holds_scale_up(j.spec.job_id, now)):
                continue
            pods += pending_pods(j.spec, j.req, j.on_demand_only, now - j.enqueued_s, j.work_s,
                                 bool(j.interruptions), now, self.ctl.guards,
                                 spot_only=gate is Gate.SPOT,
                                 max_node_gpus=self.life.node_cap(j))
        inflight = [InFlight(self.offers.shape(n.itype, n.mig), n.spot, n.zone)
                    for n in self.nodes.booting.values()]
        offers, markets = self.offers.offers(now), self.offers.markets(now)
        prices, hazard = self.offers.price_scores(now), self._hazard_now()
        replies: list[ScaleUpReply] = []

        def plan(asked: Sequence[PendingPod]) -> tuple[Launch, ...]:
            replies.append(self.ctl.scale_up.plan(
                asked, offers, inflight, markets, self.ctl.spot_strategy, hazard, prices))
            return replies[-1].launches

        launches, self.cap_held = launches_under_cap(
            plan, pods, placeholders(*room) if room is not None else [],
            launch_room(len(self.cloud.live), self.sc.max_nodes))
        # the last scan's, for reports and tests (a placeholder is no job)
        self.unprovisioned = tuple(u for u in replies[0].unprovisioned
                                   if u.job_id != PLACEHOLDER)
        return self._apply(list(launches))


    def _disrupt(self, room: tuple[int, float] | None = None) -> bool:
        """Emptiness or consolidation, when the scan clock says one is due; whether it found a
        command (``control.spot_swap.swap_look`` reads it)."""
        now = self.now
        unneeded = self.sc.scale_down_unneeded_s
        kind, rescan = self.ctl.scan.disruption_due(
            now, (n.empty_since for n in self.nodes.empty.values() if n.empty_since is not None),
            (n.underused_since for n in self.nodes.under.values() if n.underused_since is not None))
        self._scan_at(rescan)
        due_under = kind is Disrupt.UNDERUSED
        if due_under:
            nodes = self.cloud.nodes
            views = [self._view(nodes[name], room_only) for name, room_only in consolidation_set(
                ((n.name, n.state == "ready", n.alloc_milli, n.gpus, n.underused_since)
                 for n in self.cloud.live.values()), now, unneeded)]
        elif kind is Disrupt.EMPTY:
            views = [self._view(n) for n in self.nodes.empty.values()]
        else:
            return False
        offers = self.offers.on_demand_offers(now) \
            if due_under and may_launch(len(self.cloud.live), self.sc.max_nodes) else []
        cmd = self.ctl.disruption.decide(views, now, offers,
                                         math.inf if room is None else spare_gpus(*room))
        if cmd is None:
            return False
        self.tally.consolidations += sum(1 for d in cmd.decisions if isinstance(d, Preempt)
                                         and self.life.is_running(d.job_id))
        self.tally.replacements += self._apply(list(cmd.decisions))
        return True

    def _swap_inputs(self, cfg: SwapSettings) -> tuple[
            Callable[[], list[str]], Callable[[str], bool],
            Callable[[str], tuple[SwapNode, list[tuple[JobRun, float]]]]]:
        """What ``control.spot_swap`` walks: what orders the candidates (a walk over every
        live node, made only when the rule walks), whether a node's pods may all move, and a
        node as the rule reads it (with its jobs and their work done)."""
        now = self.now
        nodes = self.cloud.nodes
        live = self.cloud.live

        def order() -> list[str]:
            return swap_order([(n.name, n.ready_s, n.usd_per_hour) for n in live.values()
                               if n.state == "ready" and not n.spot and n.jobs], now, cfg)

        guards = self.ctl.guards

        def movable(name: str) -> bool:
            return all(may_swap(j.spec, j.req, j.on_demand_only, partial(_work_done, j, now),
                                j.ckpt_cost, now, guards)
                       for j in (self.jobs[i] for i in nodes[name].jobs))

        def node_of(name: str) -> tuple[SwapNode, list[tuple[JobRun, float]]]:
            node = nodes[name]
            here = [(j, j.progress(now)[0]) for j in (self.jobs[i] for i in node.jobs)]
            return SwapNode(
                name, node.usd_per_hour, node.gpus, tuple(j.spec.job_id for j, _ in here),
                sum(j.gpus for j, _ in here), min(done for _, done in here),
                max(j.ckpt_cost + j.spec.restart_overhead_s for j, _ in here)
                + self.sc.provisioning_delay_s,
                sum(j.gpus * value_of_time(j.spec) for j, _ in here)), here

        return order, movable, node_of

    def _spot_swap(self, cfg: SwapSettings) -> None:
        """At most one on-demand node's work moved to spot (``control.spot_swap``): the rule
        orders and walks the candidates; this asks scale-up for each one's launch."""
        now = self.now
        order, movable, node_of = self._swap_inputs(cfg)
        # read once, if asked: offers, markets, price scores, reclaim rates
        market: list[tuple[list[Offer], dict[str, list[ZoneMarket]], PriceScores,
                           Callable[[str, str], float]]] = []

        def judge(name: str) -> list[Decision] | None:
            if not market:
                market.append((self.offers.offers(now), self.offers.markets(now),
                               self.offers.price_scores(now), self._hazard_now()))
            offers, zones, prices, hazard = market[0]
            swap, here = node_of(name)

            def ask() -> tuple[list[Launch], float]:
                pods = [p for j, done in here
                        for p in pending_pods(j.spec, j.req, j.on_demand_only, 0.0, done,
                                              bool(j.interruptions), now, self.ctl.guards)]
                return spot_plan(self.ctl.scale_up, pods, offers, zones,
                                 self.ctl.spot_strategy, hazard, prices)

            return judge_swap(swap, ask, cfg)

        decisions = first_swap(order, movable, judge, cfg, self._bids_anywhere)
        if decisions is not None:
            self.tally.spot_swaps += 1
            self._apply(decisions)

    def _swap_owed(self, cfg: SwapSettings) -> bool:
        """Whether the swap look skipped this scan could have swapped
        (``control.spot_swap.swap_owed``)."""
        order, movable, node_of = self._swap_inputs(cfg)
        return swap_owed(order, movable, lambda name: node_of(name)[0], cfg,
                         self._bids_anywhere)

    def _hazard_now(self) -> Callable[[str, str], float]:
        """The reclaim rate learned so far per (type, zone), as of now: each pair's rate
        worked out once for a scan's many asks (``ReclaimHazard.rate_per_h`` at one time)."""
        now = self.now
        return cache(lambda it, zone: self.hazard.rate_per_h(it, zone, now))

    def _bids_anywhere(self) -> bool:
        """Whether the spot strategy would launch spot anywhere now
        (``market.bidding.bids_anywhere``), worked out once per market step: the markets are
        the same while ``SpotMarketView.tick_key`` is."""
        strategy, m = self.ctl.spot_strategy, self.market
        if strategy is None or m is None:
            return False
        tick = m.tick_key(self.now)
        if self._bids is None or self._bids[0] != tick:
            self._bids = (tick, bids_anywhere(strategy, self.offers.markets(self.now)))
        return self._bids[1]

    def _view(self, n: SimNode, room_only: bool = False) -> NodeView:
        """The disruption policy's view of a node (``room_only``: not a candidate yet, it can
        only receive pods: ``control.views.node_view``). A room-only view reads the node's
        row and price alone, so it is kept per node until its row changes
        (``FleetState.row_version``) or its price does; a consolidation look reads every
        underused node's."""
        state = self.state
        if not room_only:
            return node_view(state, n.name, self.offers.shape(n.itype, n.mig), n.spot,
                             n.usd_per_hour, tuple(self._pod_views(n)), n.empty_since,
                             n.underused_since)
        row = state.index[n.name]
        key = (row, int(state.row_version[row]), n.usd_per_hour)
        kept = self._room_views.get(n.name)
        if kept is not None and kept[0] is state and kept[1] == key:
            return kept[2]
        view = node_view(state, n.name, self.offers.shape(n.itype, n.mig), n.spot,
                         n.usd_per_hour, None)
        if len(self._room_views) > 2 * len(self.cloud.live) + 64:  # nodes gone: drop theirs
            self._room_views = {k: v for k, v in self._room_views.items()
                                if k in self.cloud.live}
        self._room_views[n.name] = (state, key, view)
        return view

    def _pod_views(self, n: SimNode) -> Iterator[PodView]:
        """The node's pods as consolidation judges them: movable or not, spot-tolerant or not
        (``control.views.pod_view``). The spot swap asks the same of each pod without the
        view (``control.views.may_swap``)."""
        now = self.now
        return (
            pod_view(j.spec, j.req, j.on_demand_only, partial(_work_done, j, now), j.ckpt_cost,
                     now, self.ctl.guards)
            for j in (self.jobs[i] for i in n.jobs))


def _work_done(job: JobRun, now: float) -> float:
    """The job's work done at ``now`` (``JobRun.progress``), asked only where a rule reads it."""
    return job.progress(now)[0]
