"""The controller against the real API server of the lab (kube-apiserver + controller-manager +
KWOK): binds, MIG and fractions, Unschedulable + one event, gangs, preemption through the Job
controller, 409s, 410 re-lists, metrics. The leader failover test is in test_failover_live.py.

The lab is shared by the whole session, so each test works in its own namespace, on nodes it adds
in a zone named after that namespace (its pods select the zone), and deletes both at the end. The
controller runs in-process with leader election off (one replica).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from live_objects import clean_space
from live_wait import wait_for

from gpufleet.config import default_scenario
from gpufleet.decisions import Bind
from gpufleet.k8s.schedule.apply import Applier
from gpufleet.k8s.schedule.controller import Controller
from gpufleet.k8s.schedule.cycle import plan_cycle
from gpufleet.k8s.schedule.telemetry import ControllerMetrics
from gpufleet.k8s.translate.pods import parse_time
from gpufleet.k8s.translate.snapshot import build_snapshot
from gpufleet.k8s.watch.informer import Informer

pytestmark = pytest.mark.live

T4 = {"nvidia.com/gpu.product": "Tesla-T4"}
V100 = {"nvidia.com/gpu.product": "Tesla-V100-SXM2-16GB"}
ZONE = "topology.kubernetes.io/zone"



def gpu_pod(name: str, limits: dict | None = None, *, ann: dict | None = None,
            labels: dict | None = None, selector: dict | None = None, **spec: Any) -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": ann or {}, "labels": labels or {}},
        "spec": {"schedulerName": "gpufleet", "nodeSelector": selector or {},
                 "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                 "resources": {"limits": {"cpu": "1", "memory": "1Gi",
                                                          **(limits or {})}}}],
                 **spec},
    }


@pytest.fixture(scope="module")
def api(lab: Any) -> client.ApiClient:
    return lab.api


@pytest.fixture()
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@dataclass
class Space:
    """A test's namespace and the zone (same name) its nodes live in."""

    name: str
    lab: Any
    nodes: list[str] = field(default_factory=list)

    def add(self, instance_type: str, count: int = 1, mig_config: str | None = None) -> list[str]:
        got = self.lab.add_instance_nodes(instance_type, count, zone=self.name,
                                          mig_config=mig_config, prefix=self.name)
        self.nodes += got
        return got

    @property
    def selector(self) -> dict[str, str]:
        return {ZONE: self.name}


@pytest.fixture()
def space(lab: Any, core: client.CoreV1Api) -> Iterator[Space]:
    sp = Space(lab.namespace(), lab)
    yield sp
    clean_space(core.api_client, sp.name, sp.nodes)


@pytest.fixture()
def ns(space: Space) -> str:
    return space.name


@pytest.fixture()
def controller(api: client.ApiClient) -> Iterator[Controller]:
    ctl = Controller(api, default_scenario(), leader_elect=False, resync_s=0.5)
    ctl.start()
    wait_for("informers to sync", ctl.ready)
    yield ctl
    ctl.stop()


def pod_of(core: client.CoreV1Api, ns: str, name: str) -> dict:
    resp = core.read_namespaced_pod(name, ns, _preload_content=False)
    return json.loads(resp.data)


def bound(core: client.CoreV1Api, ns: str, name: str) -> dict | None:
    p = pod_of(core, ns, name)
    return p if p["spec"].get("nodeName") else None


