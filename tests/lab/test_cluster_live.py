"""The lab against its real processes: API server, controller-manager, kine, KWOK.

One shared cluster (the session ``lab`` fixture); each test works in its own namespace.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client, watch

from gpufleet.catalog.gpus import default_gpu_catalog
from gpufleet.k8s.translate.node_objects import KWOK_ANNOTATION, LABEL_PRODUCT
from gpufleet.lab.fleet import DEFAULT_FLEET
from gpufleet.lab.session import LabSession

pytestmark = pytest.mark.live


def wait_for(what: str, fn: Callable[[], Any], timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.2)


def bind(lab: LabSession, ns: str, pod: str, node: str) -> None:
    body = client.V1Binding(
        metadata=client.V1ObjectMeta(name=pod),
        target=client.V1ObjectReference(api_version="v1", kind="Node", name=node),
    )
    # The client cannot deserialise the Status the binding subresource answers with.
    lab.core.create_namespaced_binding(ns, body, _preload_content=False)


def job_pods(lab: LabSession, ns: str, job: str) -> list[Any]:
    return lab.core.list_namespaced_pod(ns, label_selector=f"job-name={job}").items


def gpu_job(name: str, annotations: dict[str, str], **spec: Any) -> client.V1Job:
    return client.V1Job(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1JobSpec(
            backoff_limit=0,
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(annotations=annotations),
                spec=client.V1PodSpec(
                    scheduler_name="gpufleet",
                    restart_policy="Never",
                    termination_grace_period_seconds=5,
                    containers=[
                        client.V1Container(
                            name="main",
                            image="busybox",
                            resources=client.V1ResourceRequirements(limits={"nvidia.com/gpu": "1"}),
                        )
                    ],
                ),
            ),
            **spec,
        ),
    )


def test_default_fleet_ready_with_gpu_feature_discovery_labels(lab: LabSession) -> None:
    nodes = {n.metadata.name: n for n in lab.core.list_node().items}
    catalog = default_gpu_catalog()
    for name, _itype, zone, capacity_type, _mig in DEFAULT_FLEET:
        node = nodes[name]
        ready = [c for c in node.status.conditions if c.type == "Ready"]
        assert ready and ready[0].status == "True", name
        labels = node.metadata.labels
        assert node.metadata.annotations[KWOK_ANNOTATION] == "fake"
        assert labels["topology.kubernetes.io/zone"] == zone
        assert labels["karpenter.sh/capacity-type"] == capacity_type
        assert catalog.resolve(labels[LABEL_PRODUCT]) is not None
        assert int(labels["nvidia.com/gpu.count"]) > 0
        assert node.spec.taints is None
    a100 = nodes["a100-mig-0"]
    assert a100.metadata.labels["nvidia.com/mig.strategy"] == "mixed"
    assert a100.metadata.labels["nvidia.com/mig.config"] == "all-balanced"
    # KWOK kept the capacity the node was created with (not its own defaults).
    assert a100.status.allocatable["nvidia.com/mig-1g.5gb"] == "16"
    assert a100.status.allocatable["nvidia.com/gpu"] == "0"
    assert nodes["t4-0"].status.allocatable["nvidia.com/gpu"] == "4"
    assert nodes["v100-1"].status.capacity["cpu"] == "64"


def test_added_nodes_become_ready(lab: LabSession) -> None:
    names = lab.add_instance_nodes("g5.12xlarge", 2, capacity_type="spot")
    for name in names:
        node = lab.core.read_node(name)
        assert node.metadata.labels["node.kubernetes.io/instance-type"] == "g5.12xlarge"
        assert node.status.allocatable["nvidia.com/gpu"] == "4"
        assert any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)


def test_bound_job_pod_runs_then_succeeds_and_the_job_completes(lab: LabSession) -> None:
    ns = lab.namespace("job")
    lab.batch.create_namespaced_job(
        ns, gpu_job("done", {"pod-complete.stage.kwok.x-k8s.io/delay": "2s"})
    )
    pod = wait_for("the Job controller's pod", lambda: job_pods(lab, ns, "done"))[0]
    # schedulerName gpufleet and no gpufleet controller running: nothing binds it but us.
    assert pod.spec.node_name is None and pod.status.phase == "Pending"
    bind(lab, ns, pod.metadata.name, "t4-0")
    name = pod.metadata.name
    running = wait_for(
        "Running",
        lambda: (p := lab.core.read_namespaced_pod(name, ns)).status.phase == "Running" and p,
    )
    assert running.spec.node_name == "t4-0"
    assert running.status.pod_ip
    wait_for(
        "Succeeded",
        lambda: lab.core.read_namespaced_pod(name, ns).status.phase == "Succeeded",
    )
    job = wait_for(
        "the Job controller to mark the Job complete",
        lambda: (j := lab.batch.read_namespaced_job("done", ns)).status.succeeded == 1 and j,
    )
    assert any(c.type == "Complete" and c.status == "True" for c in job.status.conditions)


def test_job_pod_without_complete_delay_keeps_running(lab: LabSession) -> None:
    ns = lab.namespace("long")
    lab.batch.create_namespaced_job(ns, gpu_job("long", {}))
    pod = wait_for("the pod", lambda: job_pods(lab, ns, "long"))[0]
    bind(lab, ns, pod.metadata.name, "v100-1")
    wait_for(
        "Running",
        lambda: lab.core.read_namespaced_pod(pod.metadata.name, ns).status.phase == "Running",
    )
    time.sleep(3)  # well past every default stage delay
    assert lab.core.read_namespaced_pod(pod.metadata.name, ns).status.phase == "Running"


def test_evicted_job_pod_exits_75_and_the_job_controller_replaces_it(lab: LabSession) -> None:
    """Eviction → DisruptionTarget + exit 75 (KWOK's terminate stage) → podFailurePolicy Ignore
    → the real Job controller creates a replacement without counting a failure."""
    ns = lab.namespace("evict")
    policy = client.V1PodFailurePolicy(
        rules=[
            client.V1PodFailurePolicyRule(
                action="Ignore",
                on_exit_codes=client.V1PodFailurePolicyOnExitCodesRequirement(
                    operator="In", values=[75]
                ),
            ),
            client.V1PodFailurePolicyRule(
                action="Ignore",
                on_pod_conditions=[
                    client.V1PodFailurePolicyOnPodConditionsPattern(
                        type="DisruptionTarget", status="True"
                    )
                ],
            ),
        ]
    )
    lab.batch.create_namespaced_job(
        ns,
        gpu_job("pre", {"lab.gpufleet.io/exit-code-on-sigterm": "75"}, pod_failure_policy=policy),
    )
    pod = wait_for("the pod", lambda: job_pods(lab, ns, "pre"))[0]
    name = pod.metadata.name
    bind(lab, ns, name, "v100-0")
    wait_for("Running", lambda: lab.core.read_namespaced_pod(name, ns).status.phase == "Running")

    w = watch.Watch()
    stream = w.stream(
        lab.core.list_namespaced_pod,
        ns,
        field_selector=f"metadata.name={name}",
        timeout_seconds=30,
    )
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=ns))
    lab.core.create_namespaced_pod_eviction(name, ns, eviction, _preload_content=False)
    last_failed = None
    for event in stream:
        obj = event["object"]
        if obj.status.phase == "Failed":
            last_failed = obj
        if event["type"] == "DELETED":
            w.stop()
    assert last_failed is not None, "the evicted pod never reached phase Failed"
    conds = {c.type: c.status for c in last_failed.status.conditions}
    assert conds.get("DisruptionTarget") == "True"
    codes = [cs.state.terminated.exit_code for cs in last_failed.status.container_statuses]
    assert codes == [75]

    replacement = wait_for(
        "the Job controller's replacement pod",
        lambda: [p for p in job_pods(lab, ns, "pre") if p.metadata.name != name],
        timeout_s=60,
    )
    assert replacement[0].spec.node_name is None  # waiting for a scheduler again
    job = lab.batch.read_namespaced_job("pre", ns)
    assert not job.status.failed  # ignored by the podFailurePolicy
    assert not any(c.type == "Failed" for c in job.status.conditions or [])
