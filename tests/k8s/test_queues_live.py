"""Team queues (``GpuQueue``) on the real API server: cohort borrowing and reclaim, MIG and
fractions counted by their shares, a bad spec reported on the object, budget actions (notify,
spot-only, hold, hold-and-drain), and a kill -9'd
controller's successor rebuilding usage and spend from the API.

Each test has its own namespaces, queues (names with the test's tag) and nodes in a zone named
after its first namespace. The CRD is the one ``gpufleet lab up`` installed from the chart
(``charts/gpufleet/crds``), as ``helm install`` and ``kubectl apply -f deploy/kubernetes`` do:
nothing here applies it, and the controller must list GpuQueues without a 404.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from live_objects import gpu_pod
from live_wait import after_passes, wait_for

from gpufleet.config import default_scenario
from gpufleet.control.admission import spot_taint_object
from gpufleet.k8s.capacity.cost import PriceBook
from gpufleet.k8s.queues.spec import GROUP, PLURAL, QUEUE_LABEL, VERSION
from gpufleet.k8s.schedule.controller import Controller
from gpufleet.k8s.translate import names
from gpufleet.k8s.translate.pods import parse_time

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "charts" / "gpufleet" / "crds" / "gpuqueues.gpufleet.io.yaml"
T4 = {names.GPU_PRODUCT: "Tesla-T4"}


@pytest.fixture(scope="module")
def crd(lab: Any) -> None:
    """The GpuQueue CRD as the lab installed it: Established, with the chart's schema."""
    chart = yaml.safe_load(CRD.read_text())
    got = client.ApiextensionsV1Api(lab.api).read_custom_resource_definition(
        chart["metadata"]["name"])
    assert any(c.type == "Established" and c.status == "True" for c in got.status.conditions)
    served = lab.api.sanitize_for_serialization(got.spec)
    assert served["names"]["kind"] == chart["spec"]["names"]["kind"] == "GpuQueue"
    assert [(v["name"], v["schema"]) for v in served["versions"]] == [
        (v["name"], v["schema"]) for v in chart["spec"]["versions"]]


def test_lab_up_serves_gpuqueues(lab: Any, crd: None) -> None:
    """A GpuQueue can be created on the lab as it comes up and reads back as written; a spec
    outside the chart's schema is refused by the API server (the schema is in force)."""
    custom = client.CustomObjectsApi(lab.api)
    name = f"lab-{uuid.uuid4().hex[:6]}"
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "GpuQueue", "metadata": {"name": name},
            "spec": {"gpus": 2, "cohort": "lab"}}
    custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
    try:
        got = custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, name)
        assert (got["kind"], got["spec"]) == ("GpuQueue", {"gpus": 2, "cohort": "lab"})
        with pytest.raises(ApiException) as refused:
            custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, {
                **body, "metadata": {"name": f"{name}-bad"}, "spec": {"gpus": "two"}})
        assert refused.value.status == 422, refused.value.body
    finally:
        custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)