def test_bind_writes_the_gpu_assignment_with_the_binding_in_one_update(
    core: client.CoreV1Api, space: Space, controller: Controller
) -> None:
    ns = space.name
    (node,) = space.add("p3.8xlarge")
    events: list[dict] = []
    rv = core.list_namespaced_pod(ns).metadata.resource_version

    def watch() -> None:
        resp = core.list_namespaced_pod(ns, watch=True, resource_version=rv, timeout_seconds=20,
                                        _preload_content=False)
        for line in resp:
            for part in line.decode().splitlines():
                ev = json.loads(part)
                events.append(ev["object"])
                if ev["object"].get("spec", {}).get("nodeName"):
                    return

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    core.create_namespaced_pod(ns, gpu_pod("train", {"nvidia.com/gpu": "2"},
                                               selector={**V100, **space.selector}))
    p = wait_for("the pod to be bound", lambda: bound(core, ns, "train"))
    t.join(timeout=20)
    ann = p["metadata"]["annotations"]
    assert p["spec"]["nodeName"] == node
    assert ann["gpufleet.io/node"] == p["spec"]["nodeName"]
    assert len(ann["gpufleet.io/gpus"].split(",")) == 2 and ann["gpufleet.io/gpu-milli"] == "1000"
    # one write: the update that sets nodeName is the one that brings the annotations, and no
    # earlier version of the pod carried them
    first_bound = next(i for i, o in enumerate(events) if o["spec"].get("nodeName"))
    assert "gpufleet.io/gpus" in events[first_bound]["metadata"].get("annotations", {})
    assert not any("gpufleet.io/node" in (o["metadata"].get("annotations") or {})
                   for o in events[:first_bound])
    wait_for("KWOK to run it", lambda: pod_of(core, ns, "train")["status"].get("phase")
             == "Running")


def test_mig_and_fractional_pods(
    core: client.CoreV1Api, space: Space, controller: Controller
) -> None:
    ns = space.name
    (a100,) = space.add("p4d.24xlarge", mig_config="all-balanced")
    (t4,) = space.add("g4dn.12xlarge")
    core.create_namespaced_pod(ns, gpu_pod("mig", {"nvidia.com/mig-3g.20gb": "1"},
                                           selector=space.selector))
    for i in range(2):
        core.create_namespaced_pod(ns, gpu_pod(f"infer-{i}", ann={"gpu-fraction": "0.5"},
                                               selector={**T4, **space.selector}))
    mig = wait_for("the MIG pod to bind", lambda: bound(core, ns, "mig"))
    assert mig["spec"]["nodeName"] == a100
    _gpu, _, rest = mig["metadata"]["annotations"]["gpufleet.io/mig"].partition(":")
    assert rest.split("@")[0] == "3g.20gb" and rest.split("@")[1] in ("0", "4")
    pods = [wait_for("fractions to bind", lambda i=i: bound(core, ns, f"infer-{i}"))
            for i in range(2)]
    anns = [p["metadata"]["annotations"] for p in pods]
    assert {p["spec"]["nodeName"] for p in pods} == {t4}
    assert anns[0]["gpufleet.io/gpus"] == anns[1]["gpufleet.io/gpus"]  # packed on one GPU
    assert anns[0]["gpufleet.io/gpu-milli"] == "500"


def test_unschedulable_condition_and_a_single_event(
    core: client.CoreV1Api, space: Space, controller: Controller
) -> None:
    ns = space.name
    space.add("g4dn.12xlarge")
    core.create_namespaced_pod(ns, gpu_pod("huge", {"nvidia.com/gpu": "16"},
                                           selector=space.selector))

    def condition() -> dict | None:
        conds = pod_of(core, ns, "huge")["status"].get("conditions") or []
        return next((c for c in conds if c["type"] == "PodScheduled"), None)

    c = wait_for("PodScheduled=False", condition)
    assert (c["status"], c["reason"]) == ("False", "Unschedulable")
    assert c["message"].startswith("0/") and "nodes are available: " in c["message"]
    n = len(core.list_node().items)
    assert c["message"].startswith(f"0/{n} nodes are available: {n - 1} node(s) didn't match "
                                   "Pod's node affinity/selector, 1 insufficient GPU")
    done = controller.cycles
    wait_for("three more cycles", lambda: controller.cycles >= done + 3, 20)

    def events_with_the_condition() -> list | None:
        evs = [e for e in core.list_namespaced_event(ns).items
               if e.involved_object.name == "huge"]
        return evs if condition()["message"] in {e.message for e in evs} else None

    evs = wait_for("the event of the pod's current condition", events_with_the_condition, 20)
    assert {(e.reason, e.type) for e in evs} == {("FailedScheduling", "Warning")}
    # one event per message, not one per cycle; the message names the node count, so another
    # test's node joining or leaving this shared lab meanwhile legitimately makes a second one
    msgs = [e.message for e in evs]
    assert len(msgs) == len(set(msgs)) and all(e.count in (None, 1) for e in evs)
    text = metrics_text(controller)
    assert 'gpufleet_pending_pods{reason="insufficient GPU"} 1.0' in text


