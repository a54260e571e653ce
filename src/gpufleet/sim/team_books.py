"""The teams' books in the simulated cluster: what each team holds, has used, asked for and
spent, and the verdicts of its budget (scenario ``teams:``; docs/teams.md).

:class:`TeamBooks` is a component of the job lifecycle (``sim.jobs.JobLifecycle`` holds one and
tells it when a job is queued, starts, stops, or a node's split among the teams changes). It
keeps, per team (a job's tenant):

* the GPU-equivalents of its running jobs (``team_milli``, per GPU model in
  ``team_model_milli`` for the teams with per-model quotas), their integral
  (``team_gpu_s``) and the decayed usage history that orders borrowing teams (``history``);
* its demand (queued + running GPU-equivalents), and for a team with a quota the integrals of
  min(used, nominal) and min(demand, nominal): the entitled share it got and the one it asked
  for (the summary's ``entitled_delivered``);
* its spend from the nodes' prices (``queueing.teams.spend``: each node's price pro rata of the
  GPU-equivalents each team holds there), the budget verdicts now, and the spend rate at which
  each period's action first applied (the summary's overspend in hours of spend rate).

It schedules a scheduling pass (``at``) for the moment a ``hold-and-drain`` budget is next spent
at the current rates: the spend crosses the amount between events, and the drain must not wait.
Without ``teams:`` every book stays empty and each call returns at once.
"""

from __future__ import annotations

from collections.abc import Callable

from gpufleet.catalog.gpus import GpuCatalog
from gpufleet.config import Scenario
from gpufleet.control.teams import Gate, scale_up_gates
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
from gpufleet.sim.cloud import SimCloud, SimNode
from gpufleet.sim.engine import Engine
from gpufleet.sim.events import PASS
from gpufleet.sim.job_table import JobTable
from gpufleet.sim.jobrun import JobRun
from gpufleet.sim.nodes import SimFleet


class TeamBooks:
    """The teams' usage, demand and spend of one simulation (see the module docstring)."""

    def __init__(self, *, scenario: Scenario, engine: Engine, jobs: JobTable,
                 nodes: SimFleet, gpu_catalog: GpuCatalog, at: Callable[..., None]) -> None:
        self.sc = scenario
        self.engine = engine
        self.jobs = jobs
        self.nodes = nodes
        self.gpu_catalog = gpu_catalog
        self._at = at
        teams = scenario.teams
        self.quotas = None if teams is None else teams.quotas()
        self.history = None if teams is None else UsageHistory(teams.half_life_s)
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
        # verdicts and the spend rate when each (team, period end)'s action first applied
        self.budgets = {} if teams is None else teams.budgets()
        self.ledger = None if teams is None else SpendLedger(
            {t: b.period for t, b in self.budgets.items()})
        self.verdicts: dict[str, BudgetVerdict] = {}
        self.budget_triggers: dict[tuple[str, float], float] = {}
        # when a ``hold-and-drain`` budget is next spent at the current rates (a pass is due
        # then: the spend crosses the amount between events, and the drain must not wait)
        self._drain_budgets = {t: b for t, b in self.budgets.items()
                               if b.action == "hold-and-drain"}
        self._drain_at: float | None = None

    @property
    def now(self) -> float:
        return self.engine.now

    @property
    def cloud(self) -> SimCloud:
        return self.nodes.cloud

    def queued(self, j: JobRun) -> None:
        """``j`` joins the queue: its GPU-equivalents are its team's demand from now."""
        if self.history is None:
            return
        self.team_usage()
        t = j.spec.tenant
        self.team_demand[t] = self.team_demand.get(t, 0) + self.job_milli(j)

    def forget(self, idx: int) -> None:
        """Job ``idx`` has ended (a streamed run keeps nothing about it)."""
        self._milli.pop(idx, None)
        self._job_model.pop(idx, None)

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