class Teams:
    """A test's namespaces, queues and nodes, all removed at the end."""

    def __init__(self, lab: Any) -> None:
        self.lab = lab
        self.core = client.CoreV1Api(lab.api)
        self.batch = client.BatchV1Api(lab.api)
        self.custom = client.CustomObjectsApi(lab.api)
        self.tag = uuid.uuid4().hex[:6]
        self.namespaces: list[str] = []
        self.queues: list[str] = []
        self.nodes: list[str] = []

    @property
    def zone(self) -> str:
        return self.namespaces[0]

    def namespace(self, queue: str | None) -> str:
        ns = self.lab.namespace()
        self.namespaces.append(ns)
        if queue is not None:
            self.core.patch_namespace(ns, {"metadata": {"labels": {QUEUE_LABEL: queue}}})
        return ns

    def queue(self, name: str, spec: dict) -> str:
        self.custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "GpuQueue",
            "metadata": {"name": name}, "spec": spec})
        self.queues.append(name)
        return name

    def status(self, name: str) -> dict:
        return self.custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, name).get(
            "status") or {}

    def valid(self, name: str) -> str | None:
        return next((c["status"] for c in self.status(name).get("conditions") or ()
                     if c["type"] == "Valid"), None)

    def add(self, instance_type: str, mig_config: str | None = None,
            capacity_type: str = "on-demand") -> str:
        (node,) = self.lab.add_instance_nodes(instance_type, 1, zone=self.zone,
                                              mig_config=mig_config, prefix=self.zone,
                                              capacity_type=capacity_type)
        self.nodes.append(node)
        if capacity_type == "spot":  # as the kwok cloud launches spot Nodes: with the taint
            self.core.patch_node(node, {"spec": {"taints": [spot_taint_object()]}})
        return node

    def pods(self, ns: str, prefix: str = "") -> list[dict]:
        items = json.loads(self.core.list_namespaced_pod(ns, _preload_content=False).data)
        return [p for p in items["items"] if p["metadata"]["name"].startswith(prefix)]

    def close(self) -> None:
        for ns in self.namespaces:
            for job in self.batch.list_namespaced_job(ns).items:
                self.batch.delete_namespaced_job(job.metadata.name, ns,
                                                 propagation_policy="Background")
            self.core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
        for ns in self.namespaces:
            wait_for("the test's pods to go", lambda ns=ns: not self.pods(ns), 60)
        for q in self.queues:
            try:
                self.custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, q)
            except ApiException as exc:
                if exc.status != 404:
                    raise
        for n in self.nodes:
            self.core.delete_node(n)
        for ns in self.namespaces:
            self.core.delete_namespace(ns)


@pytest.fixture()
def teams(lab: Any, crd: None) -> Iterator[Teams]:
    t = Teams(lab)
    yield t
    t.close()


@pytest.fixture()
def controller(lab: Any, crd: None, caplog: pytest.LogCaptureFixture) -> Iterator[Controller]:
    ctl = Controller(lab.api, default_scenario(), leader_elect=False, resync_s=0.5,
                     queue_spend_interval_s=0.5)
    ctl.start()
    wait_for("informers to sync", ctl.ready)
    # with the lab's CRD the queue informer lists GpuQueues: no "gpuqueues: 404 …" warning
    assert not [r.getMessage() for r in caplog.records
                if r.getMessage().startswith("gpuqueues:") and "404" in r.getMessage()]
    yield ctl
    ctl.stop()


def seen_by(ctl: Controller, ns: str, queue: str) -> bool:
    """The controller's informers show the namespace's label and a valid queue."""
    obj = ctl.queues.namespaces.get(ns) or {}
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return labels.get(QUEUE_LABEL) == queue and ctl.queues.queues.get(queue) is not None


def bound(p: dict) -> bool:
    return bool(p["spec"].get("nodeName")) and not p["metadata"].get("deletionTimestamp")


def checkpointing_job(name: str, n: int, zone: str) -> dict:
    """An Indexed Job of ``n`` 1-GPU T4 pods that run until deleted; an evicted pod's index is
    recreated (``podFailurePolicy`` ignores ``DisruptionTarget``), as docs/kubernetes.md's
    checkpointing recipe does."""
    tmpl = gpu_pod(name, 1, {**T4, names.ZONE: zone})
    tmpl["spec"]["restartPolicy"] = "Never"
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"completions": n, "parallelism": n, "completionMode": "Indexed",
                     "backoffLimitPerIndex": 1, "maxFailedIndexes": 0,
                     "template": {"metadata": {}, "spec": tmpl["spec"]},
                     "podFailurePolicy": {"rules": [
                         {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [75]}},
                         {"action": "Ignore",
                          "onPodConditions": [{"type": "DisruptionTarget"}]}]}}}


