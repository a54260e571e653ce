"""gpufleet allocating GPUs through Dynamic Resource Allocation on the lab's real API server
(kube-apiserver validates every claim and allocation; the controller-manager's claim controller
creates template claims and deallocates claims of deleted pods; KWOK runs the pods; the lab
publishes NVIDIA-shaped ResourceSlices). The controller runs in-process, leader election off.

Each test works in its own namespace, on nodes it adds in a zone named after it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dra_objects import G, Space, V, allocated, claim_body, results
from kubernetes import client
from live_controller import running_controller
from live_objects import create_once_admitted
from live_wait import wait_for

from gpufleet.k8s.dra.cel import DeviceInput, matches
from gpufleet.k8s.dra.claims import FINALIZER
from gpufleet.k8s.dra.shares import CLAIM_NAME, NAMESPACE_LABEL, SHARE_CLASS
from gpufleet.k8s.dra.slices import ATTR_NVLINK_DOMAIN, DRIVER
from gpufleet.k8s.schedule.controller import Controller
from gpufleet.lab.kubelet_check import check_cluster

pytestmark = pytest.mark.live
_PRODUCT = f"device.attributes['{DRIVER}'].productName"
TEMPLATES = Path(__file__).resolve().parents[2] / "deploy" / "dra" / "gpu-share-templates.yaml"


@pytest.fixture()
def space(lab: Any) -> Iterator[Space]:
    sp = Space(lab)
    yield sp
    core = lab.core
    core.delete_collection_namespaced_pod(sp.name, grace_period_seconds=0)
    wait_for("the test's pods to go", lambda: not core.list_namespaced_pod(sp.name).items, 60)
    for n in sp.nodes:
        core.delete_node(n)
    core.delete_namespace(sp.name)


@pytest.fixture()
def controller(lab: Any) -> Iterator[Controller]:
    with running_controller(lab.api) as ctl:
        assert ctl.dra, "the lab serves resource.k8s.io/v1"
        yield ctl


def test_two_gpus_on_one_nvlink_island(space: Space, controller: Controller) -> None:
    """p3.16xlarge: two NVLink islands of 4 V100s. A 3-GPU claim takes 3 of one island; the
    2-GPU claim then gets both GPUs from the other island (the first idle pair would straddle
    the two), written as the claim's allocation — the binding choice on a real node."""
    (node,) = space.add("p3.16xlarge")
    space.claim("three", count=3)
    space.pod("a", claim="three")
    wait_for("the 3-GPU pod to bind", lambda: space.bound("a"))
    space.claim("two", count=2)
    space.pod("b", claim="two")
    pod = wait_for("the 2-GPU pod to bind", lambda: space.bound("b"))
    assert pod["spec"]["nodeName"] == node
    claim = space.read_claim("two")
    assert FINALIZER in claim["metadata"]["finalizers"]
    assert claim["status"]["reservedFor"] == [
        {"resource": "pods", "name": "b", "uid": pod["metadata"]["uid"]}]
    sel = claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"]
    assert sel == [{"key": "metadata.name", "operator": "In", "values": [node]}]
    two = [r["device"] for r in results(claim)]
    three = [r["device"] for r in results(space.read_claim("three"))]
    assert len(set(two) | set(three)) == 5
    doms = {space.device(node, d)["attributes"][ATTR_NVLINK_DOMAIN]["int"] for d in two}
    assert len(doms) == 1, two
    assert not ({space.device(node, d)["attributes"][ATTR_NVLINK_DOMAIN]["int"]
                 for d in three} & doms)
    # the claim is the record: no GPU annotations on the pod
    assert "gpufleet.io/gpus" not in (pod["metadata"].get("annotations") or {})


