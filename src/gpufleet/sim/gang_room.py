"""Gang room in the simulated cluster (``control.gang_room``): what the scheduling cycle needs
to price a pending gang's three ways to room, and what the driver does with its choices.

:class:`SimGangRoom` is a component of the job lifecycle (``sim.jobs.JobLifecycle`` holds one
when the scenario prices gang room). For each scheduling pass it builds the cycle's
``GangRoomInput`` — the running pods with the time each one's declared work ends, and the pods
an eviction may take (a checkpointing single pod whose move cannot cost its deadline, with what
its recovery strategy would lose) — and books the cycle's choices: a scale-up is new demand for
the scan (``scan_at``), a preempt choice's evictions are counted, and a wait or a reservation
lapses into a full pass at the time the book names (``at``; :meth:`SimGangRoom.lapsed`).
"""

from __future__ import annotations

from collections.abc import Callable

from gpufleet.config import Scenario
from gpufleet.control.cycle import CyclePlan
from gpufleet.control.gang_room import (
    GangRoomBook,
    GangRoomInput,
    Movable,
    Room,
    eviction_loss_s,
    gpu_hour_usd,
)
from gpufleet.control.policies import Controls
from gpufleet.control.value_of_time import value_of_time
from gpufleet.control.views import may_move
from gpufleet.queueing.preemption import Victim
from gpufleet.recovery import NoticeView
from gpufleet.sim.books import Tally
from gpufleet.sim.engine import Engine
from gpufleet.sim.events import PASS
from gpufleet.sim.job_table import JobTable
from gpufleet.sim.jobrun import INF, JobRun
from gpufleet.sim.nodes import SimFleet
from gpufleet.sim.translate import gang_victims, job_victim
from gpufleet.state import ResourceRequest


class SimGangRoom:
    """The gang-room book of one simulation and the cycle's input from it (module docstring)."""

    def __init__(self, *, scenario: Scenario, engine: Engine, jobs: JobTable,
                 controls: Controls, tally: Tally, nodes: SimFleet, at: Callable[..., None],
                 scan_at: Callable[[float | None], None]) -> None:
        self.sc = scenario
        self.engine = engine
        self.jobs = jobs
        self.ctl = controls
        self.tally = tally
        self.nodes = nodes
        self._at = at
        self._scan_at = scan_at
        # each pending gang's priced choice, when the next lapses (a full pass is due then),
        # and each request's $/GPU-h
        self.book = GangRoomBook()
        self._reprice_at: float | None = None
        self._gpu_rates: dict[ResourceRequest, float | None] = {}

    @property
    def now(self) -> float:
        return self.engine.now

    def lapsed(self) -> bool:
        """Whether a gang's wait or reservation has lapsed since the last pass (then every
        pending job is tried again, and the gang priced again); asked once per pass."""
        if self._reprice_at is not None and self.now >= self._reprice_at:
            self._reprice_at = None
            return True
        return False

    def gpu_rate(self, req: ResourceRequest) -> float | None:
        """$/GPU-h of ``req``'s GPUs: the cheapest fitting on-demand list price."""
        if req not in self._gpu_rates:
            self._gpu_rates[req] = gpu_hour_usd(req, self.nodes.offers.on_demand_offers(0.0))
        return self._gpu_rates[req]

    def cycle_input(self, cand: list[JobRun], running_idx: set[int]) -> GangRoomInput | None:
        """The cycle's gang-room input: the running pods (every replica of the jobs
        ``running_idx`` names, with the time its declared work ends) and the movable ones only
        when some candidate gang is due; None when no gang is due and no rows are reserved
        (the step would do nothing)."""
        book = self.book
        settings = self.ctl.gang_room
        if settings is None:
            return None
        now = self.now
        if not any(j.spec.replicas > 1 and book.due(j.spec.job_id, now) for j in cand):
            # nothing to price: the step only has reservations to keep, if any
            return GangRoomInput(settings, book, self.gpu_rate) if book.reserved(now) else None
        running: list[Victim] = []
        ends: dict[str, float] = {}
        moves: list[Movable] = []
        for i in sorted(running_idx):
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
                                          spec.restart_overhead_s), write, value_of_time(spec))

    def chosen(self, plan: CyclePlan) -> None:
        """Book the cycle's gang-room choices: a scale-up is new demand for the scan, a wait
        or a reservation lapses into a full pass."""
        book = self.book
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