def metrics_text(ctl: Controller) -> str:
    from prometheus_client.exposition import generate_latest

    return generate_latest(ctl.metrics.registry).decode()


def test_gang_binds_all_members_or_none(
    core: client.CoreV1Api, space: Space, controller: Controller
) -> None:
    ns = space.name
    (small,) = space.add("p3.8xlarge")
    (large,) = space.add("p3.16xlarge")

    def member(name: str, group: str, n: int) -> dict:
        return gpu_pod(name, {"nvidia.com/gpu": "4"}, selector={**V100, **space.selector},
                       labels={"scheduling.x-k8s.io/pod-group": group},
                       ann={"scheduling.x-k8s.io/min-available": str(n)})

    for i in range(4):  # 16 V100s wanted, 12 exist: none may bind
        core.create_namespaced_pod(ns, member(f"big-{i}", "big", 4))
    msg = wait_for("the gang's refusal", lambda: next(
        (c["message"] for c in pod_of(core, ns, "big-3")["status"].get("conditions") or []
         if c["type"] == "PodScheduled"), None))
    assert "pod group" in msg and "all or nothing" in msg
    done = controller.cycles
    wait_for("two more cycles", lambda: controller.cycles >= done + 2, 20)
    assert not any(bound(core, ns, f"big-{i}") for i in range(4))
    for i in range(3):  # 12 of 12: all bind
        core.create_namespaced_pod(ns, member(f"fit-{i}", "fit", 3))
    nodes = [wait_for("gang members to bind", lambda i=i: bound(core, ns, f"fit-{i}"))
             for i in range(3)]
    assert sorted(p["spec"]["nodeName"] for p in nodes) == sorted([small, large, large])
    assert not any(bound(core, ns, f"big-{i}") for i in range(4))