def a_borrows(teams: Teams, controller: Controller, gpus: dict[str, int], nodes: int,
              pods: int) -> tuple[str, dict[str, str], str, str, set[str]]:
    """Queues ``gpus`` (a short name → its quota) in one cohort, namespaces for "a" and "b",
    ``nodes`` nodes of 4 T4s; A's checkpointing Job of ``pods`` 1-GPU pods binds, borrowing
    what it runs above its quota. Returns the cohort, the queues' names, A's and B's
    namespaces and the uids of A's pods."""
    cohort = f"c-{teams.tag}"
    q = {k: f"q{k}-{teams.tag}" for k in gpus}
    ns_a, ns_b = teams.namespace(q["a"]), teams.namespace(q["b"])
    for _ in range(nodes):
        teams.add("g4dn.12xlarge")
    for k, n in gpus.items():
        teams.queue(q[k], {"gpus": n, "cohort": cohort})
    for ns, k in ((ns_a, "a"), (ns_b, "b")):
        wait_for(f"the controller to see {q[k]}", lambda ns=ns, k=k: seen_by(controller, ns, q[k]))
    for name in q.values():
        wait_for(f"{name} to be valid", lambda name=name: teams.valid(name) == "True")
    teams.batch.create_namespaced_job(ns_a, checkpointing_job("a", pods, teams.zone))
    wait_for(f"A's {pods} pods to bind", lambda: sum(bound(p) for p in teams.pods(ns_a)) == pods)
    over = pods - gpus["a"]
    wait_for(f"A's status to show {over} borrowed", lambda: (
        (s := teams.status(q["a"])).get("usage") == pods and s.get("borrowed") == over))
    return cohort, q, ns_a, ns_b, {p["metadata"]["uid"] for p in teams.pods(ns_a)}


def test_borrowed_gpus_are_reclaimed_when_the_lender_needs_them(
        teams: Teams, controller: Controller) -> None:
    """Two queues of 2 GPUs in one cohort on a 4-GPU node: A's 4-pod Job runs (2 borrowed);
    B's 2 pods arrive; A's two newest pods are evicted (reclaim), B's bind, and the Job's
    recreated pods wait, over quota, with the reason on PodScheduled."""
    cohort, q, ns_a, ns_b, first = a_borrows(teams, controller, {"a": 2, "b": 2}, 1, 4)
    qa, qb = q["a"], q["b"]

    t0 = time.monotonic()
    for i in range(2):
        teams.core.create_namespaced_pod(ns_b, gpu_pod(f"b-{i}", 1, {**T4, names.ZONE: teams.zone}))
    wait_for("B's pods to bind", lambda: sum(bound(p) for p in teams.pods(ns_b)) == 2, 60)
    took = time.monotonic() - t0
    a_pods = teams.pods(ns_a)
    assert sum(bound(p) for p in a_pods) == 2, "A kept more than its quota"
    # the Job recreates the two evicted indexes; they wait: A is at its quota, no idle room
    waiting = wait_for("A's recreated pods to wait with the quota reason", lambda: [
        p for p in teams.pods(ns_a) if p["metadata"]["uid"] not in first and not bound(p)
        and any(c.get("type") == "PodScheduled" and c.get("status") == "False"
                and "idle quota" in c.get("message", "")
                for c in p["status"].get("conditions") or ())], 60)
    msg = next(c["message"] for c in waiting[0]["status"]["conditions"]
               if c["type"] == "PodScheduled")
    assert msg.startswith(f"team {qa}: cohort {cohort} has 0 GPU of idle quota")
    evs = [e for e in teams.core.list_namespaced_event(ns_a).items if e.reason == "Preempted"]
    assert len(evs) == 2 and all(f"reclaim: team {qa} borrowed" in e.message for e in evs)
    wait_for("status to show the reclaim", lambda: (
        teams.status(qa).get("usage"), teams.status(qa).get("borrowed"),
        teams.status(qb).get("usage")) == (2, 0, 2))
    assert not any(bound(p) for p in teams.pods(ns_a) if p["metadata"]["uid"] not in first)
    print(f"B's two pods bound {took:.1f} s after they were created")


