"""The controller's side of team queues: watch ``GpuQueue`` objects and Namespaces, hand the
cycle its quota input, and keep each queue's status, events and metrics.

Every cycle starts from the informers: the queues (parsed once per generation, ``spec``), the
Namespaces' ``gpufleet.io/queue`` labels, and the snapshot's pods give each queue's usage, which
with the nominal quotas is the :class:`~gpufleet.control.cycle.QuotaInput` the cycle plans with —
the same input the simulator builds from its jobs. Queues from the controller's ``--config``
``teams:`` section count too (a ``GpuQueue`` of the same name replaces one). A queue whose spec
turns invalid keeps its last valid spec (the object says ``Valid=False`` and why, and an Event
says it once); one never valid manages nothing, so its namespaces' pods schedule as before.

Held across cycles besides the ledger's cache: the fair-share usage history
(``queueing.teams.fairshare``), which orders borrowing teams among themselves. Each queue's
decayed usage is written with its spend ledger (``status.ledger.decayedGpuMilliSeconds``, as of
``asOf``), and a new controller goes on from it — decayed over the outage, plus the usage it
finds running held all the while (``carried``), the ledger's own estimate. Queues only in
``--config`` have no status: their history starts afresh.

Without the CRD installed (or without the RBAC to read GpuQueues and Namespaces) the informers
list nothing and retry, so such a cluster schedules exactly as before.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from types import SimpleNamespace
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpufleet.catalog.gpus import GpuCatalog
from gpufleet.config import Scenario
from gpufleet.control.cycle import QuotaInput
from gpufleet.k8s.queues import status as st
from gpufleet.k8s.queues.ledger import Spend, SpendLedger
from gpufleet.k8s.queues.spec import (
    API_VERSION,
    GROUP,
    KIND,
    PLURAL,
    QUEUE_LABEL,
    VERSION,
    Parsed,
    QueueParses,
    namespace_queues,
)
from gpufleet.k8s.queues.usage import (
    model_usage_by_queue,
    node_prices,
    pending_by_queue,
    queue_rates,
    usage_by_queue,
)
from gpufleet.k8s.translate.snapshot import Snapshot
from gpufleet.k8s.watch.connections import release
from gpufleet.k8s.watch.informer import Informer
from gpufleet.queueing.teams.budget import BudgetState, budget_verdicts, restrictions
from gpufleet.queueing.teams.fairshare import DEFAULT_HALF_LIFE_S, UsageHistory, carried
from gpufleet.queueing.teams.quota import QuotaBook
from gpufleet.queueing.teams.settings import QueueSettings

log = logging.getLogger(__name__)

EventFn = Callable[[Mapping[str, Any], str, str, str], None]
_EMPTY = json.dumps({"items": [], "metadata": {"resourceVersion": ""}}).encode()


def optional_list(name: str, call: Callable[..., Any]) -> Callable[..., Any]:
    """A list call that reads an absent resource (the CRD not installed: 404) or one this
    controller may not read (RBAC from before queues: 403) as empty, with a warning: team
    queues are then off and scheduling goes on as without them. The watch that follows fails
    and the informer lists again after its back-off, so installing the CRD or the RBAC later
    turns them on."""
    def run(**kw: Any) -> Any:
        try:
            return call(**kw)
        except ApiException as exc:
            if exc.status not in (403, 404) or kw.get("watch"):
                raise
            log.warning("%s: %s %s; team queues are off until it can be listed", name,
                        exc.status, exc.reason)
            return SimpleNamespace(data=_EMPTY)
    return run


@dataclass(slots=True)
class LiveQuota:
    """One cycle's queues: the quota input (None: no queue manages anything), namespace →
    queue for the managed queues, their effective settings, the objects' parses and each
    queue's spend this period."""

    input: QuotaInput | None
    teams: dict[str, str]
    settings: dict[str, QueueSettings]
    parsed: list[Parsed] = field(default_factory=list)
    spends: dict[str, Spend] = field(default_factory=dict)  # this period's, per queue
    # every queue's nominal quota and usage, acting or not (what status and metrics show)
    nominal: QuotaBook | None = None

    @property
    def draining(self) -> bool:
        """Whether a queue's spent ``hold-and-drain`` budget evicts its running pods: the cycle
        must run even with nothing pending (``control.cycle`` step 6)."""
        return self.input is not None and any(v.draining for v in self.input.budgets.values())