def test_preemption_evicts_a_job_pod_which_the_job_controller_recreates_and_we_rebind(
    api: client.ApiClient, core: client.CoreV1Api, space: Space, controller: Controller
) -> None:
    ns = space.name
    (t4,) = space.add("g4dn.12xlarge")
    sched = client.SchedulingV1Api(api)
    pc = f"{ns}-high"
    sched.create_priority_class({"metadata": {"name": pc}, "value": 1000})
    batch = client.BatchV1Api(api)
    try:
        def job(name: str, prio: str | None, delay: str) -> dict:
            tmpl = gpu_pod(name, {"nvidia.com/gpu": "4"}, selector={**T4, **space.selector},
                           restartPolicy="Never",
                           ann={"pod-complete.stage.kwok.x-k8s.io/delay": delay})
            if prio:
                tmpl["spec"]["priorityClassName"] = prio
            return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
                    "spec": {"backoffLimit": 0, "template": {"metadata": tmpl["metadata"],
                                                             "spec": tmpl["spec"]},
                             "podFailurePolicy": {"rules": [
                                 {"action": "Ignore", "onExitCodes": {
                                     "operator": "In", "values": [75]}},
                                 {"action": "Ignore", "onPodConditions": [
                                     {"type": "DisruptionTarget"}]}]}}}

        # the namespace names a queue: the disruption metrics count under it
        core.patch_namespace(ns, {"metadata": {"labels": {"gpufleet.io/queue": "research"}}})
        wait_for("the controller to see the namespace's queue",
                 lambda: controller.queues.queue_of(ns) == "research")
        batch.create_namespaced_job(ns, job("low", None, "10m"))

        def job_pods(name: str) -> list[dict]:
            resp = core.list_namespaced_pod(ns, label_selector=f"job-name={name}",
                                            _preload_content=False)
            return json.loads(resp.data)["items"]

        first = wait_for("the low job's pod to bind", lambda: [
            p for p in job_pods("low") if p["spec"].get("nodeName")])[0]
        started = wait_for("the low pod to start", lambda: next(
            (p["status"].get("startTime") for p in job_pods("low")
             if p["metadata"]["uid"] == first["metadata"]["uid"]), None), 60)
        batch.create_namespaced_job(ns, job("high", pc, "2s"))
        wait_for("the first low pod to be evicted", lambda: all(
            p["metadata"]["uid"] != first["metadata"]["uid"] for p in job_pods("low")), 60)
        # counted once, as a preemption, with the running work it held: 4 GPUs since it started
        labels = {"queue": "research", "cause": "preemption"}
        reg = controller.metrics.registry
        wait_for("the eviction to be counted", lambda: reg.get_sample_value(
            "gpufleet_pod_disruptions_total", labels) is not None, 30)
        assert reg.get_sample_value("gpufleet_pod_disruptions_total", labels) == 1.0
        gpu_s = reg.get_sample_value("gpufleet_caused_delay_gpu_seconds_total", labels)
        assert gpu_s is not None
        assert 0 < gpu_s <= 4 * (time.time() - parse_time(started) + 1)
        wait_for("the high job to finish", lambda: (batch.read_namespaced_job_status(
            "high", ns).status.succeeded or 0) == 1, 60)
        second = wait_for("the recreated low pod to bind", lambda: [
            p for p in job_pods("low") if p["spec"].get("nodeName")
            and p["metadata"]["uid"] != first["metadata"]["uid"]], 60)[0]
        assert first["spec"]["nodeName"] == second["spec"]["nodeName"] == t4
        status = batch.read_namespaced_job_status("low", ns).status
        assert not status.failed  # the eviction was ignored by the podFailurePolicy
        evs = [e for e in core.list_namespaced_event(ns).items if e.reason == "Preempted"]
        assert evs and "preempted by" in evs[0].message
    finally:
        sched.delete_priority_class(pc)


def test_a_conflicting_bind_is_a_409_not_an_error(
    api: client.ApiClient, core: client.CoreV1Api, space: Space
) -> None:
    ns = space.name
    space.add("g4dn.12xlarge", 2)
    ctl = Controller(api, default_scenario(), leader_elect=False)
    ctl.pods.relist()
    ctl.nodes.relist()
    core.create_namespaced_pod(ns, gpu_pod("contested", {"nvidia.com/gpu": "1"},
                                           selector=space.selector))
    ctl.pods.relist()
    pods = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p
            for p in ctl.pods.objects()}
    plan = plan_cycle(build_snapshot(ctl.nodes.objects(), pods.values()), ctl.policy, ctl.rng)
    key = f"{ns}/contested"
    mine = [d for d in plan.decisions if d.job_id == key]
    assert [type(d) for d in mine] == [Bind]
    other = next(n for n in space.nodes if n != mine[0].node)
    # another replica binds it first, to a node our plan did not choose
    body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "contested"},
            "target": {"apiVersion": "v1", "kind": "Node", "name": other}}
    core.create_namespaced_binding(ns, body, _preload_content=False)
    metrics = ControllerMetrics()
    out = Applier(core, metrics).apply(mine, pods)
    assert out.conflicts == [f"{ns}/contested"] and not out.errors and not out.bound
    p = pod_of(core, ns, "contested")
    assert p["spec"]["nodeName"] == other
    assert "gpufleet.io/node" not in (p["metadata"].get("annotations") or {})
    # and a bind from an up-to-date view that meets an already-bound pod: 409 too
    fresh = {f"{ns}/contested": p}
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_binding(ns, body, _preload_content=False)
    assert exc.value.status == 409
    assert Applier(core, metrics).apply(mine, fresh).conflicts == [key]
    assert metrics.conflicts._value.get() == 2



