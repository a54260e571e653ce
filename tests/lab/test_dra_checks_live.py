"""DRA checks against the real API server and controller-manager:

* the gpu-fraction MutatingAdmissionPolicy (deploy/dra/gpu-share-policy.yaml): a pod created
  with ``gpu-fraction`` in a labelled namespace is stored with the share claim, and the
  controller-manager creates the ResourceClaim from the template; other pods are untouched;
* the kubelet stand-in (``gpufleet.lab.kubelet_check``, ``gpufleet lab check``) on claims this
  test allocates by hand through ``resourceclaims/status`` (the API server validates the
  allocation's shape, never the devices — that is the checker's job): a bound pod whose claim is
  allocated and reserved for it passes; an exclusive device in a second claim and a bound pod
  whose claim is not allocated are reported. (A claim allocated but not reserved for its bound
  pod does not last: the controller-manager's claim controller reserves it for a pod already on
  a node — the unit tests cover ``unreserved``.)
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from live_wait import wait_for

from gpufleet.k8s.dra.shares import CLAIM_NAME, NAMESPACE_LABEL, SHARE_CLASS
from gpufleet.k8s.dra.slices import DRIVER, GPU_CLASS
from gpufleet.lab.kubelet_check import check_cluster
from gpufleet.lab.session import LabSession

pytestmark = pytest.mark.live
REPO = Path(__file__).resolve().parents[2]
TEMPLATES = REPO / "deploy" / "dra" / "gpu-share-templates.yaml"


def _pod(name: str, fraction: str | None = None, claims: list[dict] | None = None) -> dict:
    meta: dict[str, Any] = {"name": name}
    if fraction is not None:
        meta["annotations"] = {"gpu-fraction": fraction}
    spec: dict[str, Any] = {
        "schedulerName": "nobody", "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "a", "image": "registry.k8s.io/pause:3.10"},
                       {"name": "b", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"limits": {"cpu": "100m"}}}]}
    if claims:
        spec["resourceClaims"] = [{"name": c["name"], "resourceClaimName": c["claim"]}
                                  for c in claims]
        spec["containers"] = spec["containers"][:1]
        spec["containers"][0]["resources"] = {"claims": [{"name": c["name"]} for c in claims]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _read(lab: LabSession, ns: str, name: str) -> dict:
    return json.loads(lab.core.read_namespaced_pod(name, ns, _preload_content=False).data)


def test_fraction_pod_gets_its_share_claim(lab: LabSession, share_policy: None) -> None:
    ns, other = lab.namespace("frac"), lab.namespace("plain")
    key, value = NAMESPACE_LABEL
    lab.core.patch_namespace(ns, {"metadata": {"labels": {key: value}}})
    lab.kubectl("apply", "-n", ns, "-f", str(TEMPLATES))

    def mutated() -> bool:  # the API server loads new policies asynchronously
        body = json.loads(lab.core.create_namespaced_pod(
            ns, _pod("probe", "0.5"), dry_run="All", _preload_content=False).data)
        return bool(body["spec"].get("resourceClaims"))

    wait_for("the MutatingAdmissionPolicy in effect", mutated, timeout=60)

    for name, fraction in (("frac", "0.22"), ("plain", None), ("bad", "abc"), ("big", "1.5")):
        lab.core.create_namespaced_pod(ns, _pod(name, fraction), _preload_content=False)
    lab.core.create_namespaced_pod(other, _pod("elsewhere", "0.25"), _preload_content=False)

    frac = _read(lab, ns, "frac")  # 0.22 rounded up to the shipped 0.25, annotation with it
    assert frac["metadata"]["annotations"]["gpu-fraction"] == "0.25"
    assert frac["spec"]["resourceClaims"] == [
        {"name": CLAIM_NAME, "resourceClaimTemplateName": "gpu-share-250"}]
    assert [c["resources"].get("claims") for c in frac["spec"]["containers"]] == [
        [{"name": CLAIM_NAME}]] * 2
    assert frac["spec"]["containers"][1]["resources"]["limits"] == {"cpu": "100m"}
    for untouched, where in (("plain", ns), ("bad", ns), ("big", ns), ("elsewhere", other)):
        pod = _read(lab, where, untouched)
        assert not pod["spec"].get("resourceClaims"), untouched
        assert all("claims" not in (c.get("resources") or {}) for c in pod["spec"]["containers"])
    assert _read(lab, other, "elsewhere")["metadata"]["annotations"]["gpu-fraction"] == "0.25"

    def generated() -> str | None:
        st = _read(lab, ns, "frac")["status"].get("resourceClaimStatuses") or []
        return st[0].get("resourceClaimName") if st else None

    claim_name = wait_for("the controller-manager's claim from the template", generated)
    res = client.ResourceV1Api(lab.api)
    claim = json.loads(res.read_namespaced_resource_claim(claim_name, ns,
                                                          _preload_content=False).data)
    assert claim["metadata"]["ownerReferences"][0]["name"] == "frac"
    (req,) = claim["spec"]["devices"]["requests"]
    subs = {s["name"]: s["capacity"]["requests"]["memory"] for s in req["firstAvailable"]}
    assert subs["gpu-40gi"] == "10Gi" and subs["gpu-16gi"] == "4Gi"  # 0.25 × 40Gi, × 16Gi
    assert {s["deviceClassName"] for s in req["firstAvailable"]} == {SHARE_CLASS}
    # 0.22 rounds up to the 0.25 share: a quarter of the SMs on every size
    assert {s["capacity"]["requests"]["cores"] for s in req["firstAvailable"]} == {"25"}
    lab.core.delete_collection_namespaced_pod(ns)


def _claim(name: str) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": GPU_CLASS, "allocationMode": "ExactCount", "count": 1}}]}}}


def _allocate(res: Any, ns: str, name: str, node: str, device: str,
              pod: dict | None) -> None:
    """Write ``status.allocation`` (and ``reservedFor`` the pod) as a scheduler does."""
    claim = json.loads(res.read_namespaced_resource_claim(name, ns, _preload_content=False).data)
    claim["status"] = {"allocation": {
        "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": node,
                                 "device": device}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}
    if pod is not None:
        claim["status"]["reservedFor"] = [{"resource": "pods", "name": pod["metadata"]["name"],
                                           "uid": pod["metadata"]["uid"]}]
    res.replace_namespaced_resource_claim_status(name, ns, claim, _preload_content=False)


def _bind(lab: LabSession, ns: str, pod: str, node: str) -> None:
    lab.core.create_namespaced_binding(ns, {
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node}}, _preload_content=False)


def _mine(lines: list[str], ns: str) -> list[str]:
    return [line for line in lines if f"{ns}/" in line]


def test_kubelet_check_on_claims_allocated_by_hand(lab: LabSession) -> None:
    ns = lab.namespace("kubelet")
    (node,) = lab.add_instance_nodes("g4dn.12xlarge", 1, zone=ns, prefix=ns)
    res = client.ResourceV1Api(lab.api)
    try:
        for c in ("c1", "c2", "c3"):
            res.create_namespaced_resource_claim(ns, _claim(c), _preload_content=False)
        lab.core.create_namespaced_pod(ns, _pod("p1", claims=[{"name": "gpu", "claim": "c1"}]),
                                       _preload_content=False)
        p1 = _read(lab, ns, "p1")
        _allocate(res, ns, "c1", node, "gpu-0", p1)
        _bind(lab, ns, "p1", node)
        report = check_cluster(lab.api)
        assert not _mine(report.lines(), ns), report.lines()

        # gpu-0 again. The lab publishes whole GPUs as shareable (allowMultipleAllocations, so
        # shares and whole GPUs exclude each other by memory); an allocation without
        # consumedCapacity takes all of it: two of them consume 32Gi of the T4's 16Gi
        _allocate(res, ns, "c2", node, "gpu-0", None)
        report = check_cluster(lab.api)
        (dup,) = _mine(report.lines(), ns)
        assert f"{node} GPU 0: capacity: device gpu-0 memory: 32Gi consumed of 16Gi" in dup
        assert f"claim {ns}/c1" in dup and f"claim {ns}/c2" in dup
        cli = subprocess.run([sys.executable, "-m", "gpufleet", "lab", "check", "--dir",
                              str(lab.directory)], capture_output=True, text=True, timeout=120,
                             check=False)
        assert cli.returncode == 1 and dup in cli.stdout, cli.stdout + cli.stderr
        res.delete_namespaced_resource_claim("c2", ns, _preload_content=False)

        lab.core.create_namespaced_pod(ns, _pod("p3", claims=[{"name": "gpu", "claim": "c3"}]),
                                       _preload_content=False)
        # bound with its claim never allocated (an allocated claim merely not reserved is not a
        # lasting state here: the controller-manager reserves it for the pod bound to a node)
        _bind(lab, ns, "p3", node)
        refusals = [str(r) for r in check_cluster(lab.api).refusals if f"{ns}/" in r.pod]
        assert refusals == [f"pod {ns}/p3: claim gpu: unallocated: ResourceClaim {ns}/c3 has no "
                            "status.allocation"]
        report = check_cluster(lab.api)
        assert not [o for o in report.overcommits if f"{ns}/" in str(o)], report.lines()
        assert report.pods_checked >= 2
    finally:
        lab.core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
        for c in ("c1", "c2", "c3"):
            try:
                res.delete_namespaced_resource_claim(c, ns, _preload_content=False)
            except ApiException as exc:
                if exc.status != 404:
                    raise
        lab.core.delete_node(node)
