"""The kubelet stand-in's per-pod rule on hand-made pods and claims: a bound pod runs only when
each claim it names exists, is allocated and is reserved for its UID; the device rules come
from the over-commit checker (tests/k8s/dra/test_claim_devices.py)."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.lab.kubelet_check import ClusterObjects, judge, kubelet_refusals


def pod(name: str, *claims: tuple[str, str], node: str | None = "n", phase: str = "Running",
        generated: dict[str, str] | None = None) -> dict:
    """``claims``: (the pod's name for it, ``claim:<name>`` or ``template:<name>``)."""
    rcs = [{"name": n, ("resourceClaimName" if ref.startswith("claim:") else
                        "resourceClaimTemplateName"): ref.split(":", 1)[1]} for n, ref in claims]
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
            "spec": {"nodeName": node, "containers": [], "resourceClaims": rcs},
            "status": {"phase": phase, "resourceClaimStatuses": [
                {"name": k, "resourceClaimName": v} for k, v in (generated or {}).items()]}}


def claim(name: str, allocated: bool = True, reserved: tuple[tuple[str, str], ...] = ()) -> dict:
    status: dict[str, Any] = {"reservedFor": [{"resource": "pods", "name": n, "uid": u}
                                              for n, u in reserved]}
    if allocated:
        status["allocation"] = {"devices": {"results": []}}
    return {"metadata": {"name": name, "namespace": "ns"}, "status": status}


# (case, pods, claims, refusal kinds)
CASES = [
    ("allocated and reserved for the pod", [pod("p", ("gpu", "claim:c"))],
     [claim("c", reserved=(("p", "uid-p"),))], []),
    ("a template's generated claim, ready", [pod("p", ("gpu", "template:t"),
                                                 generated={"gpu": "p-gpu-x"})],
     [claim("p-gpu-x", reserved=(("p", "uid-p"),))], []),
    ("unbound and finished pods are not judged",
     [pod("p", ("gpu", "claim:c"), node=None), pod("q", ("gpu", "claim:c"), phase="Succeeded")],
     [], []),
    ("the claim does not exist", [pod("p", ("gpu", "claim:c"))], [], ["no-claim"]),
    ("the template's claim not generated yet", [pod("p", ("gpu", "template:t"))], [],
     ["no-claim"]),
    ("not allocated", [pod("p", ("gpu", "claim:c"))], [claim("c", allocated=False)],
     ["unallocated"]),
    ("reserved for another pod", [pod("p", ("gpu", "claim:c"))],
     [claim("c", reserved=(("q", "uid-q"),))], ["unreserved"]),
    ("reserved for an earlier pod of the same name (another UID)",
     [pod("p", ("gpu", "claim:c"))], [claim("c", reserved=(("p", "uid-old"),))], ["unreserved"]),
    ("one claim shared by two pods, reserved for both",
     [pod("p", ("gpu", "claim:c")), pod("q", ("gpu", "claim:c"))],
     [claim("c", reserved=(("p", "uid-p"), ("q", "uid-q")))], []),
]


@pytest.mark.parametrize(("case", "pods", "claims", "kinds"), CASES, ids=[c[0] for c in CASES])
def test_kubelet_refuses_pods_whose_claims_are_not_ready(case: str, pods: list, claims: list,
                                                         kinds: list) -> None:
    assert [r.kind for r in kubelet_refusals(pods, claims)] == kinds


def test_report_joins_refusals_and_overcommits() -> None:
    node = {"metadata": {"name": "n", "labels": {"nvidia.com/gpu.product": "Tesla-T4",
                                                 "nvidia.com/gpu.count": "1"}},
            "spec": {}, "status": {"allocatable": {"nvidia.com/gpu": "1"}}}
    missing = claim("c", reserved=(("p", "uid-p"),))
    missing["status"]["allocation"]["devices"]["results"] = [
        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n", "device": "gpu-0"}]
    report = judge(ClusterObjects([node], [pod("p", ("gpu", "claim:c")),
                                           pod("q", ("gpu", "claim:gone"))], [missing], []))
    assert not report.ok
    assert report.pods_checked == 2 and report.claims_checked == 1
    assert report.lines() == [
        "pod ns/q: claim gpu: no-claim: ResourceClaim ns/gone does not exist",
        "n: missing: device gpu-0 of pool n (driver gpu.nvidia.com) is in no ResourceSlice "
        "(claim ns/c)"]