def test_four_quarter_shares_of_one_gpu_then_a_deleted_pods_share_reused(
        space: Space, controller: Controller) -> None:
    """g4dn.xlarge: one T4 (16 GiB), published with allowMultipleAllocations. Four pods with
    ``gpu-fraction: 0.25`` and a 4 GiB capacity claim share it, each allocation its own
    ``shareID`` and ``consumedCapacity``; a fifth is refused. Deleting one pod lets the
    controller-manager's claim controller drop the reservation and deallocate the claim, and the
    fifth pod gets the freed share."""
    (node,) = space.add("g4dn.xlarge")
    for i in range(5):
        space.claim(f"share-{i}", memory="4Gi")
    for i in range(4):
        space.pod(f"p{i}", claim=f"share-{i}", ann={"gpu-fraction": "0.25"})
    for i in range(4):
        wait_for(f"share {i} to bind", lambda i=i: space.bound(f"p{i}"))
    got = [results(space.read_claim(f"share-{i}"))[0] for i in range(4)]
    assert {r["device"] for r in got} == {"gpu-0"} and {r["pool"] for r in got} == {node}
    assert len({r["shareID"] for r in got}) == 4
    assert all(r["consumedCapacity"] == {"memory": "4Gi"} for r in got)
    space.pod("p4", claim="share-4", ann={"gpu-fraction": "0.25"})
    msg = wait_for("the fifth share to be refused", lambda: space.scheduled_message("p4"))
    assert msg.startswith("0/")
    assert space.bound("p4") is None and allocated(space, "share-4") is None
    space.lab.core.delete_namespaced_pod("p1", space.name, grace_period_seconds=0)
    wait_for("the controller-manager to deallocate share-1",
             lambda: allocated(space, "share-1") is None, 60)
    wait_for("the fifth share to bind", lambda: space.bound("p4"))
    assert results(space.read_claim("share-4"))[0]["device"] == "gpu-0"


