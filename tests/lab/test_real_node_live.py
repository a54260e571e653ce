"""The chart installed by ``gpufleet lab up --real-node`` runs: its pods on a real kubelet.

A lab of its own (so nothing here can disturb the shared lab, nor it this): the KWOK GPU fleet
plus a real node (containerd 2.x and the kubelet built by deploy/testcluster/build.sh, runc), the
image ``make image`` builds imported into it, and the chart installed with two controller replicas
and leader election. Then, in order (the tests share the release, as an operator's day would):

1. the controller leads as a pod on the real node and serves /healthz and /metrics; the agent
   DaemonSet's pod stays Running there, not ready (no metadata service off-cloud);
2. the controller binds the examples (examples/) onto the KWOK GPU nodes; ``kubectl delete pod``
   of the leader: the other replica takes the Lease and binds a new pod;
3. ``helm uninstall`` leaves nothing of the release, in its namespace or cluster-wide.

Needs root, runc, umoci, gcc, containernetworking-plugins and the image tools
(``make image-deps``), and containerd built by deploy/testcluster/build.sh; skips without them,
except under CI where it fails.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from live_skip import need_real_node_and_image
from live_wait import wait_for
from overcommit import assert_no_overcommit

from gpufleet.k8s.translate.node_objects import KWOK_ANNOTATION
from gpufleet.lab import release
from gpufleet.lab.binaries import CONTAINERD_VERSION
from gpufleet.lab.cluster import LabOptions, down, up
from gpufleet.lab.real_node import NODE_NAME, running_tasks
from gpufleet.lab.session import LabSession

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
NS = release.NAMESPACE


@pytest.fixture(scope="module")
def real_lab(lab_binaries: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabSession]:
    need_real_node_and_image()
    # an archive built already (e.g. by `make image` at another revision), else this checkout's
    prebuilt = os.environ.get("GPUFLEET_IMAGE_ARCHIVE")
    directory = tmp_path_factory.mktemp("real-node-lab")
    t0 = time.monotonic()
    try:
        info = up(LabOptions(directory=directory, controller=False, real_node=True,
                             image=Path(prebuilt) if prebuilt else None))
    except BaseException:
        down(directory)
        raise
    print(f"lab with a real node and the chart up in {time.monotonic() - t0:.0f} s")
    try:
        yield LabSession(info)
    finally:
        down(directory)


def _pods(lab: LabSession, selector: str, namespace: str = NS) -> list[Any]:
    return list(lab.core.list_namespaced_pod(namespace, label_selector=selector).items)


def _ready(pod: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or ())


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _port(pod: Any) -> int:
    return int(pod.spec.containers[0].ports[0].container_port)


def _state(lab: LabSession) -> str:
    rows = [f"{p.metadata.namespace}/{p.metadata.name} {p.spec.node_name} {p.status.phase}"
            for p in lab.core.list_pod_for_all_namespaces().items]
    return "\n".join(rows)


def test_the_controller_leads_and_the_agent_runs_as_pods_on_the_real_node(
        real_lab: LabSession) -> None:
    lab = real_lab
    node = lab.core.read_node(NODE_NAME)
    assert KWOK_ANNOTATION not in (node.metadata.annotations or {})  # a kubelet's node
    # the containerd built from its Go module (which applies CDI), not a distribution's
    assert node.status.node_info.container_runtime_version.startswith(
        f"containerd://{CONTAINERD_VERSION.removeprefix('v')}"), node.status.node_info
    assert [t.key for t in node.spec.taints or ()] == ["gpufleet.io/system-only"]
    # the kubelet took the lab's settings: no eviction threshold on the host's shared disk
    # (a host disk past 85 % would otherwise taint the node and strand the Deployment)
    configz = json.loads(lab.core.connect_get_node_proxy_with_path(
        NODE_NAME, "configz", _preload_content=False).data)
    assert set(configz["kubeletconfig"]["evictionHard"].values()) == {"0%"}, configz
    assert configz["kubeletconfig"]["imageGCHighThresholdPercent"] == 100

    leader = release.lease_holder(lab.api)
    pods = {p.metadata.name: p for p in _pods(lab, release.CONTROLLER_SELECTOR)}
    assert leader in pods and _ready(pods[leader]), _state(lab)
    assert pods[leader].spec.node_name == NODE_NAME and pods[leader].spec.host_network
    port = _port(pods[leader])
    assert _get(f"http://127.0.0.1:{port}/healthz")[0] == 200
    code, metrics = _get(f"http://127.0.0.1:{port}/metrics")
    assert code == 200 and "gpufleet_leader 1.0" in metrics
    # the second replica: Pending, the host port is the leader's on the only node it may use
    others = [p for n, p in pods.items() if n != leader]
    assert len(others) == 1 and others[0].status.phase == "Pending", _state(lab)

    (agent,) = wait_for("the agent pod Running on the real node",
                        lambda: [p for p in _pods(lab, release.AGENT_SELECTOR)
                                 if p.status.phase == "Running"] or None, 120)
    assert agent.spec.node_name == NODE_NAME
    agent_port = _port(agent)
    code, text = wait_for("the agent's metrics",
                          lambda: (r := _get(f"http://127.0.0.1:{agent_port}/metrics"))[0] == 200
                          and r, 60)
    assert "gpufleet_agent_metadata_reachable 0.0" in text
    assert _get(f"http://127.0.0.1:{agent_port}/readyz")[0] == 503
    time.sleep(12)  # past the liveness probe's period and a few retries: still up, not restarted
    agent = lab.core.read_namespaced_pod(agent.metadata.name, NS)
    (status,) = agent.status.container_statuses
    assert agent.status.phase == "Running" and status.state.running is not None
    assert status.restart_count == 0 and not status.ready
    log = lab.core.read_namespaced_pod_log(agent.metadata.name, NS)
    assert log.count("has no providerID") == 1, log


def _example_pods(lab: LabSession, ns: str) -> list[Any]:
    return list(lab.core.list_namespaced_pod(ns).items)


def test_the_controller_binds_the_examples_and_a_replica_takes_over_from_its_leader(
        real_lab: LabSession) -> None:
    lab = real_lab
    ns = lab.namespace("examples")
    lab.kubectl("apply", "-n", ns, "-f", str(EXAMPLES))
    gpu_nodes = {n.metadata.name for n in lab.core.list_node().items
                 if KWOK_ANNOTATION in (n.metadata.annotations or {})}

    def all_bound() -> list[Any] | None:
        pods = _example_pods(lab, ns)
        # whole-GPU job 1, fractional 1, MIG 1, gang 2, preemptible 1
        return pods if len(pods) == 6 and all(p.spec.node_name for p in pods) else None

    try:
        pods = wait_for("the examples bound", all_bound, 120)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_state(lab)}") from None
    assert {p.spec.node_name for p in pods} <= gpu_nodes
    assert_no_overcommit(lab.core)

    leader = release.lease_holder(lab.api)
    lease_api = client.CoordinationV1Api(lab.api)
    before = lease_api.read_namespaced_lease("gpufleet-scheduler", NS).spec.lease_transitions or 0
    lab.kubectl("delete", "pod", "-n", NS, leader, "--wait=false")
    new_leader = wait_for(
        "another replica holding the Lease",
        lambda: (h := release.lease_holder(lab.api)) not in (None, leader)
        and any(p.metadata.name == h and _ready(p)
                for p in _pods(lab, release.CONTROLLER_SELECTOR)) and h, 180)
    lease = lease_api.read_namespaced_lease("gpufleet-scheduler", NS)
    assert (lease.spec.lease_transitions or 0) > before
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "after-takeover"},
           "spec": {"schedulerName": "gpufleet", "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                    "resources": {"limits": {"cpu": "1", "memory": "1Gi",
                                                             "nvidia.com/gpu": "1"}}}]}}
    lab.core.create_namespaced_pod(ns, pod)
    try:
        node = wait_for(f"the new leader {new_leader} to bind a new pod",
                        lambda: lab.core.read_namespaced_pod("after-takeover", ns).spec.node_name,
                        120)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_state(lab)}") from None
    assert node in gpu_nodes
    assert_no_overcommit(lab.core)
    lab.kubectl("delete", "namespace", ns, "--wait=false")


def _namespaced_leftovers(lab: LabSession) -> list[str]:
    kinds = lab.kubectl("api-resources", "--verbs=list", "--namespaced", "-o", "name").stdout
    got = lab.kubectl("get", ",".join(kinds.split()), "-n", NS, "-o", "json",
                      "--ignore-not-found").stdout
    items = json.loads(got)["items"] if got.strip() else []
    # what the cluster puts in every namespace (and Events, which expire), not the release's
    kept = {("ConfigMap", "kube-root-ca.crt"), ("ServiceAccount", "default")}
    return [f"{i['kind']}/{i['metadata']['name']}" for i in items
            if (i["kind"], i["metadata"]["name"]) not in kept and i["kind"] != "Event"]


def _cluster_leftovers(lab: LabSession) -> list[str]:
    kinds = lab.kubectl("api-resources", "--verbs=list", "--namespaced=false", "-o",
                        "name").stdout
    got = lab.kubectl("get", ",".join(kinds.split()), "-l",
                      f"app.kubernetes.io/instance={release.RELEASE}", "-o", "json").stdout
    return [f"{i['kind']}/{i['metadata']['name']}" for i in json.loads(got)["items"]]


def test_helm_uninstall_leaves_nothing_behind(real_lab: LabSession) -> None:
    lab = real_lab
    assert _cluster_leftovers(lab)  # the check sees the release's ClusterRoles etc. while it is in
    release.uninstall(lab.kubeconfig)
    try:
        wait_for("the release's objects gone",
                 lambda: not (_namespaced_leftovers(lab) or _cluster_leftovers(lab)), 120)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {_namespaced_leftovers(lab)} "
                             f"{_cluster_leftovers(lab)}") from None
    # and on the node: the kubelet has stopped every container the release's pods ran
    wait_for("no task left in the real node's containerd",
             lambda: not running_tasks(lab.directory), 60)
