"""The whole controller with the kwok cloud on the real API server: consolidation and MIG launches.

Each test runs a ``Controller`` whose scenario names ``cloud: kwok`` with its own namespace (the
launch records, the kwok provider's pending launches), and pins its pods to gpufleet-launched
Nodes (``nodeSelector gpufleet.io/managed=true``) so that the shared lab's fleet does not count:
for these pods the fleet starts empty, as a lab brought up with ``--nodes 0``.

* **Consolidation.** Two 8-GPU nodes run one long 1-GPU Job pod each; after
  ``scale_down_unneeded_s`` under-used and the validation period, one node is marked and cordoned,
  the drain evicts its pod (the Job's ``podFailurePolicy`` ignores the disruption), the Job
  controller makes a new pod, gpufleet binds it on the other node, and the emptied node's
  instance is deleted through the provider with its Node.
* **Restart.** A Node a killed controller had marked and cordoned is finished by the next one
  from the API alone: drained, its pod recreated elsewhere, its instance and Node deleted.
* **MIG.** A pending pod asking ``nvidia.com/mig-1g.5gb`` makes the controller launch a MIG
  node (``Launch.mig_config``); the kwok provider creates it with the device plugin's MIG
  resources and GFD's / mig-manager's labels, and gpufleet binds the pod with its MIG slot.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from live_wait import wait_for

from gpufleet.catalog.instances import default_instance_catalog
from gpufleet.cloud.kwok import KwokProvider
from gpufleet.cloud.provider import TAG_MANAGED, TAG_TOKEN, Instance, LaunchRequest
from gpufleet.config import Scenario
from gpufleet.decisions import CapacityType
from gpufleet.k8s.capacity.launch_records import new_token
from gpufleet.k8s.disruption.consolidation_mark import ConsolidationMark
from gpufleet.k8s.schedule.controller import Controller
from gpufleet.k8s.translate.names import ANN_CONSOLIDATION, ANN_MIG

pytestmark = pytest.mark.live

CAT = default_instance_catalog()
P16 = CAT["p3.16xlarge"]  # 8 V100
A100 = CAT["p4d.24xlarge"]  # 8 A100-40GB, MIG-capable
MANAGED = {TAG_MANAGED: "true"}


def scenario(ns: str, types: tuple[str, ...], **kw: Any) -> Scenario:
    return Scenario(name="capacity-live", spot=False, instance_types=types,
                    cloud={"name": "kwok", "kwok": {"namespace": ns}}, **kw)


@pytest.fixture
def cloud_lab(lab: Any) -> Iterator[Any]:
    """A fresh namespace and, at the end, every gpufleet instance gone (controller stopped
    first by the test) — so the next test's fleet of managed Nodes starts empty again."""
    ns = lab.namespace("cap")
    state: dict[str, Any] = {"ns": ns, "controllers": []}
    yield state
    for ctl in state["controllers"]:
        ctl.stop()
    kw = KwokProvider(lab.core, {t.name: t for t in (P16, A100)}, None, namespace=ns)
    for inst in kw.list():
        kw.delete(inst.instance_id)
    lab.core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
    lab.core.delete_namespace(ns)


def start(api: client.ApiClient, sc: Scenario, ns: str, state: dict[str, Any]) -> Controller:
    ctl = Controller(api, sc, leader_elect=False, resync_s=0.5, capacity_namespace=ns)
    state["controllers"].append(ctl)
    ctl.start()
    wait_for("informers to sync", ctl.ready)
    return ctl


def job(name: str, limits: dict[str, str]) -> dict:
    spec = {"schedulerName": "gpufleet", "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0, "nodeSelector": MANAGED,
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"limits": {"cpu": "1", "memory": "1Gi", **limits}}}]}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"backoffLimit": 0,
                     "template": {"metadata": {"annotations": {
                         "pod-complete.stage.kwok.x-k8s.io/delay": "30m"}}, "spec": spec},
                     "podFailurePolicy": {"rules": [
                         {"action": "Ignore",
                          "onPodConditions": [{"type": "DisruptionTarget"}]}]}}}


def job_pods(core: client.CoreV1Api, ns: str, name: str) -> list[dict]:
    resp = core.list_namespaced_pod(ns, label_selector=f"job-name={name}",
                                    _preload_content=False)
    return json.loads(resp.data)["items"]