def test_a_pod_larger_than_what_is_left_of_its_quota_reclaims_from_a_larger_borrower(
        teams: Teams, controller: Controller) -> None:
    """Three queues in one cohort on two 4-T4 nodes: A (2 GPUs) runs a 6-pod Job, borrowing 4
    of C's idle quota; B (3 GPUs, nothing running) asks for one 4-GPU pod, which straddles its
    quota (it would borrow 1). The cohort has 2 GPUs of room, 2 short: A gives back two pods
    (it still uses 4 of its 2, a share of 2 ≥ B's 0 of 3: ``QuotaBook.gives_back``) — the two
    on the node where they free 4 GPUs, though all six were created in the same second — B's
    pod binds, and A's recreated pods wait over quota."""
    _, q, ns_a, ns_b, first = a_borrows(teams, controller, {"a": 2, "b": 3, "c": 3}, 2, 6)
    qa, qb = q["a"], q["b"]

    teams.core.create_namespaced_pod(ns_b, gpu_pod("big", 4, {**T4, names.ZONE: teams.zone}))
    wait_for("B's 4-GPU pod to bind", lambda: sum(bound(p) for p in teams.pods(ns_b)) == 1, 60)
    evs = [e for e in teams.core.list_namespaced_event(ns_a).items if e.reason == "Preempted"]
    assert len(evs) == 2 and all(f"reclaim: team {qa} borrowed" in e.message for e in evs)
    wait_for("status to show the reclaim", lambda: (
        teams.status(qa).get("borrowed"), teams.status(qb).get("usage"),
        teams.status(qb).get("borrowed")) == (2, 4, 1))
    assert sum(bound(p) for p in teams.pods(ns_a)) == 4
    assert not any(bound(p) for p in teams.pods(ns_a) if p["metadata"]["uid"] not in first)


def test_mig_slices_and_fractions_count_by_their_share(
        teams: Teams, controller: Controller) -> None:
    q = f"q-{teams.tag}"
    ns = teams.namespace(q)
    teams.add("p4d.24xlarge", mig_config="all-balanced")
    teams.add("g4dn.12xlarge")
    teams.queue(q, {"gpus": 4})
    wait_for("the controller to see the queue", lambda: seen_by(controller, ns, q))
    mig = gpu_pod("mig", 0, {names.ZONE: teams.zone})
    mig["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/mig-3g.20gb": "1"}
    teams.core.create_namespaced_pod(ns, mig)
    for i in range(2):
        p = gpu_pod(f"half-{i}", 0, {**T4, names.ZONE: teams.zone})
        del p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
        p["metadata"]["annotations"] = {"gpu-fraction": "0.5"}
        teams.core.create_namespaced_pod(ns, p)
    wait_for("the three pods to bind", lambda: sum(bound(p) for p in teams.pods(ns)) == 3)
    # 3g.20gb on an A100 (7 compute slices) = 3/7 = 0.429; two halves = 1
    got = wait_for("usage in status", lambda: teams.status(q).get("usage") == 1.429 or None)
    assert got and teams.status(q)["borrowed"] == 0


def test_a_bad_spec_is_reported_on_the_object_and_scheduling_goes_on(
        teams: Teams, controller: Controller) -> None:
    bad = f"bad-{teams.tag}-" + "x" * 60  # a valid object name, too long for a label value
    teams.queue(bad, {"gpus": 1})
    wait_for("Valid=False on the bad queue", lambda: teams.valid(bad) == "False")
    cond = next(c for c in teams.status(bad)["conditions"] if c["type"] == "Valid")
    assert cond["reason"] == "InvalidSpec"
    assert cond["message"].startswith("metadata.name: String should have at most 63")
    evs = wait_for("the InvalidSpec event", lambda: [
        e for e in teams.core.list_namespaced_event("default").items
        if e.involved_object.name == bad and e.reason == "InvalidSpec"])
    assert evs[0].involved_object.kind == "GpuQueue" and evs[0].type == "Warning"
    # the controller keeps going: a good queue becomes valid and its pods bind
    q = f"good-{teams.tag}"
    ns = teams.namespace(q)
    teams.add("g4dn.12xlarge")
    teams.queue(q, {"gpus": 1})
    wait_for("the good queue to be valid", lambda: teams.valid(q) == "True")
    teams.core.create_namespaced_pod(ns, gpu_pod("p", 1, {names.ZONE: teams.zone}))
    wait_for("its pod to bind", lambda: sum(bound(p) for p in teams.pods(ns)) == 1)
    assert controller.healthy()
    after_passes(controller)  # the bad queue's event is not repeated
    assert len([e for e in teams.core.list_namespaced_event("default").items
                if e.involved_object.name == bad and e.reason == "InvalidSpec"]) == 1