def test_a_bind_from_a_stale_view_is_a_409_and_writes_nothing(
    api: client.ApiClient, core: client.CoreV1Api, space: Space
) -> None:
    """The Binding carries the pod's resourceVersion as a precondition: a pod changed since the
    view the plan was made on is neither bound nor annotated; from a fresh view it is both."""
    ns = space.name
    space.add("p3.8xlarge")
    ctl = Controller(api, default_scenario(), leader_elect=False)
    ctl.nodes.relist()
    core.create_namespaced_pod(ns, gpu_pod("stale", {"nvidia.com/gpu": "1"},
                                           selector=space.selector))
    ctl.pods.relist()
    key = f"{ns}/stale"
    pods = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p
            for p in ctl.pods.objects()}
    plan = plan_cycle(build_snapshot(ctl.nodes.objects(), pods.values()), ctl.policy, ctl.rng)
    mine = [d for d in plan.decisions if d.job_id == key]
    assert [type(d) for d in mine] == [Bind]
    core.patch_namespaced_pod("stale", ns, {"metadata": {"labels": {"touched": "yes"}}})
    metrics = ControllerMetrics()
    out = Applier(core, metrics).apply(mine, pods)
    assert out.conflicts == [key] and not out.bound and not out.errors
    p = pod_of(core, ns, "stale")
    assert not p["spec"].get("nodeName")
    assert "gpufleet.io/node" not in (p["metadata"].get("annotations") or {})
    out = Applier(core, metrics).apply(mine, {key: p})
    assert [b.job_id for b in out.bound] == [key]
    p = pod_of(core, ns, "stale")
    ann = p["metadata"]["annotations"]
    assert p["spec"]["nodeName"] == mine[0].node == ann["gpufleet.io/node"]
    assert ann["gpufleet.io/gpus"] == ",".join(map(str, mine[0].gpus))
    assert ann["gpufleet.io/gpu-milli"] == "1000"

def test_watch_from_a_compacted_version_relists(core: client.CoreV1Api, ns: str) -> None:
    changed = threading.Event()
    inf = Informer("pods", core.list_pod_for_all_namespaces, changed, watch_timeout_s=5)
    inf.relist()
    core.create_namespaced_pod(ns, gpu_pod("late", {}))
    inf.resource_version = "1"  # long gone from the server's watch window → 410 Gone
    stop = threading.Event()
    t = threading.Thread(target=inf.run, args=(stop,), daemon=True)
    t.start()
    try:
        wait_for("the re-list to find the pod", lambda: inf.get(f"{ns}/late") is not None, 20)
        assert inf.relists >= 2 and int(inf.resource_version) > 1
    finally:
        stop.set()
        t.join(timeout=10)


def test_metrics_health_and_readiness_endpoints(api: client.ApiClient) -> None:
    ctl = Controller(api, default_scenario(), leader_elect=False)
    port = ctl.serve_http("127.0.0.1", 0)
    base = f"http://127.0.0.1:{port}"
    try:
        with pytest.raises(urllib.error.HTTPError) as exc:
            urllib.request.urlopen(base + "/readyz", timeout=5)
        assert exc.value.code == 503  # not listed yet
        ctl.start()
        wait_for("readiness", ctl.ready)
        assert urllib.request.urlopen(base + "/readyz", timeout=5).status == 200
        assert urllib.request.urlopen(base + "/healthz", timeout=5).status == 200
        text = urllib.request.urlopen(base + "/metrics", timeout=5).read().decode()
        assert 'gpufleet_informer_relists_total{resource="pods"} 1.0' in text
        assert "gpufleet_pod_scheduling_duration_seconds_bucket" in text
    finally:
        ctl.stop()
