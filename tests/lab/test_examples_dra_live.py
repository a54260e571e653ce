"""``examples/*.yaml``, unchanged, on the default lab: GPUs as DRA devices only, so every GPU pod
binds through a claim.

``gpufleet lab up``'s defaults (no ``--device-plugin``): the GPU nodes advertise no
``nvidia.com/gpu`` (their GPUs are ResourceSlices only), NVIDIA's DeviceClasses map the
extended resources (KEP-5004), the A100 node is in dynamic MIG and the T4 node in the shared
pool, the gpu-fraction policy and its claim templates are installed in ``default``, and the
chart's CRDs are there. The examples are applied to ``default`` with the lab's kubectl and
gpufleet's controller (in-process) binds them: each GPU pod must be bound with a claim that is
allocated on its node and reserved for it — the extended-resource claim for ``nvidia.com/gpu``
and ``nvidia.com/mig-1g.5gb``, the policy's claim for ``gpu-fraction``.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from live_controller import running_controller
from live_wait import wait_for

from gpufleet.k8s.dra.claims import allocation_node, reserved_for
from gpufleet.lab.cluster import LabOptions, down, up
from gpufleet.lab.dra import SHARE_NAMESPACE
from gpufleet.lab.session import LabSession

pytestmark = pytest.mark.live
EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))


@pytest.fixture(scope="module")
def dra_lab(lab_binaries: Path) -> Iterator[LabSession]:
    with tempfile.TemporaryDirectory(prefix="gpufleet-dra-only-") as tmp:
        info = up(LabOptions(directory=Path(tmp), controller=False))
        try:
            yield LabSession(info)
        finally:
            down(Path(tmp))


def _gpu_pods(lab: LabSession) -> list[dict[str, Any]]:
    pods = json.loads(lab.core.list_namespaced_pod(SHARE_NAMESPACE,
                                                   _preload_content=False).data)["items"]
    return [p for p in pods if p["spec"].get("schedulerName") == "gpufleet"]


def _claims(lab: LabSession) -> dict[str, dict[str, Any]]:
    got = client.CustomObjectsApi(lab.api).list_namespaced_custom_object(
        "resource.k8s.io", "v1", SHARE_NAMESPACE, "resourceclaims")
    return {c["metadata"]["name"]: c for c in got["items"]}


def _claim_names(pod: dict[str, Any]) -> list[str]:
    status = pod.get("status") or {}
    names = [s["resourceClaimName"] for s in status.get("resourceClaimStatuses") or ()
             if s.get("resourceClaimName")]
    ext = status.get("extendedResourceClaimStatus") or {}
    if ext.get("resourceClaimName"):
        names.append(ext["resourceClaimName"])
    return names


def test_the_examples_bind_through_claims_on_the_default_lab(dra_lab: LabSession) -> None:
    lab = dra_lab
    nodes = json.loads(lab.core.list_node(_preload_content=False).data)["items"]
    assert nodes and not [n["metadata"]["name"] for n in nodes
                          if any(k.startswith("nvidia.com/")
                                 for k in n["status"].get("capacity") or {})]
    client.CustomObjectsApi(lab.api).list_cluster_custom_object(
        "gpufleet.io", "v1alpha1", "gpuqueues")  # the chart's CRD is installed
    with running_controller(lab.api):
        for f in EXAMPLES:
            lab.kubectl("apply", "-n", SHARE_NAMESPACE, "-f", str(f))
        want = 6  # gang-train ×2, whole-gpu ×1, preemptible ×1, mig ×1, fractional ×1

        def all_bound() -> list[dict[str, Any]] | None:
            pods = _gpu_pods(lab)
            if len(pods) < want or any(not p["spec"].get("nodeName") for p in pods):
                return None
            return pods

        pods = wait_for("every example pod bound", all_bound, 120)
    claims = _claims(lab)
    for p in pods:
        name, node = p["metadata"]["name"], p["spec"]["nodeName"]
        got = _claim_names(p)
        assert got, f"{name} bound to {node} without a claim"
        for c in got:
            claim = claims[c]
            assert allocation_node(claim) == node, (name, c)
            assert p["metadata"]["uid"] in reserved_for(claim), (name, c)
    frac = next(p for p in pods if p["metadata"]["name"] == "fractional-inference")
    (share,) = _claim_names(frac)
    (res,) = claims[share]["status"]["allocation"]["devices"]["results"]
    assert res["driver"] == "gpu.gpufleet.io" and res.get("shareID"), res
    mig = next(p for p in pods if p["metadata"]["name"] == "mig-inference")
    (mig_claim,) = _claim_names(mig)
    (res,) = claims[mig_claim]["status"]["allocation"]["devices"]["results"]
    assert "mig-1g5gb" in res["device"], res