class QueueTracker:
    def __init__(self, api: client.ApiClient, changed: threading.Event, scenario: Scenario,
                 catalog: GpuCatalog, event: EventFn,
                 on_relist: Callable[[str], None] | None = None,
                 spend_interval_s: float = 10.0, ledger_interval_s: float = 60.0) -> None:
        self.custom = client.CustomObjectsApi(api)
        core = client.CoreV1Api(api)
        self.queues = Informer("gpuqueues", optional_list("gpuqueues", partial(
            self.custom.list_cluster_custom_object, GROUP, VERSION, PLURAL)), changed,
            on_relist=on_relist)
        self.namespaces = Informer("namespaces", optional_list("namespaces",
                                                               core.list_namespace),
                                   changed, on_relist=on_relist)
        self.catalog = catalog
        self.event = event
        teams = scenario.teams
        self.config_queues = {q.name: q for q in (teams.queues if teams else ())}
        self.half_life_s = teams.half_life_s if teams else DEFAULT_HALF_LIFE_S
        # False (``teams.enforce_quotas`` in --config): a dry run, as in the simulator — usage
        # against each quota is measured and shown in status, nothing is refused or reclaimed
        self.enforce_quotas = teams.enforce_quotas if teams else True
        self.history: UsageHistory | None = None
        self.ledger = SpendLedger()
        self.parses = QueueParses()
        self.spend_interval_s = spend_interval_s
        self.ledger_interval_s = ledger_interval_s
        self.views: dict[str, st.QueueView] = {}  # the last cycle's, for metrics
        self._good: dict[str, QueueSettings] = {}
        self._written: dict[str, float] = {}
        self._lock = threading.Lock()

    def informers(self) -> list[Informer]:
        return [self.queues, self.namespaces]

    def queue_of(self, namespace: str) -> str:
        """The queue ``namespace``'s ``gpufleet.io/queue`` label names, "" for none."""
        ns = self.namespaces.get(namespace) or {}
        return str(((ns.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL) or "")

    def ready(self) -> bool:
        return self.queues.synced.is_set() and self.namespaces.synced.is_set()

    # -- the cycle's input ---------------------------------------------------------------------
    def observe(self, snap: Snapshot, nodes: list[dict[str, Any]],
                price: Callable[[str, str, str], float], now_s: float) -> LiveQuota:
        """The queues as they stand before this cycle plans: specs, usage (per GPU model too,
        for per-model quotas), each queue's spend, and the quota input — with the budget
        verdicts that restrict new work (``budget_verdicts`` on this period's spend and rate,
        ``restrictions``: ``hold``, ``hold-and-drain`` and ``spot-only``), the calls the simulator
        makes."""
        parsed = self.parses.parse_all(self.queues.objects())
        settings = dict(self.config_queues)
        for p in parsed:
            if p.settings is not None:
                self._good[p.name] = p.settings
            got = p.settings or self._good.get(p.name)
            if got is not None:
                settings[p.name] = got
        listed = {p.name for p in parsed}
        self._good = {n: s for n, s in self._good.items() if n in listed}
        teams = {ns: q for ns, q in namespace_queues(self.namespaces.objects()).items()
                 if q in settings}
        if not settings:
            return LiveQuota(None, teams, settings, parsed)
        usage = usage_by_queue(snap, teams, self.catalog)
        if self.history is None:  # first cycle (a restart too): go on from the saved history
            self.history = UsageHistory(self.half_life_s, last_s=now_s)
            for o in self.queues.objects():
                name = str(o["metadata"]["name"])
                fair = st.saved_fair_share(o)
                if fair is not None and name in settings:
                    self.history.decayed[name] = {"gpu": carried(
                        fair[0], fair[1], now_s, float(usage.get(name, 0)), self.half_life_s)}
        self.history.advance(max(now_s, self.history.last_s),
                             {t: {"gpu": float(m)} for t, m in usage.items()})
        periods = {n: (s.budget.period if s.budget is not None else "month")
                   for n, s in settings.items()}
        rates = queue_rates(snap, teams, node_prices(nodes, price), self.catalog)
        saved = {str(o["metadata"]["name"]): st.saved_ledger(o) for o in self.queues.objects()}
        spends = self.ledger.observe(now_s, periods, rates, saved)
        book = QuotaBook([q for q in (s.quota() for s in settings.values()) if q is not None],
                         usage, model_usage_by_queue(snap, teams, self.catalog))
        held = restrictions(budget_verdicts(
            {n: s.budget.build() for n, s in settings.items() if s.budget is not None},
            {n: sp.spent_micro for n, sp in spends.items()},
            {n: sp.rate_micro_per_s for n, sp in spends.items()}, now_s))
        acting = book if self.enforce_quotas else QuotaBook([])
        return LiveQuota(QuotaInput(acting, self.history, held), teams, settings, parsed, spends,
                         nominal=book)

    # -- status, events, metrics ---------------------------------------------------------------
    def sync(self, live: LiveQuota, snap: Snapshot, now_s: float, leader: bool) -> None:
        """Views for the metrics, and (``leader``) the status writes; API errors are logged
        and retried next cycle."""
        if not live.settings and not live.parsed:  # no queues: nothing to price or write
            with self._lock:
                self.views = {}
            return
        objs = {str(o["metadata"]["name"]): o for o in self.queues.objects()}
        book = live.nominal if live.nominal is not None else QuotaBook([])
        spends = live.spends
        pending = pending_by_queue(snap, live.teams)
        views: dict[str, st.QueueView] = {}
        for name, s in self.config_queues.items():
            if name not in objs:
                views[name] = st.view_of(Parsed(name, "", 0, s), s, book, pending.get(name, 0),
                                         spends.get(name), now_s)
        for p in live.parsed:
            views[p.name] = st.view_of(p, live.settings.get(p.name), book,
                                       pending.get(p.name, 0), spends.get(p.name), now_s)
        with self._lock:
            self.views = views
        if not leader:
            return
        for p in live.parsed:
            obj = objs.get(p.name)
            if obj is not None:
                self._write(obj, views[p.name], now_s)

    def _write(self, obj: Mapping[str, Any], v: st.QueueView, now_s: float) -> None:
        current = obj.get("status") or {}
        want = st.render(obj, v, now_s)
        name = v.name
        if not st.needs_write(current, want, v.spend, now_s, self._written.get(name, 0.0),
                              self.spend_interval_s, self.ledger_interval_s):
            return
        body_status: dict[str, Any] = {k: None for k in current if k not in want}
        body_status.update(want)
        if v.spend is not None and v.settings is not None:
            fair = None if self.history is None else self.history.decayed.get(name, {}).get(
                "gpu", 0.0)
            body_status["ledger"] = st.ledger(v.spend, now_s, fair)
        body = {"metadata": {"resourceVersion": obj["metadata"].get("resourceVersion")},
                "status": body_status}
        try:
            release(self.custom.patch_cluster_custom_object_status(
                GROUP, VERSION, PLURAL, name, body,
                _content_type="application/merge-patch+json", _preload_content=False))
        except ApiException as exc:
            if exc.status == 409:
                log.info("queue %s: status changed since read (409); next cycle re-reads", name)
            elif exc.status != 404:
                log.warning("queue %s: status write failed: %s %s", name, exc.status,
                            exc.reason)
            return
        self._written[name] = now_s
        self._events(obj, current, v)

    def _events(self, obj: Mapping[str, Any], current: Mapping[str, Any],
                v: st.QueueView) -> None:
        """Once per change, after the status that says it was written: an invalid spec (or a
        new problem with it), and the budget turning low or exhausted (the ``notify`` action;
        every action notifies)."""
        ref = {"apiVersion": API_VERSION, "kind": KIND, "metadata": obj["metadata"]}
        old: Mapping[str, Any] = next(
            (c for c in current.get("conditions") or () if c.get("type") == st.VALID),
            {})
        err = v.parsed.error
        if err is not None and (old.get("status") != "False" or old.get("message") != err):
            self.event(ref, "InvalidSpec", err, "Warning")
        if v.budget_state is not None and v.budget_state is not BudgetState.OK and \
                current.get("budgetState") != v.budget_state.value:
            reason = "BudgetExhausted" if v.budget_state is BudgetState.EXHAUSTED else "BudgetLow"
            assert v.spend is not None and v.budget_micro is not None
            self.event(ref, reason,
                       f"spent ${st.dollars(v.spend.spent_micro)} of "
                       f"${st.dollars(v.budget_micro)} this period", "Warning")

    def snapshot_views(self) -> list[st.QueueView]:
        with self._lock:
            return list(self.views.values())

