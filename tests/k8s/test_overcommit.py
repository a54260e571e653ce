"""The over-commit checker on hand-made objects: each kind of over-commit is caught, and a full
but legal node is not flagged. Node: 4 GPUs (T4), or an A100-40GB with GPUs 0-1 whole and
2-3 in MIG mode."""

from __future__ import annotations

import pytest

from gpufleet.k8s.translate.overcommit import find_overcommits, overcommitted_gpus
from gpufleet.k8s.translate.snapshot import build_snapshot


def node(name: str = "n", gpus: int = 4, mig: int = 0) -> dict:
    product = "NVIDIA-A100-SXM4-40GB" if mig else "Tesla-T4"
    alloc = {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": str(gpus - mig)}
    if mig:
        alloc["nvidia.com/mig-1g.5gb"] = str(7 * mig)
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product,
                                                  "nvidia.com/gpu.count": str(gpus)}},
            "spec": {}, "status": {"allocatable": alloc}}


def ours(name: str, gpus: str = "", milli: int = 1000, mig: str = "", on: str = "n",
         phase: str = "Running") -> dict:
    ann = {"gpufleet.io/node": on, "gpufleet.io/gpus": gpus}
    if mig:
        ann["gpufleet.io/mig"] = mig
        ann["gpufleet.io/gpus"] = mig.split(":")[0]
    else:
        ann["gpufleet.io/gpu-milli"] = str(milli)
    return {"metadata": {"name": name, "namespace": "ns", "annotations": ann},
            "spec": {"nodeName": on, "containers": []}, "status": {"phase": phase}}


def foreign(name: str, gpus: int, on: str = "n") -> dict:
    """A pod another scheduler bound: no gpufleet annotations, a whole-GPU request."""
    return {"metadata": {"name": name, "namespace": "ns"},
            "spec": {"nodeName": on, "schedulerName": "default-scheduler", "containers": [
                {"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": {"phase": "Running"}}


# (case, node, pods, kinds found, GPUs over-committed)
CASES = [
    ("full but legal", node(), [ours("a", "0,1"), ours("b", "2", 500), ours("c", "2", 500),
                                ours("d", "3", 250), foreign("e", 0)], [], 0),
    ("finished pods hold nothing", node(), [ours("a", "0"), ours("b", "0", phase="Succeeded")],
     [], 0),
    ("milli over 1000", node(), [ours("a", "1", 600), ours("b", "1", 500)], ["milli"], 1),
    ("whole GPU shared", node(), [ours("a", "0,1"), ours("b", "1", 100)], ["whole", "milli"], 1),
    ("whole GPU twice", node(), [ours("a", "3"), ours("b", "3")], ["whole", "milli"], 1),
    ("index past the node's GPUs", node(), [ours("a", "4")], ["index"], 1),
    ("MIG slot twice", node(gpus=4, mig=2), [ours("a", mig="2:1g.5gb@0"),
                                             ours("b", mig="2:1g.5gb@0")], ["mig"], 1),
    ("MIG slots overlapping", node(gpus=4, mig=2), [ours("a", mig="3:3g.20gb@4"),
                                                    ours("b", mig="3:1g.5gb@5")], ["mig"], 1),
    ("MIG slots side by side", node(gpus=4, mig=2), [ours("a", mig="3:4g.20gb@0"),
                                                     ours("b", mig="3:3g.20gb@4")], [], 0),
    ("MIG and a share on one GPU", node(gpus=4, mig=2), [ours("a", mig="2:1g.5gb@0"),
                                                         ours("b", "2", 500)], ["mig"], 1),
    ("MIG slot that does not exist", node(gpus=4, mig=2), [ours("a", mig="2:1g.5gb@7")],
     ["index"], 1),
    ("annotations that do not parse", node(), [ours("a", "zero")], ["index"], 0),
    ("another scheduler's pods over the rest", node(), [ours("a", "0,1,2"), foreign("b", 2)],
     ["count"], 1),
    ("another scheduler's pods in the rest", node(), [ours("a", "0,1"), foreign("b", 2)], [], 0),
    ("annotations for another node are not ours", node(), [ours("a", "0", on="n"),
                                                          {**ours("b", "0"), "spec": {
                                                              "nodeName": "m"}}], [], 0),
]


@pytest.mark.parametrize(("case", "n", "pods", "kinds", "gpus"), CASES, ids=[c[0] for c in CASES])
def test_each_kind_of_overcommit_is_caught(case: str, n: dict, pods: list, kinds: list,
                                           gpus: int) -> None:
    found = find_overcommits([n], pods)
    assert sorted(f.kind for f in found) == sorted(kinds), [str(f) for f in found]
    assert overcommitted_gpus(found) == gpus


def test_findings_name_the_node_gpu_and_pods() -> None:
    (f,) = find_overcommits([node()], [ours("a", "1", 600), ours("b", "1", 500)])
    assert str(f) == "n GPU 1: milli: 1100 milli-GPU given out of 1000 (ns/a, ns/b)"


def test_an_overcommitted_pod_still_holds_what_is_left_of_its_gpus() -> None:
    """The snapshot side of the same cases: b (500 milli on GPU 1, where a holds 600) and d
    (GPU 3, which c holds whole) cannot be booked and are reported, but they run there all
    the same, so what is left of their GPUs is taken: GPU 1 is full to placement, not 400
    free. GPU 0 stays free."""
    snap = build_snapshot([node()], [ours("a", "1", 600), ours("b", "1", 500),
                                     ours("c", "2,3"), ours("d", "3")])
    assert sorted(snap.unaccounted) == ["ns/b", "ns/d"]
    assert list(snap.state.free_milli[snap.state.index["n"], :4]) == [1000, 0, 0, 0]
    assert sorted(snap.allocations) == ["ns/a", "ns/c"]