def test_a_budget_running_out_is_shown_and_notified(
        teams: Teams, controller: Controller) -> None:
    """A 2-cent daily budget (action notify) and an 8-GPU pod on a p4d ($32.77/h): the state
    goes low at once (an hour at this rate is far over), then exhausted within seconds; each
    change is one Warning Event on the queue, and the pod keeps running (notify holds
    nothing)."""
    q = f"q-{teams.tag}"
    ns = teams.namespace(q)
    teams.add("p4d.24xlarge")
    teams.queue(q, {"gpus": 8, "budget": {"usd": 0.02, "period": "day", "action": "notify"}})
    wait_for("the controller to see the queue", lambda: seen_by(controller, ns, q))
    teams.core.create_namespaced_pod(ns, gpu_pod("big", 8, {names.ZONE: teams.zone}))
    wait_for("the budget to run low", lambda: teams.status(q).get("budgetState") in (
        "low", "exhausted"))
    done = wait_for("the budget to run out", lambda: (
        s if (s := teams.status(q)).get("budgetState") == "exhausted" else None), 30)
    assert done["budgetLeft"] == "0.00" and float(done["spend"]) >= 0.02

    def reasons() -> list[str]:
        return sorted(e.reason for e in teams.core.list_namespaced_event("default").items
                      if e.involved_object.name == q)

    assert wait_for("both events", lambda: reasons() == ["BudgetExhausted", "BudgetLow"])
    (big,) = teams.pods(ns)
    assert bound(big)
    after_passes(controller)  # no more events
    assert reasons() == ["BudgetExhausted", "BudgetLow"]


def scheduled_false(p: dict) -> str | None:
    return next((c.get("message") for c in p["status"].get("conditions") or ()
                 if c.get("type") == "PodScheduled" and c.get("status") == "False"), None)


def budget_crossed(teams: Teams, action: str) -> tuple[str, str, str, str]:
    """A queue with a 2-cent daily budget (``action``), an on-demand and a spot-tainted 4×T4
    node in the test's zone, and a first pod that binds while nothing is spent (no
    toleration: on-demand); its node's $3.91/h then makes the budget low at once (an hour at
    that rate is far over 2 cents). Returns (queue, namespace, on-demand node, spot node)."""
    q = f"q-{teams.tag}"
    ns = teams.namespace(q)
    od = teams.add("g4dn.12xlarge")
    spot = teams.add("g4dn.12xlarge", capacity_type="spot")
    teams.queue(q, {"budget": {"usd": 0.02, "period": "day", "action": action}})
    return q, ns, od, spot


def test_a_budget_crossing_flips_new_pods_to_spot_only(
        teams: Teams, controller: Controller) -> None:
    q, ns, od, spot = budget_crossed(teams, "spot-only")
    wait_for("the controller to see the queue", lambda: seen_by(controller, ns, q))
    teams.core.create_namespaced_pod(ns, gpu_pod("before", 1, {**T4, names.ZONE: teams.zone}))
    (before,) = wait_for("the first pod to bind", lambda: [
        p for p in teams.pods(ns, "before") if bound(p)])
    assert before["spec"]["nodeName"] == od  # no toleration and nothing spent: on-demand
    wait_for("the budget to run low", lambda: teams.status(q).get("budgetState") in (
        "low", "exhausted"))
    teams.core.create_namespaced_pod(ns, gpu_pod("after", 1, {**T4, names.ZONE: teams.zone}))
    (after,) = wait_for("the new pod to bind", lambda: [
        p for p in teams.pods(ns, "after") if bound(p)])
    assert after["spec"]["nodeName"] == spot  # the on-demand node had 3 free GPUs
    assert spot_taint_object() in [
        {k: t.get(k) for k in ("key", "value", "effect")} for t in after["spec"]["tolerations"]]
    (still,) = teams.pods(ns, "before")
    assert still["spec"]["nodeName"] == od and bound(still)  # running work is left alone


