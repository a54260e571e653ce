"""Gang room in the live driver, against the real API server of the lab (kube-apiserver +
controller-manager + KWOK): a pod group that does not fit evicts the Job pods that can move into
the holes elsewhere, takes the nodes they leave (reserved for it: the Job controller's
replacements go elsewhere) — the simulator's ``tests/sim/test_sim_gang_room.py`` preempt case,
through the scheduler's real cycle, evictions and the Job controller.

Four p3.8xlarge KWOK nodes (4 V100 each) placed by ``spread``: two bare 2-GPU pods (a bare pod
cannot move) land on two nodes, a Job's four 1-GPU pods two by two on the other two. Eight GPUs
are free, no node is whole. A 2 × 4-GPU pod group arrives: no cloud (no scale-up), no pod
states a duration (its room is never expected to free by itself), so evicting the four Job
pods (their checkpoint write and restart) is the only finite price.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from live_objects import clean_space, gpu_pod
from live_wait import wait_for

from gpufleet.config import default_scenario
from gpufleet.k8s.schedule.controller import Controller

pytestmark = pytest.mark.live

V100 = {"nvidia.com/gpu.product": "Tesla-V100-SXM2-16GB"}
ZONE = "topology.kubernetes.io/zone"


def pod(name: str, gpus: int, selector: dict, *, ann: dict | None = None,
        labels: dict | None = None, **spec: Any) -> dict:
    """``live_objects.gpu_pod`` with annotations, labels and more spec."""
    out = gpu_pod(name, gpus, selector)
    out["metadata"].update(annotations=ann or {}, labels=labels or {})
    out["spec"].update(spec)
    return out


@pytest.fixture()
def space(lab: Any) -> Iterator[tuple[str, list[str], client.CoreV1Api]]:
    core = client.CoreV1Api(lab.api)
    ns = lab.namespace()
    nodes = lab.add_instance_nodes("p3.8xlarge", 4, zone=ns, prefix=ns)
    yield ns, nodes, core
    clean_space(lab.api, ns, nodes)


@pytest.fixture()
def controller(lab: Any) -> Iterator[Controller]:
    sc = default_scenario().model_copy(update={"placement": "spread"})
    ctl = Controller(lab.api, sc, leader_elect=False, resync_s=0.5)
    ctl.start()
    wait_for("informers to sync", ctl.ready)
    yield ctl
    ctl.stop()


def pods(core: client.CoreV1Api, ns: str, selector: str = "") -> list[dict]:
    resp = core.list_namespaced_pod(ns, label_selector=selector, _preload_content=False)
    return [p for p in json.loads(resp.data)["items"]
            if not (p["metadata"].get("deletionTimestamp"))]


def node_of(core: client.CoreV1Api, ns: str, name: str) -> str:
    resp = core.read_namespaced_pod(name, ns, _preload_content=False)
    return json.loads(resp.data)["spec"].get("nodeName") or ""


def test_a_pod_group_evicts_movable_pods_into_the_holes_elsewhere(
    lab: Any, space: tuple[str, list[str], client.CoreV1Api], controller: Controller
) -> None:
    ns, _nodes, core = space
    sel = {**V100, ZONE: ns}
    for i in range(2):
        core.create_namespaced_pod(ns, pod(f"fixed-{i}", 2, sel))
    fixed = {wait_for("a bare pod to bind", lambda i=i: node_of(core, ns, f"fixed-{i}"))
             for i in range(2)}
    assert len(fixed) == 2  # spread: one per node
    tmpl = pod("small", 1, sel, restartPolicy="Never",
                   ann={"pod-complete.stage.kwok.x-k8s.io/delay": "10m"})
    batch = client.BatchV1Api(lab.api)
    batch.create_namespaced_job(ns, {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "small"},
        "spec": {"parallelism": 4, "completions": 4, "backoffLimit": 0,
                 "template": {"metadata": tmpl["metadata"], "spec": tmpl["spec"]},
                 "podFailurePolicy": {"rules": [
                     {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [75]}},
                     {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}}})
    first = wait_for("the Job's four pods to bind", lambda: (
        lambda ps: ps if len(ps) == 4 and all(p["spec"].get("nodeName") for p in ps) else None)(
            pods(core, ns, "job-name=small")), 60)
    holes = {p["spec"]["nodeName"] for p in first}
    assert holes.isdisjoint(fixed) and len(holes) == 2  # two by two on the other two nodes

    for i in range(2):
        core.create_namespaced_pod(ns, pod(
            f"gang-{i}", 4, sel, labels={"scheduling.x-k8s.io/pod-group": "gang"},
            ann={"scheduling.x-k8s.io/min-available": "2"}))
    gang = {wait_for("the gang to bind", lambda i=i: node_of(core, ns, f"gang-{i}"), 90)
            for i in range(2)}
    assert gang == holes  # the nodes its victims left
    old = {p["metadata"]["uid"] for p in first}
    again = wait_for("the Job's replacements to bind", lambda: (
        lambda ps: ps if len(ps) == 4 and all(p["spec"].get("nodeName") for p in ps) else None)(
            [p for p in pods(core, ns, "job-name=small") if p["metadata"]["uid"] not in old]), 90)
    assert {p["spec"]["nodeName"] for p in again} == fixed  # into the holes next to fixed-*
    evs = [e for e in core.list_namespaced_event(ns).items if e.reason == "Preempted"]
    assert len(evs) >= 4 and all("gang room" in e.message for e in evs)
    reg = controller.metrics.registry
    assert reg.get_sample_value("gpufleet_gang_room_choices_total",
                                {"choice": "preempt"}) == 1.0
    assert not (batch.read_namespaced_job_status("small", ns).status.failed or 0)