def test_gpu_fraction_pods_get_shares_through_the_admission_policy(
        space: Space, controller: Controller, share_policy: None) -> None:
    """The path that keeps ``gpu-fraction`` working under DRA: in a namespace with the policy's
    label, pods created with ``gpu-fraction: 0.25`` and no claims get the ``gpu-share-250``
    template's claim from the API server, the controller-manager creates it, and gpufleet
    allocates its prioritized list on the shared pool's g4dn.xlarge, whose one T4 (16 GiB) the
    lab publishes as gpufleet's node plugin would (``gpu.gpufleet.io``): four shares, each the
    ``gpu-16gi`` subrequest (``request: gpu/gpu-16gi``, 4 GiB and 25 % of the cores, its own
    shareID); a fifth is refused; a whole-GPU node of NVIDIA's driver beside it gets none; the
    kubelet stand-in finds nothing wrong."""
    lab = space.lab
    space.add("g4dn.xlarge")  # NVIDIA's driver: no share may land here
    (node,) = space.add("g4dn.xlarge", gpu_pool="shared")
    key, value = NAMESPACE_LABEL
    lab.core.patch_namespace(space.name, {"metadata": {"labels": {key: value}}})
    lab.kubectl("apply", "-n", space.name, "-f", str(TEMPLATES))
    probe = {"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": "probe", "annotations": {"gpu-fraction": "0.25"}},
             "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}

    def in_effect() -> bool:  # the API server loads new policies asynchronously
        got = json.loads(lab.core.create_namespaced_pod(
            space.name, probe, dry_run="All", _preload_content=False).data)
        return bool(got["spec"].get("resourceClaims"))

    wait_for("the MutatingAdmissionPolicy in effect", in_effect, timeout=60)
    for i in range(4):
        space.pod(f"q{i}", ann={"gpu-fraction": "0.25"})
    pods = [wait_for(f"share {i} to bind", lambda i=i: space.bound(f"q{i}"), 60)
            for i in range(4)]
    got = []
    for p in pods:
        assert p["spec"]["nodeName"] == node
        assert p["spec"]["resourceClaims"] == [
            {"name": CLAIM_NAME, "resourceClaimTemplateName": "gpu-share-250"}]
        (st,) = p["status"]["resourceClaimStatuses"]
        claim = space.read_claim(st["resourceClaimName"])
        assert claim["status"]["reservedFor"] == [
            {"resource": "pods", "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]}]
        got += results(claim)
    assert {(r["request"], r["driver"], r["pool"], r["device"]) for r in got} == {
        ("gpu/gpu-16gi", "gpu.gpufleet.io", node, "gpu-0")}
    assert all(r["consumedCapacity"] == {"memory": "4Gi", "cores": "25"} for r in got), got
    assert len({r["shareID"] for r in got}) == 4
    space.pod("q4", ann={"gpu-fraction": "0.25"})
    # first "waiting for the claim of template gpu-share-250" while the controller-manager
    # creates q4's claim (a cycle may run in between), then placement's refusal
    def refused() -> str | None:
        msg = space.scheduled_message("q4")
        return msg if msg is not None and msg.startswith("0/") else None

    wait_for("the fifth share to be refused", refused, 60)
    assert space.bound("q4") is None
    report = check_cluster(lab.api)
    assert not [line for line in report.lines() if f"{space.name}/" in line], report.lines()


def test_mig_through_a_claim_template(space: Space, controller: Controller) -> None:
    """A p4d.24xlarge in dynamic MIG (every placement published, all on the GPUs' counters).
    The pod's claim comes from a ResourceClaimTemplate (the controller-manager creates it and
    names it in the pod's status); gpufleet allocates one 3g.20gb device for it."""
    (node,) = space.add("p4d.24xlarge", mig_config="all-enabled")
    space.custom.create_namespaced_custom_object(G, V, space.name, "resourceclaimtemplates", {
        "apiVersion": f"{G}/{V}", "kind": "ResourceClaimTemplate", "metadata": {"name": "mig"},
        "spec": {"spec": claim_body("x", "mig.nvidia.com", 1,
                                    "device.attributes['gpu.nvidia.com'].profile == '3g.20gb'",
                                    None)["spec"]}})
    space.pod("m", template="mig")
    pod = wait_for("the MIG pod to bind", lambda: space.bound("m"))
    assert pod["spec"]["nodeName"] == node
    (st,) = pod["status"]["resourceClaimStatuses"]
    (r,) = results(space.read_claim(st["resourceClaimName"]))
    dev = space.device(node, r["device"])
    assert dev["attributes"]["profile"]["string"] == "3g.20gb"
    assert r["device"].startswith("gpu-") and "-mig-3g20gb-" in r["device"]
    assert "shareID" not in r


def test_kill_9_between_allocation_and_bind(space: Space, lab: Any, tmp_path: Any) -> None:
    """A controller process, slowed by its client rate limit (one write every 2.5 s), is killed
    with SIGKILL once it has written both pods' claims (finalizer, allocation, reservedFor) and
    before it binds either. The next controller binds the surviving pod to the node its claim
    is allocated on (the allocation untouched), and the controller-manager releases the claim
    of the pod deleted meanwhile: nothing is leaked."""
    import os
    import signal
    import subprocess
    import sys

    (node,) = space.add("g4dn.12xlarge")
    for name in ("a", "b"):
        space.claim(f"claim-{name}")
    log = (tmp_path / "controller.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpufleet", "controller", "--kubeconfig", str(lab.kubeconfig),
         "--no-leader-elect", "--port", "0", "--kube-api-qps", "0.4", "--kube-api-burst", "1"],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        for name in ("a", "b"):
            space.pod(name, claim=f"claim-{name}")
        wait_for("both claims allocated", lambda: allocated(space, "claim-a")
                 and allocated(space, "claim-b"), 90, log=tmp_path / "controller.log",
                 poll_s=0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert space.bound("a") is None and space.bound("b") is None, "killed after a bind"
    before = space.read_claim("claim-a")
    assert FINALIZER in before["metadata"]["finalizers"]
    lab.core.delete_namespaced_pod("b", space.name, grace_period_seconds=0)
    with running_controller(lab.api):
        pod = wait_for("the next controller to bind a", lambda: space.bound("a"))
        assert pod["spec"]["nodeName"] == node
        after = space.read_claim("claim-a")
        assert after["status"]["allocation"] == before["status"]["allocation"]
        assert [r["uid"] for r in after["status"]["reservedFor"]] == [pod["metadata"]["uid"]]
        released = wait_for("the controller-manager to release b's claim", lambda: (
            c := space.read_claim("claim-b"), not c["status"].get("allocation")
            and FINALIZER not in (c["metadata"].get("finalizers") or ()))[1], 60)
        assert released


def test_plain_gpu_pod_served_through_the_extended_resource_claim(
        space: Space, controller: Controller) -> None:
    """A node whose GPUs are devices only (no nvidia.com/gpu in its status: no device plugin)
    and a pod asking ``nvidia.com/gpu: 2``, unchanged. DeviceClass gpu.nvidia.com maps the
    resource (extendedResourceName), so gpufleet creates the claim kube-scheduler would —
    ``<pod>-extended-resources-…``, owned by the pod, annotated — allocates it, names it in the
    pod's ``status.extendedResourceClaimStatus`` and binds."""
    (node,) = space.add("p3.8xlarge")
    space.without_device_plugin(node)
    space.pod("plain", limits={"nvidia.com/gpu": "2"})
    pod = wait_for("the plain pod to bind", lambda: space.bound("plain"))
    assert pod["spec"]["nodeName"] == node
    st = pod["status"]["extendedResourceClaimStatus"]
    assert st["requestMappings"] == [{"containerName": "main", "resourceName": "nvidia.com/gpu",
                                      "requestName": "container-0-request-2"}]
    claim = space.read_claim(st["resourceClaimName"])
    assert claim["metadata"]["name"].startswith("plain-extended-resources-")
    assert claim["metadata"]["annotations"] == {
        "resource.kubernetes.io/extended-resource-claim": "true"}
    (owner,) = claim["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == (
        "Pod", pod["metadata"]["uid"], True)
    assert claim["spec"]["devices"]["requests"] == [{"name": "container-0-request-2", "exactly": {
        "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 2}}]
    assert [r["request"] for r in results(claim)] == ["container-0-request-2"] * 2
    assert claim["status"]["reservedFor"][0]["uid"] == pod["metadata"]["uid"]
    # The over-commit check that follows every live test reads GPUs from Nodes and pod
    # annotations only (its claim checks are another branch's); on a node without
    # nvidia.com/gpu it would count this pod's request as over the node's zero. Its devices
    # were checked above, so the pod goes before that check.
    space.lab.core.delete_namespaced_pod("plain", space.name, grace_period_seconds=0)
    wait_for("the plain pod to go", lambda: not space.lab.core.list_namespaced_pod(
        space.name).items)


def test_chart_rbac_is_enough_for_dra(space: Space, lab: Any) -> None:
    """The controller authenticated as a ServiceAccount holding only the chart's scheduler
    ClusterRole rules (deploy/kubernetes/10-rbac.yaml): it lists and watches slices, classes
    and claims, writes a claim's finalizer and its allocation + reservedFor (the API server
    checks resourceclaims/binding for those fields), creates an extended-resource claim and
    patches the pod's status, and binds."""
    import copy
    from pathlib import Path

    import yaml
    from kubernetes.client import RbacAuthorizationV1Api

    docs = yaml.safe_load_all((Path(__file__).resolve().parents[2]
                               / "deploy/kubernetes/10-rbac.yaml").read_text())
    rules = next(d for d in docs if d and d["kind"] == "ClusterRole")["rules"]
    rbac, core, ns = RbacAuthorizationV1Api(lab.api), lab.core, space.name
    role = f"dra-rbac-{ns}"
    core.create_namespaced_service_account(ns, {"metadata": {"name": "ctl"}})
    rbac.create_cluster_role({"metadata": {"name": role}, "rules": rules})
    rbac.create_cluster_role_binding({
        "metadata": {"name": role},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": "ctl", "namespace": ns}]})
    try:
        token = core.create_namespaced_service_account_token(
            "ctl", ns, {"spec": {"expirationSeconds": 3600}}).status.token
        cfg = copy.deepcopy(lab.api.configuration)
        cfg.cert_file = cfg.key_file = None
        cfg.api_key = {"BearerToken": token}
        cfg.api_key_prefix = {"BearerToken": "Bearer"}
        (node,) = space.add("p3.8xlarge")
        space.without_device_plugin(node)
        with running_controller(client.ApiClient(cfg)) as ctl:
            assert ctl.dra
            space.claim("two", count=2)
            space.pod("claimed", claim="two")
            space.pod("plain", limits={"nvidia.com/gpu": "1"})
            for name in ("claimed", "plain"):
                pod = wait_for(f"{name} to bind", lambda name=name: space.bound(name))
                assert pod["spec"]["nodeName"] == node
            assert len(results(space.read_claim("two"))) == 2
            ext = space.read_pod("plain")["status"]["extendedResourceClaimStatus"]
            assert len(results(space.read_claim(ext["resourceClaimName"]))) == 1
        # the over-commit check after the test reads no claims (see the extended test above)
        space.lab.core.delete_namespaced_pod("plain", ns, grace_period_seconds=0)
        wait_for("the plain pod to go", lambda: not any(
            p.metadata.name == "plain" for p in core.list_namespaced_pod(ns).items))
    finally:
        rbac.delete_cluster_role_binding(role)
        rbac.delete_cluster_role(role)


def test_claim_allocated_on_a_node_that_is_gone_is_released_and_placed_anew(
        space: Space, lab: Any) -> None:
    """What a leader killed after allocating leaves, when the node then goes too: the claim
    allocated (finalizer, allocation on node A, reserved for the pending pod), node A deleted.
    The next controller releases the claim and places the pod on node B."""
    import uuid

    a, b = space.add("g4dn.xlarge", 2)
    space.claim("c")
    space.pod("p", claim="c")
    uid = space.read_pod("p")["metadata"]["uid"]
    claim = space.read_claim("c")
    claim["metadata"]["finalizers"] = [FINALIZER]
    claim = dict(space.custom.replace_namespaced_custom_object(
        G, V, space.name, "resourceclaims", "c", claim))
    claim["status"] = {"allocation": {
        "devices": {"results": [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": a,
                                 "device": "gpu-0", "shareID": str(uuid.uuid4()),
                                 "consumedCapacity": {"memory": "16Gi"}}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [a]}]}]}},
        "reservedFor": [{"resource": "pods", "name": "p", "uid": uid}]}
    space.custom.replace_namespaced_custom_object_status(G, V, space.name, "resourceclaims",
                                                         "c", claim)
    lab.core.delete_node(a)
    space.nodes.remove(a)
    wait_for("node A's slices to go", lambda: not space.slices(a))
    with running_controller(lab.api):
        pod = wait_for("the pod to bind on node B", lambda: space.bound("p"))
    assert pod["spec"]["nodeName"] == b
    (r,) = results(space.read_claim("c"))
    assert r["pool"] == b


def test_a_regex_on_the_product_name_binds_to_a_matching_gpu_and_a_miss_waits_with_why(
        space: Space, controller: Controller) -> None:
    """A T4 node (g4dn.xlarge) and an A100 node (p4d.24xlarge). NVIDIA's example selector —
    ``productName.lowerAscii().matches('^.*a100.*$')`` — binds its pod on the A100 node, its
    claim allocated a device whose published productName the expression admits; a claim for
    a B200 (no instance type the lab knows has one, in any zone) stays unallocated and its pod
    Unschedulable, the PodScheduled condition naming the claim's selector."""
    (t4,) = space.add("g4dn.xlarge")
    (a100,) = space.add("p4d.24xlarge")
    want = f"{_PRODUCT}.lowerAscii().matches('^.*a100.*$')"
    miss = f"{_PRODUCT}.lowerAscii().matches('^.*b200.*$')"
    space.claim("a100", cel=want)
    space.claim("b200", cel=miss)
    space.pod("on-a100", claim="a100")
    space.pod("on-b200", claim="b200")
    pod = wait_for("the A100 pod to bind", lambda: space.bound("on-a100"))
    assert pod["spec"]["nodeName"] == a100 != t4
    (res,) = results(space.read_claim("a100"))
    assert res["pool"] == a100
    device = space.device(a100, res["device"])
    assert matches(want, DeviceInput(device, DRIVER))
    msg = wait_for("the B200 pod to be refused", lambda: space.scheduled_message("on-b200"))
    assert msg.startswith(f"claim {space.name}/b200: selector #0: no published GPU device "
                          f"matches {miss!r}"), msg
    assert space.bound("on-b200") is None
    assert not (space.read_claim("b200").get("status") or {}).get("allocation")


def test_a_pod_with_a_claim_is_preempted_and_its_devices_freed_by_the_deallocation(
        space: Space, controller: Controller) -> None:
    """g4dn.xlarge, one T4. A low-priority pod holds it through a claim; a high-priority pod
    asks a whole GPU through its own claim. gpufleet preempts the low pod as a victim holding
    the claim's GPU; once the pod is gone the controller-manager unreserves and deallocates its
    claim, and the next cycle allocates the T4 to the high pod's claim and binds it."""
    (node,) = space.add("g4dn.xlarge")
    sched = client.SchedulingV1Api(space.lab.api)
    pc = f"{space.name}-high"
    sched.create_priority_class({"metadata": {"name": pc}, "value": 1000})
    try:
        space.claim("low")
        space.pod("low", claim="low")
        wait_for("the low pod to bind", lambda: space.bound("low"))
        assert results(space.read_claim("low"))[0]["device"] == "gpu-0"
        space.claim("high")
        create_once_admitted(lambda: space.pod("high", claim="high", priority_class=pc),
                             "the high-priority pod admitted")
        pod = wait_for("the high pod to bind on the freed T4", lambda: space.bound("high"), 120)
        assert pod["spec"]["nodeName"] == node
        assert results(space.read_claim("high"))[0]["device"] == "gpu-0"
        assert allocated(space, "low") is None  # deallocated with its pod gone
        events = space.lab.core.list_namespaced_event(
            space.name, field_selector="involvedObject.name=low").items
        assert any(e.reason == "Preempted" for e in events), [e.reason for e in events]
    finally:
        sched.delete_priority_class(pc)


def test_tainted_devices_are_not_allocated(
        space: Space, controller: Controller, share_policy: None) -> None:
    """A g4dn.12xlarge of the shared pool (four T4s as the node plugin publishes them) whose
    gpu-0, gpu-1 and gpu-2 carry the plugin's health taints (NoExecute and NoSchedule): a
    whole-GPU claim on share.gpu.gpufleet.io gets gpu-3, and a second one is refused."""
    (node,) = space.add("g4dn.12xlarge", gpu_pool="shared")
    (slice_,) = space.slices(node)
    for dev, effect in (("gpu-0", "NoExecute"), ("gpu-1", "NoSchedule"),
                        ("gpu-2", "NoSchedule")):
        d = next(x for x in slice_["spec"]["devices"] if x["name"] == dev)
        d["taints"] = [{"key": "gpu.gpufleet.io/unhealthy", "value": "xid-79",
                        "effect": effect, "timeAdded": "2026-12-07T00:00:00Z"}]
    space.custom.replace_cluster_custom_object(G, V, "resourceslices",
                                               slice_["metadata"]["name"], slice_)
    space.claim("first", cls=SHARE_CLASS)
    space.pod("first", claim="first")
    pod = wait_for("the first pod to bind", lambda: space.bound("first"), 60)
    assert pod["spec"]["nodeName"] == node
    (r,) = results(space.read_claim("first"))
    assert (r["driver"], r["device"]) == ("gpu.gpufleet.io", "gpu-3")
    space.claim("second", cls=SHARE_CLASS)
    space.pod("second", claim="second")
    wait_for("the second pod to be refused", lambda: space.scheduled_message("second"), 60)
    assert space.bound("second") is None and allocated(space, "second") is None


def _nic_slice(node: str, uid: str, driver: str) -> dict[str, Any]:
    """Two NICs on ``node`` as a network driver would publish them (no GPU attributes), owned
    by the Node as a kubelet plugin's slices are (they go with it)."""
    return {"apiVersion": f"{G}/{V}", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{driver}", "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid}]},
            "spec": {"driver": driver, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": f"nic-{i}", "attributes": {
                         "pcieRoot": {"string": f"pci000{i}"}, "rdma": {"bool": True}}}
                         for i in range(2)]}}