def test_a_budget_hold_keeps_new_pods_pending_with_the_reason(
        teams: Teams, controller: Controller) -> None:
    q, ns, od, _ = budget_crossed(teams, "hold")
    wait_for("the controller to see the queue", lambda: seen_by(controller, ns, q))
    teams.core.create_namespaced_pod(ns, gpu_pod("before", 1, {**T4, names.ZONE: teams.zone}))
    wait_for("the first pod to bind", lambda: [p for p in teams.pods(ns, "before") if bound(p)])
    wait_for("the budget to run low", lambda: teams.status(q).get("budgetState") in (
        "low", "exhausted"))
    teams.core.create_namespaced_pod(ns, gpu_pod("after", 1, {**T4, names.ZONE: teams.zone}))
    msg = wait_for("the new pod to wait with the budget reason", lambda: next(
        (m for p in teams.pods(ns, "after") if (m := scheduled_false(p))), None))
    assert msg.startswith(f"team {q}: budget $0.0")
    assert msg.endswith("of $0.02 will run out within the look-ahead at $3.91/h; new work "
                        "waits until the period renews") or msg.endswith(
        "of $0.02 spent; new work waits until the period renews")
    after_passes(controller)  # still pending, the first still running
    (after,) = teams.pods(ns, "after")
    assert not after["spec"].get("nodeName")
    (before,) = teams.pods(ns, "before")
    assert bound(before) and before["spec"]["nodeName"] == od


def test_a_budget_hold_and_drain_evicts_running_pods_once_spent(
        teams: Teams, controller: Controller) -> None:
    """``hold-and-drain``: a checkpointing Job's pod binds while nothing is spent; its node's
    $3.91/h spends the 2 cents in about 18 s, and then the pod is evicted (a ``Preempted``
    Event with the drain's reason), the Job recreates it, and the new pod waits with the
    hold reason — nothing of the queue runs while its budget is spent."""
    q, ns, od, _ = budget_crossed(teams, "hold-and-drain")
    wait_for("the controller to see the queue", lambda: seen_by(controller, ns, q))
    teams.batch.create_namespaced_job(ns, checkpointing_job("d", 1, teams.zone))
    (first,) = wait_for("the Job's pod to bind", lambda: [p for p in teams.pods(ns, "d")
                                                          if bound(p)])
    assert first["spec"]["nodeName"] == od
    uid = first["metadata"]["uid"]
    wait_for("the budget to be spent", lambda: teams.status(q).get("budgetState")
             == "exhausted", 60)
    evs = wait_for("the drain's eviction", lambda: [
        e for e in teams.core.list_namespaced_event(ns).items if e.reason == "Preempted"], 30)
    assert evs[0].involved_object.uid == uid
    assert evs[0].message.startswith(f"budget drain: team {q}: budget $0.0")
    assert evs[0].message.endswith("spent; new work waits until the period renews; running "
                                   "work is evicted")
    msg = wait_for("the recreated pod to wait with the hold reason", lambda: next(
        (m for p in teams.pods(ns, "d") if p["metadata"]["uid"] != uid
         and (m := scheduled_false(p))), None), 60)
    assert msg.startswith(f"team {q}: budget $0.0") and msg.endswith(
        "spent; new work waits until the period renews; running work is evicted")
    after_passes(controller)  # nothing of the queue is bound again
    assert not any(bound(p) for p in teams.pods(ns))
    assert len([e for e in teams.core.list_namespaced_event(ns).items
                if e.reason == "Preempted"]) == 1