def running_on(core: client.CoreV1Api, ns: str, name: str) -> str | None:
    """The node the Job's live pod runs on (None while it has none Running)."""
    for p in job_pods(core, ns, name):
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp"):
            return p["spec"]["nodeName"]
    return None


def managed_nodes(core: client.CoreV1Api) -> dict[str, Any]:
    return {n.metadata.name: n for n in
            core.list_node(label_selector=f"{TAG_MANAGED}=true").items}


def ready(core: client.CoreV1Api, name: str) -> bool:
    try:
        node = core.read_node(name)
    except ApiException:
        return False
    return any(c.type == "Ready" and c.status == "True"
               for c in (node.status.conditions or ()))


def launch(kw: KwokProvider, core: client.CoreV1Api) -> str:
    """One on-demand 8-GPU instance through the provider, as the capacity loop launches."""
    tok = new_token()
    got = kw.create(LaunchRequest(tok, (P16.name,), (P16.zones[0],), CapacityType.ON_DEMAND,
                                  None, {**MANAGED, TAG_TOKEN: tok}))
    assert isinstance(got, Instance)
    wait_for(f"node {got.instance_id} to be Ready", lambda: ready(core, got.instance_id))
    return got.instance_id


def one_pod_on_each_of_two_nodes(lab: Any, cloud_lab: dict, sc: Scenario
                                 ) -> tuple[Controller, KwokProvider, str, str]:
    """Two 8-GPU gpufleet nodes a and b, Job ``one`` running on a and ``two`` on b, under a
    controller with ``sc``. Job two must land on a second node: a is cordoned while it binds
    (gpufleet packs; a cordoned node is neither a consolidation candidate nor room)."""
    core, batch, ns = lab.core, lab.batch, cloud_lab["ns"]
    assert managed_nodes(core) == {}
    kw = KwokProvider(core, {P16.name: P16}, None, namespace=ns)
    a = launch(kw, core)
    batch.create_namespaced_job(ns, job("one", {"nvidia.com/gpu": "1"}))
    ctl = start(lab.api, sc, ns, cloud_lab)
    assert wait_for("job one to run on the first node", lambda: running_on(core, ns, "one")) == a
    core.patch_node(a, {"spec": {"unschedulable": True}})
    b = launch(kw, core)
    batch.create_namespaced_job(ns, job("two", {"nvidia.com/gpu": "1"}))
    assert wait_for("job two to run on the second node",
                    lambda: running_on(core, ns, "two")) == b
    core.patch_node(a, {"spec": {"unschedulable": False}})
    return ctl, kw, a, b


def test_two_under_used_nodes_are_consolidated_into_one(lab: Any, cloud_lab: dict) -> None:
    core, batch, ns = lab.core, lab.batch, cloud_lab["ns"]
    ctl, kw, a, b = one_pod_on_each_of_two_nodes(
        lab, cloud_lab, scenario(ns, (P16.name,), scale_down_unneeded_s=10.0))
    first_pods = {p["metadata"]["uid"] for name in ("one", "two")
                  for p in job_pods(core, ns, name)}

    # 1/8 GPU each, under the 0.5 threshold: after 10 s + the 15 s validation one is marked.
    # Its one pod is evicted at once and the empty Node deleted, so the mark can come and go
    # between two polls (CI saw that): a Node already gone counts as marked
    def marked_or_gone() -> list[str]:
        nodes = managed_nodes(core)
        return [n for n, obj in nodes.items()
                if ANN_CONSOLIDATION in (obj.metadata.annotations or {})] or [
            n for n in (a, b) if n not in nodes]

    (victim,) = wait_for("a node to be marked for consolidation", marked_or_gone, timeout=90)
    (survivor,) = {a, b} - {victim}
    wait_for("the consolidated node to be deleted", lambda: victim not in managed_nodes(core),
             timeout=90)
    assert set(managed_nodes(core)) == {survivor}
    for name in ("one", "two"):
        assert wait_for(f"job {name}'s pod to run on the survivor",
                        lambda name=name: running_on(core, ns, name) == survivor)
    moved = [p for name in ("one", "two") for p in job_pods(core, ns, name)
             if p["metadata"]["uid"] not in first_pods]
    assert len(moved) == 1  # one pod was evicted and recreated; the other never moved
    for name in ("one", "two"):
        assert not batch.read_namespaced_job_status(name, ns).status.failed
    # no instance leaked: every one is a Node (or on its way out)
    nodes = managed_nodes(core)
    assert [i.instance_id for i in kw.list()
            if i.instance_id not in nodes and i.state.value != "terminating"] == []
    assert [i.instance_id for i in kw.list()] == [survivor]
    assert not core.read_node(survivor).spec.unschedulable
    reg = ctl.metrics.registry
    assert reg.get_sample_value("gpufleet_terminations_total",
                                {"reason": "consolidation"}) == 1
    assert reg.get_sample_value("gpufleet_consolidations_total", {
        "method": "single-node-consolidation", "outcome": "started"}) == 1


