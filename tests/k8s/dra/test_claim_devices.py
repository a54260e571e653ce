"""The over-commit checker on ResourceClaims judged against ResourceSlices, hand-made JSON.

Node ``n``: an A100-40GB board with 2 GPUs, pool ``n`` of driver ``gpu.nvidia.com``:

* ``gpu-0`` (minor 0, GPU index 0): shareable (``allowMultipleAllocations``), memory 40Gi;
* ``gpu-1`` (minor 1, index 1): exclusive, memory 40Gi, in dynamic-MIG mode: it and its MIG
  devices ``gpu-1-mig-3g20gb-9-0`` (slices 0-3), ``gpu-1-mig-3g20gb-9-4`` (slices 4-7) and
  ``gpu-1-mig-1g5gb-19-5`` (slice 5) all consume counter set ``gpu-1-counter-set`` (memory
  40Gi, ``memory-slice-0..7`` = 1 each): the whole GPU takes all of it, a 3g.20gb 20Gi and its
  four slices, the 1g.5gb 5Gi and its slice.

Node ``m``: one T4 ``gpu-0`` in pool ``m``. Hand-worked numbers are in each case's name.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.k8s.dra.claim_devices import judge_claims, pod_claim_names
from gpufleet.k8s.translate.node_selector import matches_node_selector
from gpufleet.k8s.translate.overcommit import find_overcommits, overcommitted_gpus

D = "gpu.nvidia.com"


def node(name: str, product: str, gpus: int) -> dict:
    return {"metadata": {"name": name, "labels": {
        "nvidia.com/gpu.product": product, "nvidia.com/gpu.count": str(gpus),
        "kubernetes.io/hostname": name}},
        "spec": {}, "status": {"allocatable": {"cpu": "64", "memory": "256Gi",
                                                "nvidia.com/gpu": str(gpus)}}}


NODES = [node("n", "NVIDIA-A100-SXM4-40GB", 2), node("m", "Tesla-T4", 1)]


def dev(name: str, minor: int, memory: str, *, kind: str = "gpu", profile: str = "",
        multi: bool = False, counters: dict[str, str] | None = None,
        product: str = "NVIDIA A100-SXM4-40GB") -> dict:
    attrs: dict[str, Any] = {"type": {"string": kind}, "minor": {"int": minor},
                             "productName": {"string": product}}
    if profile:
        attrs["profile"] = {"string": profile}
    d: dict[str, Any] = {"name": name, "attributes": attrs,
                         "capacity": {"memory": {"value": memory}}}
    if multi:
        d["allowMultipleAllocations"] = True
    if counters is not None:
        d["consumesCounters"] = [{"counterSet": "gpu-1-counter-set", "counters": {
            k: {"value": v} for k, v in counters.items()}}]
    return d


def slices_of(node_name: str, devices: list[dict], counter_sets: list[dict] | None = None,
              generation: int = 1) -> list[dict]:
    chunks = ([{"sharedCounters": counter_sets}] if counter_sets else []) + [{"devices": devices}]
    return [{"metadata": {"name": f"{node_name}-{i}"},
             "spec": {"driver": D, "nodeName": node_name,
                      "pool": {"name": node_name, "generation": generation,
                               "resourceSliceCount": len(chunks)}, **chunk}}
            for i, chunk in enumerate(chunks)]


def slices_on(first: int, last: int) -> dict[str, str]:
    return {f"memory-slice-{i}": "1" for i in range(first, last + 1)}


GPU1_SET = {"name": "gpu-1-counter-set",
            "counters": {"memory": {"value": "40Gi"}, **{f"memory-slice-{i}": {"value": "1"}
                                                        for i in range(8)}}}
N_DEVICES = [
    dev("gpu-0", 0, "40Gi", multi=True),
    dev("gpu-1", 1, "40Gi", counters={"memory": "40Gi", **slices_on(0, 7)}),
    dev("gpu-1-mig-3g20gb-9-0", 1, "20Gi", kind="mig", profile="3g.20gb",
        counters={"memory": "20Gi", **slices_on(0, 3)}),
    dev("gpu-1-mig-3g20gb-9-4", 1, "20Gi", kind="mig", profile="3g.20gb",
        counters={"memory": "20Gi", **slices_on(4, 7)}),
    dev("gpu-1-mig-1g5gb-19-5", 1, "5Gi", kind="mig", profile="1g.5gb",
        counters={"memory": "5Gi", **slices_on(5, 5)}),
]
SLICES = slices_of("n", N_DEVICES, [GPU1_SET]) + slices_of(
    "m", [dev("gpu-0", 0, "16Gi", product="Tesla T4")])
# the same devices published without counters: only the per-GPU rule sees whole + MIG
NO_COUNTERS = slices_of("n", [{k: v for k, v in d.items() if k != "consumesCounters"}
                              for d in N_DEVICES])


def claim(name: str, *results: tuple, pods: tuple[str, ...] = (), on: str | None = "n") -> dict:
    """``results``: (device, memory consumed or None, pool); a consumed amount makes it a share."""
    out = []
    for i, (device, used, *pool) in enumerate(results):
        r: dict[str, Any] = {"request": "gpu", "driver": D, "pool": pool[0] if pool else "n",
                             "device": device}
        if used is not None:
            r |= {"shareID": f"00000000-0000-0000-0000-{i:012d}",
                  "consumedCapacity": {"memory": used}}
        out.append(r)
    alloc: dict[str, Any] = {"devices": {"results": out}}
    if on is not None:
        alloc["nodeSelector"] = {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [on]}]}]}
    return {"metadata": {"name": name, "namespace": "ns"},
            "status": {"allocation": alloc,
                       "reservedFor": [{"resource": "pods", "name": p, "uid": f"uid-{p}"}
                                       for p in pods]}}


def pod(name: str, *claims: str, on: str = "n", gpus: str = "", milli: int = 1000,
        mig: str = "", whole: int = 0, extended: str = "") -> dict:
    """A pod bound to ``on`` using ``claims``; ``gpus``/``mig`` add gpufleet's annotations;
    ``whole`` asks ``nvidia.com/gpu`` with no annotations (another scheduler's), ``extended``
    names the extended-resource claim serving it."""
    ann: dict[str, str] = {}
    if gpus or mig:
        ann = {"gpufleet.io/node": on, "gpufleet.io/gpus": gpus or mig.split(":")[0]}
        ann |= {"gpufleet.io/mig": mig} if mig else {"gpufleet.io/gpu-milli": str(milli)}
    limits = {"nvidia.com/gpu": str(whole)} if whole else {}
    status: dict[str, Any] = {"phase": "Running"}
    if extended:
        status["extendedResourceClaimStatus"] = {"resourceClaimName": extended,
                                                 "requestMappings": []}
    return {"metadata": {"name": name, "namespace": "ns", "annotations": ann},
            "spec": {"nodeName": on, "containers": [{"name": "c", "resources": {
                "limits": limits}}],
                "resourceClaims": [{"name": c, "resourceClaimName": c} for c in claims]},
            "status": status}


# (case, claims, pods, slices, kinds found, GPUs over-committed)
CASES = [
    ("legal: two 20Gi shares of 40Gi, MIG 3g.20gb at 0 and 4 (40Gi of 40Gi, slices disjoint)",
     [claim("a", ("gpu-0", "20Gi")), claim("b", ("gpu-0", "20Gi")),
      claim("c", ("gpu-1-mig-3g20gb-9-0", None), ("gpu-1-mig-3g20gb-9-4", None))],
     [pod("pa", "a"), pod("pb", "b"), pod("pc", "c")], SLICES, [], 0),
    ("a device no slice publishes", [claim("a", ("gpu-7", None))], [pod("pa", "a")], SLICES,
     ["missing"], 1),
    ("a device only an older pool generation published",
     [claim("a", ("gpu-9", None))], [],
     SLICES + slices_of("n", [dev("gpu-9", 9, "40Gi")], generation=0), ["missing"], 1),
    ("exclusive gpu-1 in two claims (one device: its counters count once)",
     [claim("a", ("gpu-1", None)), claim("b", ("gpu-1", None))], [], SLICES, ["exclusive"], 1),
    ("one claim holding exclusive gpu-1 twice",
     [claim("a", ("gpu-1", None), ("gpu-1", None))], [], SLICES, ["exclusive"], 1),
    ("shares 30Gi + 20Gi = 50Gi of 40Gi", [claim("a", ("gpu-0", "30Gi")),
                                           claim("b", ("gpu-0", "20Gi"))], [], SLICES,
     ["capacity"], 1),
    ("a share without consumedCapacity takes all: 40Gi + 1Gi",
     [claim("a", ("gpu-0", None)), claim("b", ("gpu-0", "1Gi"))], [], SLICES, ["capacity"], 1),
    ("four 10Gi shares fill 40Gi exactly", [claim(c, ("gpu-0", "10Gi")) for c in "abcd"], [],
     SLICES, [], 0),
    ("MIG 3g.20gb at 4 and 1g.5gb at 5 share memory-slice-5 (2 of 1)",
     [claim("a", ("gpu-1-mig-3g20gb-9-4", None)), claim("b", ("gpu-1-mig-1g5gb-19-5", None))],
     [], SLICES, ["counters", "mig"], 1),
    ("whole gpu-1 and its 3g.20gb at 0: counters 60Gi of 40Gi and the per-GPU rule",
     [claim("a", ("gpu-1", None)), claim("b", ("gpu-1-mig-3g20gb-9-0", None))], [], SLICES,
     ["counters", "mig"], 1),
    ("whole gpu-1 and its 3g.20gb at 0 with no counters published: the per-GPU rule alone",
     [claim("a", ("gpu-1", None)), claim("b", ("gpu-1-mig-3g20gb-9-0", None))], [],
     NO_COUNTERS, ["mig"], 1),
    ("an annotation pod on GPU 1, which a claim holds whole (2000 milli)",
     [claim("a", ("gpu-1", None), pods=("pa",))], [pod("pa", "a"), pod("pb", gpus="1")], SLICES,
     ["whole", "milli"], 1),
    ("annotation 500 milli + claim 20Gi of 40Gi (500) on GPU 0 fit",
     [claim("a", ("gpu-0", "20Gi"), pods=("pa",))], [pod("pa", "a"), pod("pb", gpus="0",
                                                                          milli=500)],
     SLICES, [], 0),
    ("annotation 500 milli + claim 30Gi of 40Gi (750) on GPU 0: 1250 milli",
     [claim("a", ("gpu-0", "30Gi"), pods=("pa",))], [pod("pa", "a"), pod("pb", gpus="0",
                                                                          milli=500)],
     SLICES, ["milli"], 1),
    ("one pod holding GPU 1 by its claim and recording it in annotations counts once",
     [claim("a", ("gpu-1", None), pods=("pa",))], [pod("pa", "a", gpus="1")], SLICES, [], 0),
    ("annotation MIG 3g.20gb@4 and a claim's 3g.20gb at 4 on GPU 1",
     [claim("a", ("gpu-1-mig-3g20gb-9-4", None), pods=("pa",))],
     [pod("pa", "a"), pod("pb", mig="1:3g.20gb@4")], SLICES, ["mig"], 1),
    ("a pod on n whose claim's nodeSelector names m",
     [claim("a", ("gpu-0", None, "m"), pods=("pa",), on="m")], [pod("pa", "a")], SLICES,
     ["node", "node"], 0),
    ("a pod on n whose claim (no nodeSelector) holds m's device",
     [claim("a", ("gpu-0", None, "m"), pods=("pa",), on=None)], [pod("pa", "a")], SLICES,
     ["node"], 0),
    ("a pod served by an extended-resource claim is judged by the claim, not counted again",
     [claim("ext", ("gpu-1", None), pods=("pa",))],
     [pod("pa", whole=1, extended="ext"), pod("pb", gpus="0")], SLICES, [], 0),
    ("another scheduler's nvidia.com/gpu pod with GPU 0 annotated and GPU 1 claimed: 1 short",
     [claim("a", ("gpu-1", None), pods=("pa",))],
     [pod("pa", "a"), pod("pb", gpus="0"), pod("pc", whole=1)], SLICES, ["count"], 1),
]


@pytest.mark.parametrize(("case", "claims", "pods", "slices", "kinds", "gpus"), CASES,
                         ids=[c[0] for c in CASES])
def test_each_kind_of_claim_overcommit_is_caught(case: str, claims: list, pods: list,
                                                 slices: list, kinds: list, gpus: int) -> None:
    found = find_overcommits(NODES, pods, claims=claims, slices=slices)
    assert sorted(f.kind for f in found) == sorted(kinds), [str(f) for f in found]
    assert overcommitted_gpus(found) == gpus


def test_findings_name_the_device_and_the_claims() -> None:
    found = find_overcommits(NODES, [], claims=[claim("a", ("gpu-0", "30Gi")),
                                                claim("b", ("gpu-0", "20Gi"))], slices=SLICES)
    assert [str(f) for f in found] == [
        "n GPU 0: capacity: device gpu-0 memory: 50Gi consumed of 40Gi by 2 share(s) "
        "(claim ns/a, claim ns/b)"]


def test_claims_without_slices_are_all_missing_and_no_claims_change_nothing() -> None:
    assert [f.kind for f in judge_claims([claim("a", ("gpu-0", None))], []).findings] == [
        "missing"]
    assert find_overcommits(NODES, [pod("pa", gpus="0")]) == []


def test_claim_uses_map_minors_to_the_nodes_gpu_indices() -> None:
    # minors 4 and 6 on a node: GPU indices 0 and 1, as the node's FleetState row numbers them
    slices = slices_of("n", [dev("gpu-4", 4, "40Gi"), dev("gpu-6", 6, "40Gi", multi=True)])
    judged = judge_claims([claim("a", ("gpu-6", "10Gi"))], slices)
    (use,) = judged.gpu_uses["n"][1]
    assert use.milli == 250


# (case, selector, node, selected)
SELECTORS = [
    ("matchFields on the node's name", {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["n"]}]}]}, NODES[0], True),
    ("matchFields on another name", {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["m"]}]}]}, NODES[0], False),
    ("label expression, second term", {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                               "values": ["x"]}]},
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                               "values": ["n"]}]}]}, NODES[0], True),
    ("no terms select nothing", {"nodeSelectorTerms": []}, NODES[0], False),
]


@pytest.mark.parametrize(("case", "sel", "n", "want"), SELECTORS, ids=[c[0] for c in SELECTORS])
def test_allocation_node_selector(case: str, sel: dict, n: dict, want: bool) -> None:
    assert matches_node_selector(sel, n) is want


def test_pod_claim_names_from_spec_status_and_extended_resources() -> None:
    p = {"spec": {"resourceClaims": [{"name": "a", "resourceClaimName": "direct"},
                                     {"name": "b", "resourceClaimTemplateName": "t"},
                                     {"name": "c", "resourceClaimTemplateName": "t"}]},
         "status": {"resourceClaimStatuses": [{"name": "b", "resourceClaimName": "pod-b-x"}],
                    "extendedResourceClaimStatus": {"resourceClaimName": "pod-ext-y"}}}
    assert pod_claim_names(p) == [("a", "direct"), ("b", "pod-b-x"), ("c", None),
                                  ("(extended resources)", "pod-ext-y")]