def run_controller(lab: Any, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "gpufleet", "controller", "--kubeconfig", str(lab.kubeconfig),
         "--no-leader-elect", "--port", "0", "--queue-spend-interval", "0.5"],
        stdout=log.open("a"), stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})


def test_kill_9_the_controller_and_its_successor_rebuilds_usage_and_spend(
        teams: Teams, lab: Any, tmp_path: Path) -> None:
    """Two 4-GPU pods share a p4d (half its price each); one finishes, so the other pays the
    whole node. The controller is killed with SIGKILL; the next one shows the same usage and
    goes on from the spend in status.ledger — the spend then plus the rate then over the
    outage — neither losing what was spent nor counting it twice; the same for the queue's
    fair-share usage history."""
    q = f"q-{teams.tag}"
    ns = teams.namespace(q)
    teams.add("p4d.24xlarge")  # 8 A100s
    node_rate = PriceBook().price("p4d.24xlarge", teams.zone, "on-demand") * 1e6 / 3600
    teams.queue(q, {"gpus": 8, "budget": {"usd": 1000, "period": "month"}})
    log = tmp_path / "controller.log"
    procs = [run_controller(lab, log)]
    try:
        wait_for("the first controller to validate the queue",
                 lambda: teams.valid(q) == "True", 60, log=log)
        short = gpu_pod("short", 4, {names.ZONE: teams.zone})
        short["spec"]["restartPolicy"] = "Never"
        teams.batch.create_namespaced_job(ns, {
            "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "short"},
            "spec": {"template": {"metadata": {"annotations": {
                "pod-complete.stage.kwok.x-k8s.io/delay": "4s"}}, "spec": short["spec"]}}})
        teams.core.create_namespaced_pod(ns, gpu_pod("long", 4, {names.ZONE: teams.zone}))
        before = wait_for("the short pod done, the long one paying the whole node", lambda: (
            s if (s := teams.status(q)).get("usage") == 4
            and (s.get("ledger") or {}).get("rateMicroPerS") == pytest.approx(node_rate)
            and s["ledger"]["spentMicro"] > 3 * node_rate else None), 60, log=log)
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait(timeout=10)
        time.sleep(2)
        procs.append(run_controller(lab, log))
        after = wait_for("the next controller's status write", lambda: (
            s if (s := teams.status(q)).get("ledger", {}).get("asOf", "")
            > before["ledger"]["asOf"] else None), 60, log=log)
        assert after["usage"] == 4 and after["borrowed"] == 0
        b, a = before["ledger"], after["ledger"]
        gone = parse_time(a["asOf"]) - parse_time(b["asOf"])
        # what was spent, plus the whole node's rate since: within a second of that rate (a
        # lost ledger would show only the time since the restart, a double count twice it)
        assert a["spentMicro"] == pytest.approx(b["spentMicro"] + node_rate * gone,
                                                abs=node_rate)
        assert a["rateMicroPerS"] == pytest.approx(node_rate)
        # the fair-share history goes on too: the saved value plus the 4 GPUs (4,000 milli)
        # held over the outage and since (a 7-day half-life decays nothing in seconds); a
        # lost history would show only the successor's own few seconds
        assert a["decayedGpuMilliSeconds"] == pytest.approx(
            b["decayedGpuMilliSeconds"] + 4000 * gone, abs=4000)
        assert b["decayedGpuMilliSeconds"] > 4000 * 3  # long alone for ≥ 3 s (the spend says)
        assert float(after["budgetLeft"]) == pytest.approx(1000 - float(after["spend"]),
                                                           abs=0.011)
        out = lab.kubectl("get", "gpuqueues", q).stdout
        assert {"USAGE", "BORROWED", "SPEND", "BUDGET-LEFT"} <= set(out.split()), out
        print(out)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