def test_a_restarted_controller_finishes_a_consolidation_from_the_mark_alone(
        lab: Any, cloud_lab: dict) -> None:
    core, batch, ns = lab.core, lab.batch, cloud_lab["ns"]
    # an hour of idle time: this controller never decides a consolidation itself
    sc = scenario(ns, (P16.name,), scale_down_unneeded_s=3600.0)
    ctl, kw, a, b = one_pod_on_each_of_two_nodes(lab, cloud_lab, sc)
    ctl.stop()
    # what a controller killed right after marking leaves behind: a marked, cordoned, pod on it
    mark = ConsolidationMark("single-node-consolidation", time.time())
    core.patch_node(a, {"metadata": {"annotations": {ANN_CONSOLIDATION: mark.to_json()}},
                        "spec": {"unschedulable": True}})
    ctl = start(lab.api, sc, ns, cloud_lab)
    wait_for("the marked node to be drained and deleted", lambda: a not in managed_nodes(core),
             timeout=90)
    assert wait_for("job one's new pod to run on b", lambda: running_on(core, ns, "one") == b)
    assert running_on(core, ns, "two") == b
    assert [i.instance_id for i in kw.list()] == [b]
    assert not batch.read_namespaced_job_status("one", ns).status.failed
    assert ctl.metrics.registry.get_sample_value("gpufleet_terminations_total",
                                                 {"reason": "consolidation"}) == 1


def test_a_pending_mig_pod_launches_a_mig_node_and_binds_with_its_slot(
        lab: Any, cloud_lab: dict) -> None:
    core, batch, ns = lab.core, lab.batch, cloud_lab["ns"]
    assert managed_nodes(core) == {}
    sc = scenario(ns, (P16.name, A100.name), max_pending_wait_s=1.0, provisioning_delay_s=3.0)
    ctl = start(lab.api, sc, ns, cloud_lab)
    batch.create_namespaced_job(ns, job("mig", {"nvidia.com/mig-1g.5gb": "1"}))
    node = wait_for("the MIG pod to run", lambda: running_on(core, ns, "mig"), timeout=90)
    nodes = managed_nodes(core)
    assert list(nodes) == [node]  # one launch: the booting node absorbed the pod meanwhile
    obj = nodes[node]
    labels, capacity = obj.metadata.labels, obj.status.capacity
    assert labels["node.kubernetes.io/instance-type"] == A100.name
    assert labels["nvidia.com/mig.config"] == "all-enabled"
    assert labels["nvidia.com/mig.strategy"] == "mixed"
    assert int(capacity["nvidia.com/mig-1g.5gb"]) > 0 and capacity["nvidia.com/gpu"] == "0"
    (pod,) = job_pods(core, ns, "mig")
    gpu, _, slot = pod["metadata"]["annotations"][ANN_MIG].partition(":")
    assert int(gpu) in range(A100.gpus) and slot.split("@")[0] == "1g.5gb"
    reg = ctl.metrics.registry
    assert reg.get_sample_value("gpufleet_launches_total", {
        "capacity_type": "on-demand", "instance_type": A100.name}) == 1


