"""Live requeue priority on the lab: the pod that replaces an evicted checkpointing Job's pod
goes ahead of new work of its priority, as a requeued job does in the simulator.

One 4-GPU node. A checkpointing Indexed Job (``podFailurePolicy`` ignores exit 75 and
``DisruptionTarget``, ``backoffLimitPerIndex``) runs there; a plain pod of the same priority
waits for the node; a high-priority Job preempts the checkpointing pod and runs 30 s (the Job
controller recreates the evicted index after its ~10 s pod-failure backoff).
When it finishes, the waiting pod is the *older* of the two pending pods, yet the Job's
replacement pod — requeued work (``k8s.translate.pods.requeued_keys``) — is bound first.
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
from gpufleet.k8s.translate import names

pytestmark = pytest.mark.live

T4 = {names.GPU_PRODUCT: "Tesla-T4"}


@pytest.fixture()
def space(lab: Any) -> Iterator[tuple[Any, str, list[str]]]:
    """A namespace and a 4-T4 node in a zone of the same name (the lab is shared), removed
    at the end with everything in them."""
    ns = lab.namespace()
    nodes = lab.add_instance_nodes("g4dn.12xlarge", 1, zone=ns, prefix=ns)
    yield lab, ns, nodes
    clean_space(lab.api, ns, nodes)


@pytest.fixture()
def controller(lab: Any) -> Iterator[Controller]:
    ctl = Controller(lab.api, default_scenario(), leader_elect=False, resync_s=0.5)
    ctl.start()
    wait_for("informers to sync", ctl.ready)
    yield ctl
    ctl.stop()


def pod_json(core: client.CoreV1Api, ns: str, name: str) -> dict:
    return json.loads(core.read_namespaced_pod(name, ns, _preload_content=False).data)


def four_gpu_pod(name: str, ns: str, **spec: Any) -> dict:
    p = gpu_pod(name, 4, {**T4, names.ZONE: ns})
    p["spec"].update(spec)
    return p


def checkpointing_job(name: str, ns: str, delay: str, priority_class: str = "") -> dict:
    tmpl = four_gpu_pod(name, ns, restartPolicy="Never")
    tmpl["metadata"]["annotations"] = {"pod-complete.stage.kwok.x-k8s.io/delay": delay}
    if priority_class:
        tmpl["spec"]["priorityClassName"] = priority_class
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"completions": 1, "parallelism": 1, "completionMode": "Indexed",
                     "backoffLimitPerIndex": 1, "maxFailedIndexes": 0,
                     "template": {"metadata": tmpl["metadata"], "spec": tmpl["spec"]},
                     "podFailurePolicy": {"rules": [
                         {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [75]}},
                         {"action": "Ignore",
                          "onPodConditions": [{"type": "DisruptionTarget"}]}]}}}


def test_an_evicted_checkpointing_jobs_replacement_goes_ahead_of_older_new_work(
    space: tuple[Any, str, list[str]], controller: Controller
) -> None:
    lab, ns, (node,) = space
    api = lab.api
    core = client.CoreV1Api(api)
    sched = client.SchedulingV1Api(api)
    pc = f"{ns}-high"
    sched.create_priority_class({"metadata": {"name": pc}, "value": 1000})
    batch = client.BatchV1Api(api)
    try:
        batch.create_namespaced_job(ns, checkpointing_job("ckpt", ns, "10m"))

        def job_pods(name: str) -> list[dict]:
            resp = core.list_namespaced_pod(ns, label_selector=f"job-name={name}",
                                            _preload_content=False)
            return json.loads(resp.data)["items"]

        first = wait_for("the checkpointing pod to bind", lambda: [
            p for p in job_pods("ckpt") if p["spec"].get("nodeName")])[0]
        # new work of the same priority, waiting for the node (older than the replacement)
        core.create_namespaced_pod(ns, four_gpu_pod("waiting", ns))
        batch.create_namespaced_job(ns, checkpointing_job("hi", ns, "30s", pc))
        replacement = wait_for("the Job's replacement pod", lambda: [
            p for p in job_pods("ckpt") if p["metadata"]["uid"] != first["metadata"]["uid"]
            and not p["metadata"].get("deletionTimestamp")], 60)[0]
        # (the Job controller recreates a failed index after its pod-failure backoff, ~10 s)
        assert not batch.read_namespaced_job_status("hi", ns).status.succeeded, \
            "the high job finished before the replacement existed: nothing to order"
        wait_for("the high job to finish", lambda: (batch.read_namespaced_job_status(
            "hi", ns).status.succeeded or 0) == 1, 60)
        rep_name = replacement["metadata"]["name"]
        got = wait_for("the replacement to bind", lambda: (
            p if (p := pod_json(core, ns, rep_name))["spec"].get("nodeName") else None), 60)
        waiting = pod_json(core, ns, "waiting")
        assert waiting["metadata"]["creationTimestamp"] <= \
            replacement["metadata"]["creationTimestamp"]
        assert not waiting["spec"].get("nodeName"), "the older new pod went first"
        assert got["spec"]["nodeName"] == first["spec"]["nodeName"] == node
        # the Job controller counted the ignored eviction on the replacement, or the evicted
        # predecessor was still listed: one of the two signals requeued_keys reads
        ann = replacement["metadata"].get("annotations") or {}
        assert ann.get(names.JOB_COMPLETION_INDEX) == "0"
    finally:
        sched.delete_priority_class(pc)