def _claim(space: Space, name: str, requests: list[dict[str, Any]],
           constraints: list[dict[str, Any]] | None = None) -> None:
    devices: dict[str, Any] = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    space.custom.create_namespaced_custom_object(G, V, space.name, "resourceclaims", {
        "apiVersion": f"{G}/{V}", "kind": "ResourceClaim", "metadata": {"name": name},
        "spec": {"devices": devices}})


def _pod_with_claims(space: Space, name: str, claims: list[str]) -> None:
    space.lab.core.create_namespaced_pod(space.name, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"schedulerName": "gpufleet", "terminationGracePeriodSeconds": 0,
                 "nodeSelector": {"topology.kubernetes.io/zone": space.name},
                 "resourceClaims": [{"name": c, "resourceClaimName": c} for c in claims],
                 "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                 "resources": {"limits": {"cpu": "1", "memory": "1Gi"},
                                               "claims": [{"name": c} for c in claims]}}]}})


def test_claims_placement_does_not_express_are_allocated_as_kube_allocates_them(
        space: Space, controller: Controller) -> None:
    """p3.8xlarge (4 V100s, ``gpu.nvidia.com``) that also publishes two NICs of another driver.
    Pod ``train`` has two claims: ``pair`` asks 2 GPUs and a NIC (two requests, a
    ``distinctAttribute`` on the GPUs' ``minor``), ``last`` asks ``allocationMode: All`` of
    the GPUs whose minor is 3. Pod ``fallback``'s claim is a ``firstAvailable`` of 4 GPUs,
    then 1: it gets one GPU, written ``gpu/one``. Kube's allocator order: ``pair`` takes
    gpu-0, gpu-1 and nic-0, ``last`` gpu-3, ``fallback`` gpu-2. A fourth pod asking a whole
    GPU is then refused, and nothing is over-committed."""
    (node,) = space.add("p3.8xlarge")
    nic = f"nic-{space.name}.example.com"
    space.custom.create_cluster_custom_object(G, V, "deviceclasses", {
        "apiVersion": f"{G}/{V}", "kind": "DeviceClass", "metadata": {"name": nic},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{nic}'"}}]}})
    body = _nic_slice(node, space.lab.core.read_node(node).metadata.uid, nic)
    space.custom.create_cluster_custom_object(G, V, "resourceslices", body)
    try:
        minor = f"device.attributes['{DRIVER}'].minor"
        _claim(space, "pair", [
            {"name": "gpus", "exactly": {"deviceClassName": DRIVER, "count": 2}},
            {"name": "nic", "exactly": {"deviceClassName": nic}}],
            [{"distinctAttribute": f"{DRIVER}/minor", "requests": ["gpus"]}])
        _claim(space, "last", [{"name": "gpu", "exactly": {
            "deviceClassName": DRIVER, "allocationMode": "All",
            "selectors": [{"cel": {"expression": f"{minor} == 3"}}]}}])
        _pod_with_claims(space, "train", ["pair", "last"])
        pod = wait_for("the two-claim pod to bind", lambda: space.bound("train"), 60)
        assert pod["spec"]["nodeName"] == node
        got = [(r["request"], r["device"]) for r in results(space.read_claim("pair"))]
        assert got == [("gpus", "gpu-0"), ("gpus", "gpu-1"), ("nic", "nic-0")], got
        assert [r["device"] for r in results(space.read_claim("last"))] == ["gpu-3"]
        uid = pod["metadata"]["uid"]
        for c in ("pair", "last"):
            claim = space.read_claim(c)
            assert [r["uid"] for r in claim["status"]["reservedFor"]] == [uid]
            assert FINALIZER in claim["metadata"]["finalizers"]
        _claim(space, "fallback", [{"name": "gpu", "firstAvailable": [
            {"name": "four", "deviceClassName": DRIVER, "count": 4},
            {"name": "one", "deviceClassName": DRIVER, "count": 1}]}])
        _pod_with_claims(space, "fallback", ["fallback"])
        wait_for("the prioritized-list pod to bind", lambda: space.bound("fallback"), 60)
        assert [(r["request"], r["device"]) for r in results(space.read_claim("fallback"))] \
            == [("gpu/one", "gpu-2")]
        space.claim("more")
        space.pod("more", claim="more")
        wait_for("a fifth GPU's pod to be refused", lambda: space.scheduled_message("more"), 60)
        assert allocated(space, "more") is None
        report = check_cluster(space.lab.api)
        assert not [line for line in report.lines() if f"{space.name}/" in line], report.lines()
    finally:
        space.custom.delete_cluster_custom_object(G, V, "deviceclasses", nic)
