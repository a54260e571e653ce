"""Draining an interrupted Node on the real API server, and the recovery-time histogram.

A Job's pod runs on a KWOK node; the node is marked (as the agent or the SQS path would); a
controller started *after* the mark (so it knows only what the API says) cordons the node, evicts
the pod, the Job controller recreates it (the podFailurePolicy ignores the disruption), gpufleet
binds the replacement on the other node, KWOK runs it, the emptied node is deleted, and the
recovery histogram has one observation: notice → replacement Running.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from live_objects import absent
from live_wait import wait_for

from gpufleet.cloud.provider import InterruptionKind
from gpufleet.config import default_scenario
from gpufleet.k8s.disruption.interruption import InterruptionMark, mark_node
from gpufleet.k8s.schedule.controller import Controller

pytestmark = pytest.mark.live
ZONE = "topology.kubernetes.io/zone"



def job(name: str, zone: str) -> dict:
    spec = {"schedulerName": "gpufleet", "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0, "nodeSelector": {ZONE: zone},
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"limits": {"cpu": "1", "memory": "1Gi",
                                                     "nvidia.com/gpu": "4"}}}]}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"backoffLimit": 0,
                     "template": {"metadata": {"annotations": {
                         "pod-complete.stage.kwok.x-k8s.io/delay": "10m"}}, "spec": spec},
                     "podFailurePolicy": {"rules": [
                         {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [75]}},
                         {"action": "Ignore",
                          "onPodConditions": [{"type": "DisruptionTarget"}]}]}}}


def start(api: client.ApiClient) -> Controller:
    ctl = Controller(api, default_scenario(), leader_elect=False, resync_s=0.5)
    ctl.start()
    wait_for("informers to sync", ctl.ready)
    return ctl


def test_a_marked_node_is_drained_its_job_pod_replaced_and_the_recovery_timed(lab: Any) -> None:
    api, core, batch = lab.api, lab.core, lab.batch
    ns = lab.namespace("drain")
    nodes = lab.add_instance_nodes("g4dn.12xlarge", 2, zone=ns, prefix=ns,
                                   capacity_type="spot")
    ctl = start(api)
    try:
        batch.create_namespaced_job(ns, job("train", ns))

        def job_pods() -> list[dict]:
            resp = core.list_namespaced_pod(ns, label_selector="job-name=train",
                                            _preload_content=False)
            return json.loads(resp.data)["items"]

        first = wait_for("the job's pod to run", lambda: [
            p for p in job_pods() if p["status"].get("phase") == "Running"])[0]
        ctl.stop()  # the next controller knows the mark only from the API
        victim = first["spec"]["nodeName"]
        (other,) = [n for n in nodes if n != victim]
        noticed = time.time()
        mark = InterruptionMark(InterruptionKind.SPOT_INTERRUPTION, noticed + 120, noticed,
                                "kwok")
        assert mark_node(core, victim, mark) is True

        ctl = start(api)
        second = wait_for("the replacement to run on the other node", lambda: [
            p for p in job_pods() if p["metadata"]["uid"] != first["metadata"]["uid"]
            and p["status"].get("phase") == "Running"])[0]
        assert second["spec"]["nodeName"] == other

        wait_for("the drained node to be handed to termination (deleted)",
                 lambda: absent(lambda: core.read_node(victim)))
        status = batch.read_namespaced_job_status("train", ns).status
        assert not status.failed  # the eviction was a disruption the Job ignores
        reg = ctl.metrics.registry
        assert reg.get_sample_value("gpufleet_interruption_recovery_seconds_count") == 1
        took = reg.get_sample_value("gpufleet_interruption_recovery_seconds_sum")
        assert 0 <= took <= time.time() - noticed
        assert reg.get_sample_value("gpufleet_interrupted_nodes_drained_total") == 1
        assert reg.get_sample_value("gpufleet_evictions_total") == 1  # once, not per cycle
        evs = [e for e in core.list_namespaced_event(ns).items if e.reason == "Preempted"]
        assert len(evs) == 1 and f"node {victim} interrupted" in evs[0].message
    finally:
        ctl.stop()
        batch.delete_namespaced_job("train", ns, propagation_policy="Background")
        core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
        for n in nodes:
            try:
                core.delete_node(n)
            except ApiException as exc:
                if exc.status != 404:
                    raise
        core.delete_namespace(ns)