def test_a_long_pod_that_cannot_move_gets_a_right_sized_node(lab: Any, cloud_lab: dict) -> None:
    """Right-sized nodes (``control.right_size``) live: an 8-GPU node has room, but a bare pod
    (no controller recreates it, so it cannot move) that states 2 h of work may only use nodes
    of at most max(2 × 1, 1) = 2 GPUs, so a 1-GPU p3.2xlarge is launched for it; a Job's pod
    (it can move) with the same work binds on the 8-GPU node."""
    core, batch, ns = lab.core, lab.batch, cloud_lab["ns"]
    assert managed_nodes(core) == {}
    p2 = CAT["p3.2xlarge"]
    kw = KwokProvider(core, {P16.name: P16, p2.name: p2}, None, namespace=ns)
    big = launch(kw, core)
    try:
        sc = scenario(ns, (P16.name, p2.name), max_pending_wait_s=1.0,
                      provisioning_delay_s=3.0, scale_down_unneeded_s=3600.0)
        ctl = start(lab.api, sc, ns, cloud_lab)
        two_hours = {"gpufleet.io/duration": "7200",
                     "pod-complete.stage.kwok.x-k8s.io/delay": "30m"}
        bare = job("unused", {"nvidia.com/gpu": "1"})["spec"]["template"]["spec"]
        core.create_namespaced_pod(ns, {"metadata": {"name": "bare", "annotations": two_hours},
                                        "spec": bare})
        movable = job("moves", {"nvidia.com/gpu": "1"})
        movable["spec"]["template"]["metadata"]["annotations"] = two_hours
        batch.create_namespaced_job(ns, movable)
        assert wait_for("the Job's pod to run", lambda: running_on(core, ns, "moves")) == big

        def bare_node() -> str | None:
            obj = core.read_namespaced_pod("bare", ns)
            return obj.spec.node_name if obj.status.phase == "Running" else None

        node = wait_for("the bare pod to run", bare_node, timeout=90)
        assert node != big
        labels = managed_nodes(core)[node].metadata.labels
        assert labels["node.kubernetes.io/instance-type"] == p2.name
        assert ctl.metrics.registry.get_sample_value("gpufleet_launches_total", {
            "capacity_type": "on-demand", "instance_type": p2.name}) == 1
    finally:
        for ctl in cloud_lab["controllers"]:
            ctl.stop()
        cloud_lab["controllers"] = []
        core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
        for inst in kw.list():
            kw.delete(inst.instance_id)


def test_a_pending_dra_pod_launches_a_node_whose_slices_serve_its_claim(
        lab: Any, cloud_lab: dict) -> None:
    """A pod whose ResourceClaim asks 4 whole GPUs and nothing fits: the capacity loop launches
    a node (the offers know the GPUs a type brings); the kwok cloud publishes the new Node's
    ResourceSlices with it, and gpufleet allocates the claim on that node and binds the pod."""
    core, ns = lab.core, cloud_lab["ns"]
    assert managed_nodes(core) == {}
    sc = scenario(ns, (P16.name,), max_pending_wait_s=1.0, provisioning_delay_s=3.0)
    start(lab.api, sc, ns, cloud_lab)
    client.CustomObjectsApi(lab.api).create_namespaced_custom_object(
        "resource.k8s.io", "v1", ns, "resourceclaims", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "four"}, "spec": {"devices": {"requests": [{
                "name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 4}}]}}})
    core.create_namespaced_pod(ns, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "dra"},
        "spec": {"schedulerName": "gpufleet", "terminationGracePeriodSeconds": 0,
                 "nodeSelector": MANAGED, "resourceClaims": [{"name": "gpu",
                                                              "resourceClaimName": "four"}],
                 "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                 "resources": {"limits": {"cpu": "1", "memory": "1Gi"},
                                               "claims": [{"name": "gpu"}]}}]}})

    def bound() -> str | None:
        return core.read_namespaced_pod("dra", ns).spec.node_name

    node = wait_for("the DRA pod to bind on a launched node", bound, timeout=90)
    assert list(managed_nodes(core)) == [node]
    claim = client.CustomObjectsApi(lab.api).get_namespaced_custom_object(
        "resource.k8s.io", "v1", ns, "resourceclaims", "four")
    results = claim["status"]["allocation"]["devices"]["results"]
    assert {r["pool"] for r in results} == {node} and len({r["device"] for r in results}) == 4
