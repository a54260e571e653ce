"""Team queues on the live side without an API server: the GpuQueue parse (the simulator's
settings model, errors naming the field), the CRD schema kept to that model, the spend ledger's
restore after a restart, when status is written, the pods' sizes and queues, the live cycle's
quota (reclaim and the over-quota reason, the control layer's rules), and the metrics."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
import yaml

from gpufleet.catalog.gpus import default_gpu_catalog
from gpufleet.control.cycle import QuotaInput
from gpufleet.control.teams import Gate
from gpufleet.decisions import Bind, Preempt, Refuse
from gpufleet.k8s.capacity.inputs import pending_pods as cap_pending
from gpufleet.k8s.queues.ledger import Saved, Spend, SpendLedger, restored
from gpufleet.k8s.queues.metrics import queue_families
from gpufleet.k8s.queues.spec import QueueParses, namespace_queues, parse_queue
from gpufleet.k8s.queues.status import QueueView, needs_write, render, view_of
from gpufleet.k8s.queues.tracker import LiveQuota
from gpufleet.k8s.queues.usage import queue_rates, tag_units, usage_by_queue
from gpufleet.k8s.schedule.cycle import launch_gates, pending_units, plan_cycle, victims_of
from gpufleet.k8s.translate.snapshot import build_snapshot
from gpufleet.placement import get_policy
from gpufleet.queueing.teams.budget import Budget, BudgetState, budget_verdicts, restrictions
from gpufleet.queueing.teams.quota import QuotaBook
from gpufleet.queueing.teams.settings import BudgetSettings, QueueSettings

CRD = Path(__file__).resolve().parents[2] / "charts/gpufleet/crds/gpuqueues.gpufleet.io.yaml"
CAT = default_gpu_catalog()
DAY = datetime(2026, 12, 4, tzinfo=UTC).timestamp()  # a UTC day start (a Friday)


def obj(name: str, spec: object, gen: int = 1, uid: str = "u1") -> dict:
    return {"metadata": {"name": name, "uid": uid, "generation": gen}, "spec": spec}


# -- the parse --------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "spec", "error"), [
    ("a", {"gpus": 4}, None),
    ("a" * 64, {"gpus": 4}, "metadata.name: String should have at most 63 characters"),
    ("a", {"gpus": 4, "budget": {"usd": 0}}, "spec.budget.usd: Input should be greater than 0"),
    ("a", {"gpus": 1, "color": "x"}, "spec.color: Extra inputs are not permitted"),
    ("a", {"gpus": 1, "budget": {"usd": 5, "period": "year"}},
     "spec.budget.period: Input should be 'day', 'week' or 'month'"),
    ("a", {"gpus": 1, "name": "b"}, "spec.name: not allowed; the queue's name is metadata.name"),
    ("a", None, "spec: expected an object"),
])
def test_parse_names_the_field(name: str, spec: object, error: str | None) -> None:
    got = parse_queue(obj(name, spec))
    assert got.error == error
    assert (got.settings is None) == (error is not None)


def test_a_valid_spec_is_the_simulators_queue() -> None:
    got = parse_queue(obj("vision", {"gpus": 2.5, "cohort": "research", "borrowing_limit": 1,
                                     "weight": 2, "budget": {"usd": 50, "period": "day",
                                                             "action": "hold"}}))
    assert got.settings == QueueSettings(
        name="vision", gpus=2.5, cohort="research", borrowing_limit=1, weight=2,
        budget=BudgetSettings(usd=50, period="day", action="hold"))
    q = got.settings.quota()
    assert (q.nominal_milli, q.borrowing_limit_milli, q.cohort) == (2500, 1000, "research")


def test_parsed_once_per_generation_and_pruned() -> None:
    parses = QueueParses()
    (a1,) = parses.parse_all([obj("a", {"gpus": 1})])
    (a2,) = parses.parse_all([obj("a", {"gpus": 1})])
    assert a2 is a1  # same generation: not parsed again
    (a3,) = parses.parse_all([obj("a", {"gpus": 2}, gen=2)])
    assert a3 is not a1 and a3.settings is not None and a3.settings.gpus == 2
    (a4,) = parses.parse_all([obj("a", {"gpus": 3}, gen=2, uid="u2")])  # re-created
    assert a4.settings is not None and a4.settings.gpus == 3
    assert parses.parse_all([]) == [] and not parses._got


def test_the_crd_schema_has_the_settings_fields() -> None:
    crd = yaml.safe_load(CRD.read_text())
    (ver,) = crd["spec"]["versions"]
    spec = ver["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert set(spec["properties"]) == set(QueueSettings.model_fields) - {"name"}
    assert set(spec["properties"]["budget"]["properties"]) == set(BudgetSettings.model_fields)
    assert spec["properties"]["budget"]["properties"]["period"]["enum"] == ["day", "week",
                                                                             "month"]
    assert ver["subresources"] == {"status": {}} and crd["spec"]["scope"] == "Cluster"
    cols = {c["name"]: c["jsonPath"] for c in ver["additionalPrinterColumns"]}
    assert cols["Usage"] == ".status.usage" and cols["Borrowed"] == ".status.borrowed"
    assert cols["Spend"] == ".status.spend" and cols["Budget-Left"] == ".status.budgetLeft"


def test_namespaces_join_queues_by_label() -> None:
    nss = [{"metadata": {"name": "a", "labels": {"gpufleet.io/queue": "vision"}}},
           {"metadata": {"name": "b", "labels": {"other": "x"}}}, {"metadata": {"name": "c"}}]
    assert namespace_queues(nss) == {"a": "vision"}


# -- the ledger -------------------------------------------------------------------------------
def test_spend_integrates_the_rate_held_since_the_last_cycle() -> None:
    led = SpendLedger()
    got = led.observe(DAY + 10, {"q": "day"}, {"q": 100.0}, {})["q"]
    assert (got.spent_micro, got.rate_micro_per_s) == (0, 100.0)  # first sight: nothing yet
    got = led.observe(DAY + 20, {"q": "day"}, {"q": 300.0}, {})["q"]
    assert got.spent_micro == 1000  # 100/s for 10 s
    got = led.observe(DAY + 30, {"q": "day"}, {}, {})["q"]
    assert (got.spent_micro, got.rate_micro_per_s) == (4000, 0.0)  # + 300/s for 10 s


@pytest.mark.parametrize(("saved", "now", "spent"), [
    # 500 spent at +20, 100/s then: 40 s later without a controller → 4500
    (Saved(DAY, DAY + 20, 500, 100.0), DAY + 60, 4500),
    (Saved(DAY, DAY + 20, 500, 0.0), DAY + 60, 500),  # nothing ran: nothing added
    (Saved(DAY - 86400, DAY - 10, 500, 100.0), DAY + 60, 0),  # written in an earlier period
    (None, DAY + 60, 0),  # never written
])
def test_restore_after_a_restart(saved: Saved | None, now: float, spent: float) -> None:
    assert restored(saved, DAY, now) == spent


def test_a_restored_queue_goes_on_from_its_status() -> None:
    led = SpendLedger()
    saved = {"q": Saved(DAY, DAY + 20, 500, 100.0)}
    assert led.observe(DAY + 60, {"q": "day"}, {"q": 50.0}, saved)["q"].spent_micro == 4500
    # the saved ledger seeds only the first sight; from then on it is this controller's own
    assert led.observe(DAY + 70, {"q": "day"}, {"q": 50.0}, saved)["q"].spent_micro == 5000


def test_a_new_period_starts_at_zero() -> None:
    led = SpendLedger()
    led.observe(DAY + 86390, {"q": "day"}, {"q": 10.0}, {})
    got = led.observe(DAY + 86400 + 5, {"q": "day"}, {"q": 10.0}, {})["q"]
    # the 10 s before midnight went to the old day; 5 s of this one
    assert (got.period_start_s, got.spent_micro) == (DAY + 86400, 50)
    month = led.observe(DAY + 86400 + 5, {"m": "month"}, {}, {})["m"]
    assert month.period_start_s == datetime(2026, 12, 1, tzinfo=UTC).timestamp()


# -- status -----------------------------------------------------------------------------------
def spend_view(spent: int, rate: float = 0.0, budget: dict | None = None) -> QueueView:
    p = parse_queue(obj("q", {"gpus": 2, **({"budget": budget} if budget else {})}))
    book = QuotaBook([p.settings.quota()], {"q": 3000})
    return view_of(p, p.settings, book, 1, Spend(DAY, DAY + 86400, spent, rate), DAY + 100)


def test_render_usage_borrowed_spend_and_budget() -> None:
    v = spend_view(3_345_678, budget={"usd": 10, "period": "day"})
    got = render({}, v, DAY + 100)
    assert (got["usage"], got["borrowed"], got["spend"], got["budgetLeft"],
            got["budgetState"]) == (3.0, 1.0, "3.35", "6.65", "ok")
    (cond,) = got["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == ("Valid", "True", "Accepted")
    # low: 3.35 spent + 2000 micro-$/s over the 1 h look-ahead (7.20) reaches 10
    low = spend_view(3_345_678, rate=2000.0, budget={"usd": 10, "period": "day"})
    assert low.budget_state is BudgetState.LOW
    assert render({}, low, DAY + 100)["budgetState"] == "low"


def test_an_invalid_queue_shows_only_its_condition_and_keeps_the_transition_time() -> None:
    p = parse_queue(obj("q", {"gpus": 1, "x": 1}))
    v = view_of(p, None, QuotaBook([]), 0, None, DAY)
    got = render({}, v, DAY)
    assert set(got) == {"observedGeneration", "conditions"}
    (cond,) = got["conditions"]
    assert (cond["status"], cond["reason"], cond["message"]) == (
        "False", "InvalidSpec", "spec.x: Extra inputs are not permitted")
    again = render({"status": got}, v, DAY + 60)["conditions"][0]
    assert again["lastTransitionTime"] == cond["lastTransitionTime"]


@pytest.mark.parametrize(("current", "want", "rate", "since", "write"), [
    ({"usage": 1.0}, {"usage": 2.0}, 0.0, 0.0, True),  # usage changed: at once
    # the spend in cents moved: at most every 10 s
    ({"usage": 1.0, "spend": "1.00"}, {"usage": 1.0, "spend": "1.01"}, 0.0, 5.0, False),
    ({"usage": 1.0, "spend": "1.00"}, {"usage": 1.0, "spend": "1.01"}, 0.0, 10.0, True),
    # no change anyone sees while it spends: the ledger every 60 s
    ({"spend": "1.00", "ledger": {"rateMicroPerS": 9.0}}, {"spend": "1.00"}, 9.0, 30.0, False),
    ({"spend": "1.00", "ledger": {"rateMicroPerS": 9.0}}, {"spend": "1.00"}, 9.0, 60.0, True),
    # the rate changed (a pod started or stopped): as a spend change
    ({"spend": "1.00", "ledger": {"rateMicroPerS": 9.0}}, {"spend": "1.00"}, 7.0, 10.0, True),
    ({"spend": "1.00", "ledger": {"rateMicroPerS": 0.0}}, {"spend": "1.00"}, 0.0, 900.0, False),
])
def test_when_status_is_written(current: dict, want: dict, rate: float, since: float,
                                write: bool) -> None:
    spend = Spend(DAY, DAY + 86400, 1_000_000, rate)
    assert needs_write(current, want, spend, 1000.0 + since, 1000.0, 10.0, 60.0) is write


# -- pods in queue terms, and the live cycle's quota -------------------------------------------
def node(name: str, gpus: int, product: str = "Tesla-T4", mig: int = 0) -> dict:
    alloc = {"cpu": "32", "memory": "128Gi", "nvidia.com/gpu": str(gpus - mig)}
    if mig:
        alloc["nvidia.com/mig-3g.20gb"] = str(2 * mig)
    return {"metadata": {"name": name, "labels": {
        "nvidia.com/gpu.product": product, "nvidia.com/gpu.count": str(gpus),
        "node.kubernetes.io/instance-type": "x", "topology.kubernetes.io/zone": "z"}},
        "spec": {}, "status": {"allocatable": alloc}}


def kpod(ns: str, name: str, limits: dict | None = None, ann: dict | None = None,
         node_name: str = "", t: int = 0) -> dict:
    status: dict = {"phase": "Running" if node_name else "Pending"}
    if node_name:
        status["containerStatuses"] = [{"state": {"running": {
            "startedAt": f"2026-12-04T00:00:{t:02d}Z"}}}]
    return {"metadata": {"name": name, "namespace": ns, "uid": f"{ns}-{name}",
                         "annotations": ann or {},
                         "creationTimestamp": f"2026-12-04T00:00:{t:02d}Z"},
            "spec": {"schedulerName": "gpufleet", "nodeName": node_name,
                     "containers": [{"name": "c", "resources": {"limits": limits or {}}}]},
            "status": status}


GPU1 = {"nvidia.com/gpu": "1"}
TEAMS = {"ns-a": "a", "ns-b": "b"}


def test_sizes_by_share_on_the_nodes_model() -> None:
    pods = [kpod("ns-a", "m", {"nvidia.com/mig-3g.20gb": "1"}, node_name="a100",
                 ann={"gpufleet.io/node": "a100", "gpufleet.io/mig": "0:3g.20gb@0"}),
            kpod("ns-a", "h", ann={"gpu-fraction": "0.5"}, node_name="t4"),
            kpod("ns-b", "w", {"nvidia.com/gpu": "2"}, node_name="t4"),
            kpod("ns-c", "o", GPU1, node_name="t4"),
            kpod("ns-a", "p", {"nvidia.com/mig-3g.20gb": "1"})]
    snap = build_snapshot([node("a100", 1, "NVIDIA-A100-SXM4-40GB", mig=1), node("t4", 4)], pods)
    # 3g of 7 compute slices = 429, a half = 500; ns-c has no queue
    assert usage_by_queue(snap, TEAMS, CAT) == {"a": 929, "b": 2000}
    (u,) = tag_units(pending_units(snap), TEAMS, CAT)
    assert (u.team, u.milli) == ("a", 429)  # the largest share over the models offering 3g
    # spend rates: each node's whole price split pro rata of the GPU-equivalents held there;
    # ns-c (no queue) takes its part on t4 but is charged to no queue
    got = queue_rates(snap, TEAMS, {"a100": 7.2, "t4": 3.6}, CAT)
    per_s = 1e6 / 3600
    assert got == pytest.approx({"a": 7.2 * per_s + 3.6 * per_s * 500 / 3500,  # alone on a100
                                 "b": 3.6 * per_s * 2000 / 3500})


def live_quota(snap: object, specs: dict[str, dict]) -> LiveQuota:
    settings = {n: parse_queue(obj(n, s)).settings for n, s in specs.items()}
    book = QuotaBook([s.quota() for s in settings.values()], usage_by_queue(snap, TEAMS, CAT))
    return LiveQuota(QuotaInput(book), TEAMS, settings)


POLICY = get_policy("fgd-strand", tie_seed=0)


def test_the_live_cycle_reclaims_borrowed_gpus_for_the_lender() -> None:
    """a and b have 2 GPUs each in one cohort; a runs 4 (2 borrowed) on the 4-GPU node; b's
    pod is within its quota: a's newest pod is evicted for it (reclaim), a's new pod waits."""
    running = [kpod("ns-a", f"r{i}", GPU1, node_name="t4", t=i) for i in range(4)]
    snap = build_snapshot([node("t4", 4)], [*running, kpod("ns-b", "b0", GPU1, t=10),
                                            kpod("ns-a", "a9", GPU1, t=11)])
    q = live_quota(snap, {"a": {"gpus": 2, "cohort": "c"}, "b": {"gpus": 2, "cohort": "c"}})
    plan = plan_cycle(snap, POLICY, np.random.default_rng(0), quota=q)
    assert not plan.of(Bind)
    (ev,) = plan.of(Preempt)
    assert (ev.job_id, ev.reason) == ("ns-a/r3", "reclaim: team a borrowed")
    refusals = {r.job_id: r.message for r in plan.of(Refuse)}
    assert refusals["ns-a/a9"] == "team a: cohort c has 0 GPU of idle quota, 1 needed"


def test_without_a_cohort_over_quota_waits_and_unmanaged_pods_schedule() -> None:
    snap = build_snapshot([node("t4", 4)], [
        kpod("ns-a", "r0", GPU1, node_name="t4"), kpod("ns-a", "a1", GPU1, t=1),
        kpod("ns-c", "c1", GPU1, t=2)])
    q = live_quota(snap, {"a": {"gpus": 1}})
    plan = plan_cycle(snap, POLICY, np.random.default_rng(0), quota=q)
    assert [b.job_id for b in plan.of(Bind)] == ["ns-c/c1"]
    (r,) = plan.of(Refuse)
    assert r.message == ("team a: 2 GPU would exceed its quota of 1 and it has no cohort to "
                         "borrow from")
    assert plan_cycle(snap, POLICY, np.random.default_rng(0)).of(Bind)  # no quota: binds


def test_metrics_per_queue() -> None:
    # 1.50 spent + 200 micro-$/s over the 1 h look-ahead (0.72) reaches the 2.00 budget: low
    v = spend_view(1_500_000, rate=200.0, budget={"usd": 2, "period": "day"})
    fams = {f.name: f for f in queue_families([v])}
    val = {n: [(s.labels, s.value) for s in f.samples] for n, f in fams.items()}
    lab = {"queue": "q", "cohort": ""}
    assert val["gpufleet_queue_gpu_usage"] == [(lab, 3.0)]
    assert val["gpufleet_queue_gpu_nominal"] == [(lab, 2.0)]
    assert val["gpufleet_queue_gpu_borrowed"] == [(lab, 1.0)]
    assert val["gpufleet_queue_period_spend_dollars"] == [(lab, 1.5)]
    assert val["gpufleet_queue_budget_remaining_dollars"] == [(lab, 0.5)]
    assert val["gpufleet_queue_spend_dollars_per_second"] == [(lab, 2e-4)]
    assert dict((s[0]["state"], s[1]) for s in val["gpufleet_queue_budget_state"]) == {
        "ok": 0.0, "low": 1.0, "exhausted": 0.0}


# -- the tracker's cycle input ----------------------------------------------------------------
def tracker(teams_yaml: dict | None = None):
    import threading

    from kubernetes import client as k8s_client

    from gpufleet.config import default_scenario
    from gpufleet.k8s.queues.tracker import QueueTracker
    from gpufleet.queueing.teams.settings import TeamsSettings

    sc = default_scenario()
    if teams_yaml is not None:
        sc = sc.model_copy(update={"teams": TeamsSettings.model_validate(teams_yaml)})
    events: list[tuple[str, str]] = []
    t = QueueTracker(k8s_client.ApiClient(), threading.Event(), sc, CAT,
                     lambda o, reason, msg, kind: events.append((reason, msg)))
    return t, events


def put(informer: object, objs: list[dict]) -> None:
    informer._store = {o["metadata"]["name"]: o for o in objs}  # type: ignore[attr-defined]


def test_an_invalid_update_keeps_the_last_valid_spec_and_config_queues_count() -> None:
    t, _ = tracker({"queues": [{"name": "cfg", "gpus": 1}, {"name": "a", "gpus": 9}]})
    put(t.namespaces, [{"metadata": {"name": n, "labels": {"gpufleet.io/queue": q}}}
                       for n, q in (("ns-a", "a"), ("ns-cfg", "cfg"), ("ns-x", "nobody"))])
    snap = build_snapshot([node("t4", 4)], [kpod("ns-a", "r", GPU1, node_name="t4")])
    put(t.queues, [obj("a", {"gpus": 2})])
    live = t.observe(snap, [], lambda *a: 0.0, DAY)
    assert live.teams == {"ns-a": "a", "ns-cfg": "cfg"}  # a label naming no queue: unmanaged
    assert live.input is not None
    assert {n: q.nominal_milli for n, q in live.input.book.teams.items()} == {
        "cfg": 1000, "a": 2000}  # the GpuQueue replaces the config's queue of that name
    assert live.input.book.usage == {"cfg": 0, "a": 1000}
    put(t.queues, [obj("a", {"gpus": 2, "x": 1}, gen=2)])  # turns invalid
    live = t.observe(snap, [], lambda *a: 0.0, DAY + 1)
    assert live.settings["a"].gpus == 2 and live.parsed[0].error is not None
    put(t.queues, [])  # deleted: the config's queue is back
    assert t.observe(snap, [], lambda *a: 0.0, DAY + 2).settings["a"].gpus == 9


def test_enforce_quotas_off_measures_but_does_not_act() -> None:
    """``teams.enforce_quotas: false`` in --config is the simulator's dry run: the cycle gets
    an empty book (a's second pod binds beyond its quota of 1), status and metrics still see
    the quota and the usage (1 of 1)."""
    t, _ = tracker({"enforce_quotas": False, "queues": [{"name": "a", "gpus": 1}]})
    put(t.namespaces, [{"metadata": {"name": "ns-a", "labels": {"gpufleet.io/queue": "a"}}}])
    snap = build_snapshot([node("t4", 4)], [kpod("ns-a", "r0", GPU1, node_name="t4"),
                                            kpod("ns-a", "a1", GPU1, t=1)])
    live = t.observe(snap, [], lambda *a: 0.0, DAY)
    assert live.input is not None and live.input.book.teams == {}
    assert live.nominal is not None and live.nominal.usage == {"a": 1000}
    assert live.nominal.teams["a"].nominal_milli == 1000
    plan = plan_cycle(snap, POLICY, np.random.default_rng(0), quota=live)
    assert [b.job_id for b in plan.of(Bind)] == ["ns-a/a1"]
    t.sync(live, snap, DAY, leader=False)
    assert (t.views["a"].usage_milli, t.views["a"].nominal_milli) == (1000, 1000)
    on, _ = tracker({"queues": [{"name": "a", "gpus": 1}]})
    put(on.namespaces, t.namespaces.objects())
    acting = on.observe(snap, [], lambda *a: 0.0, DAY)
    assert not plan_cycle(snap, POLICY, np.random.default_rng(0), quota=acting).of(Bind)


def test_without_queues_the_cycle_gets_no_quota() -> None:
    t, _ = tracker()
    snap = build_snapshot([node("t4", 4)], [])
    live = t.observe(snap, [], lambda *a: 0.0, DAY)
    assert live.input is None and live.settings == {}


@pytest.mark.parametrize(("status", "empty"), [(404, True), (403, True), (500, False)])
def test_a_missing_crd_or_rbac_lists_as_empty_but_its_watch_fails(status: int,
                                                                  empty: bool) -> None:
    from kubernetes.client.exceptions import ApiException

    from gpufleet.k8s.queues.tracker import optional_list

    def call(**kw: object) -> object:
        raise ApiException(status=status, reason="x")

    listing = optional_list("gpuqueues", call)
    if empty:
        got = listing(limit=500, _preload_content=False)
        assert json.loads(got.data) == {"items": [], "metadata": {"resourceVersion": ""}}
    else:
        with pytest.raises(ApiException):
            listing(limit=500)
    with pytest.raises(ApiException):
        listing(watch=True)


# -- budgets, per-model usage, gangs and scale-up in the live cycle ---------------------------
def ledger_status(spent_usd: float) -> dict:
    return {"ledger": {"periodStart": "2026-12-04T00:00:00Z", "asOf": "2026-12-04T00:00:00Z",
                       "spentMicro": round(spent_usd * 1e6), "rateMicroPerS": 0.0}}


@pytest.mark.parametrize(("spent", "running", "action", "held"), [
    # $1.50 spent + t4's $3.60/h (1,000 µ$/s: a holds the only GPU in use, so the whole node)
    # over the 1 h look-ahead = $5.10 ≥ $2: low → the action applies to new work
    (1.5, True, "hold", "hold"),
    (1.5, True, "spot-only", "spot-only"),
    (1.5, True, "notify", None),  # notify: metrics and events only, the cycle never sees it
    (1.5, False, "hold", None),  # nothing running: $1.50 + 0 < $2, ok
    (2.5, False, "spot-only", "spot-only"),  # spent: exhausted, whatever the rate
])
def test_observe_hands_the_cycle_the_budget_verdicts(spent: float, running: bool, action: str,
                                                    held: str | None) -> None:
    t, _ = tracker()
    put(t.namespaces, [{"metadata": {"name": "ns-a", "labels": {"gpufleet.io/queue": "a"}}}])
    pods = [kpod("ns-a", "r", GPU1, node_name="t4")] if running else []
    snap = build_snapshot([node("t4", 4)], pods)
    q = obj("a", {"budget": {"usd": 2, "period": "day", "action": action}})
    q["status"] = ledger_status(spent)
    put(t.queues, [q])
    live = t.observe(snap, [node("t4", 4)], lambda *a: 3.6, DAY)
    assert live.input is not None
    got = {n: v.action for n, v in live.input.budgets.items()}
    assert got == ({} if held is None else {"a": held})
    if held is not None:
        assert live.input.budgets["a"].reason.startswith(f"team a: budget ${spent:.2f} of $2.00")


def test_observe_counts_usage_per_gpu_model() -> None:
    t, _ = tracker()
    put(t.namespaces, [{"metadata": {"name": "ns-a", "labels": {"gpufleet.io/queue": "a"}}}])
    put(t.queues, [obj("a", {"gpus": 8, "models": {"T4": 1}})])
    snap = build_snapshot([node("t4", 4), node("a100", 2, "NVIDIA-A100-SXM4-40GB")], [
        kpod("ns-a", "r", GPU1, node_name="t4"),
        kpod("ns-a", "h", ann={"gpu-fraction": "0.5"}, node_name="t4"),
        kpod("ns-a", "w", {"nvidia.com/gpu": "2"}, node_name="a100"),
        kpod("ns-a", "p", GPU1, t=5)])
    live = t.observe(snap, [], lambda *a: 0.0, DAY)
    assert live.input is not None
    assert live.input.book.usage == {"a": 3500}
    assert live.input.book.model_usage == {"a": {"T4": 1500, "A100-40GB": 2000}}


def spot_node(name: str, gpus: int) -> dict:
    n = node(name, gpus)
    n["metadata"]["labels"]["karpenter.sh/capacity-type"] = "spot"
    n["spec"] = {"taints": [{"key": "karpenter.sh/capacity-type", "value": "spot",
                             "effect": "NoSchedule"}]}
    return n


def with_budget(q: LiveQuota, action: str) -> LiveQuota:
    """``q`` with team a's budget spent ($2.50 of $2): its ``action`` restricts new work."""
    assert q.input is not None
    held = restrictions(budget_verdicts({"a": Budget(2_000_000, "day", action)},
                                        {"a": 2_500_000}, {}, DAY))
    return LiveQuota(QuotaInput(q.input.book, None, held), q.teams, q.settings)


@pytest.mark.parametrize(("action", "bound_on"), [
    ("spot-only", "spot"),  # no toleration of its own: the cycle asks spot for it
    ("hold", None),
    ("notify", "od"),  # the on-demand node wins as without a budget (no toleration)
])
def test_a_budget_action_in_the_live_cycle(action: str, bound_on: str | None) -> None:
    snap = build_snapshot([node("od", 4), spot_node("spot", 4)],
                          [kpod("ns-a", "a1", GPU1), kpod("ns-b", "b1", GPU1, t=1)])
    q = with_budget(live_quota(snap, {"a": {"gpus": 4}, "b": {"gpus": 4}}), action)
    plan = plan_cycle(snap, POLICY, np.random.default_rng(0), quota=q)
    binds = {b.job_id: b.node for b in plan.of(Bind)}
    assert binds.get("ns-b/b1") == "od"  # team b has no budget: as before
    assert binds.get("ns-a/a1") == bound_on
    if bound_on is None:
        (r,) = plan.of(Refuse)
        assert r.message == ("team a: budget $2.50 of $2.00 spent; new work waits until the "
                             "period renews")


def test_reclaim_takes_a_borrowed_pod_group_whole() -> None:
    """a (1 GPU) and b (3 GPUs) in one cohort; a's 2-pod gang holds 2 of the 4 GPUs (1
    borrowed), b runs 2 and its third is within quota: the gang's two pods are evicted."""
    g = {"scheduling.x-k8s.io/pod-group": "g"}
    gang = [kpod("ns-a", f"g{i}", GPU1, node_name="t4", t=i) for i in range(2)]
    for p in gang:
        p["metadata"]["labels"] = g
    running = [*gang, *(kpod("ns-b", f"r{i}", GPU1, node_name="t4", t=2 + i) for i in range(2))]
    snap = build_snapshot([node("t4", 4)], [*running, kpod("ns-b", "b9", GPU1, t=9)])
    assert {v.job_id: v.workload for v in victims_of(snap)} == {
        "ns-a/g0": "ns-a/g", "ns-a/g1": "ns-a/g", "ns-b/r0": None, "ns-b/r1": None}
    q = live_quota(snap, {"a": {"gpus": 1, "cohort": "c"}, "b": {"gpus": 3, "cohort": "c"}})
    plan = plan_cycle(snap, POLICY, np.random.default_rng(0), quota=q)
    assert sorted((p.job_id, p.reason) for p in plan.of(Preempt)) == [
        ("ns-a/g0", "reclaim: team a borrowed"), ("ns-a/g1", "reclaim: team a borrowed")]


@pytest.mark.parametrize(("bound", "budget", "gates"), [
    # quota a = 2 GPUs, no cohort, none in use: a1 a2 fit, a3 would exceed
    ((), None, {"ns-a/a1": Gate.ANY, "ns-a/a2": Gate.ANY, "ns-a/a3": Gate.SKIP}),
    # a1 bound this cycle counts as running: a2 fits, a3 does not
    (("ns-a/a1",), None, {"ns-a/a2": Gate.ANY, "ns-a/a3": Gate.SKIP}),
    ((), "spot-only", {"ns-a/a1": Gate.SPOT, "ns-a/a2": Gate.SPOT, "ns-a/a3": Gate.SKIP}),
    ((), "hold", {"ns-a/a1": Gate.SKIP, "ns-a/a2": Gate.SKIP, "ns-a/a3": Gate.SKIP}),
])
def test_launch_gates(bound: tuple[str, ...], budget: str | None,
                      gates: dict[str, Gate]) -> None:
    pods = [kpod("ns-a", f"a{i}", GPU1, t=i) for i in (1, 2, 3)]
    pods.append(kpod("ns-c", "c1", GPU1, t=4))  # no queue: as without teams
    snap = build_snapshot([node("t4", 0)], pods)
    q = live_quota(snap, {"a": {"gpus": 2}})
    if budget is not None:
        q = with_budget(q, budget)
    refused = [k for k in ("ns-a/a1", "ns-a/a2", "ns-a/a3", "ns-c/c1") if k not in bound]
    got = launch_gates(snap, q, [Bind(k, "t4", (0,)) for k in bound], refused, CAT)
    assert got == {**gates, "ns-c/c1": Gate.ANY}
    assert launch_gates(snap, None, [], refused, CAT) is None
    asked = {p.job_id: (p.spot_ok, p.spot_only) for p in cap_pending(snap, refused, 0.0,
                                                                     gates=got)}
    assert asked == {k: (g is Gate.SPOT, g is Gate.SPOT) for k, g in got.items()
                     if g is not Gate.SKIP} | {"ns-c/c1": (False, False)}


def test_a_restarted_tracker_goes_on_from_the_saved_fair_share() -> None:
    """Queue ``a`` saved 5,000,000 milli-GPU·s of decayed usage 60 s before this controller's
    first cycle and runs one GPU (1,000 milli) now: it goes on from 5,000,000 × keep(60 s) +
    1,000 × gain(60 s) (a 7-day half-life: ≈ 5,059,650); ``b``, with no saved value, from 0.
    The next status write carries the value as of its ``asOf``."""
    from gpufleet.k8s.queues import status as st
    from gpufleet.queueing.teams.fairshare import decay

    t, _ = tracker()
    put(t.namespaces, [{"metadata": {"name": "ns-a", "labels": {"gpufleet.io/queue": "a"}}},
                       {"metadata": {"name": "ns-b", "labels": {"gpufleet.io/queue": "b"}}}])
    qa = obj("a", {"gpus": 2})
    qa["status"] = {"ledger": {**ledger_status(0)["ledger"], "asOf": "2026-12-04T00:00:00Z",
                               "decayedGpuMilliSeconds": 5e6}}
    put(t.queues, [qa, obj("b", {"gpus": 2}, uid="u2")])
    snap = build_snapshot([node("t4", 4)], [kpod("ns-a", "r", GPU1, node_name="t4")])
    live = t.observe(snap, [node("t4", 4)], lambda *a: 3.6, DAY + 60)
    keep, gain = decay(60.0, 7 * 86400.0)
    assert live.input is not None and live.input.history is not None
    got = live.input.history.decayed
    assert got["a"]["gpu"] == pytest.approx(5e6 * keep + 1000 * gain)
    assert got["a"]["gpu"] == pytest.approx(5_059_650, abs=5)
    assert "b" not in got or got["b"]["gpu"] == 0.0
    assert st.saved_fair_share(qa) == (5e6, DAY)
    led = st.ledger(Spend(DAY, DAY + 86400, 0, 0.0), DAY + 60, got["a"]["gpu"])
    assert led["decayedGpuMilliSeconds"] == got["a"]["gpu"]
    assert st.saved_fair_share({"status": {"ledger": led}}) == (got["a"]["gpu"], DAY + 60)
