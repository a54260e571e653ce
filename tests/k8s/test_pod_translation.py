"""Pod JSON → requests (whole, MIG, fractional, constraints, gangs) and annotations round trip."""

from __future__ import annotations

from gpufleet.decisions import Bind, MigSlot
from gpufleet.k8s.translate.pods import (
    assignment_annotations,
    assignment_of,
    binding_annotations,
    pod_info,
    requeued_keys,
    tolerated,
    tolerates,
)


def pod(name: str, limits: dict | None = None, ann: dict | None = None, labels: dict | None = None,
        **spec: object) -> dict:
    c = {"name": "c", "image": "x", "resources": {"limits": limits or {}}}
    return {"metadata": {"name": name, "namespace": "ns", "uid": "u-" + name,
                         "annotations": ann or {}, "labels": labels or {},
                         "creationTimestamp": "2026-01-01T00:00:10Z"},
            "spec": {"schedulerName": "gpufleet", "containers": [c], **spec},
            "status": {"phase": "Pending"}}


def test_whole_gpus_cpu_memory_and_queue_fields() -> None:
    p = pod_info(pod("a", {"nvidia.com/gpu": "2", "cpu": "1500m", "memory": "2Gi"}, priority=7))
    r = p.request
    assert r is not None and (r.num_gpu, r.gpu_milli, r.cpu_milli, r.memory_mib) == (
        2, 1000, 1500, 2048)
    assert p.key == "ns/a" and p.priority == 7 and p.pending and p.ours
    assert p.created_s == 1767225610.0


def test_init_container_max_rule() -> None:
    body = pod("a", {"cpu": "1"})
    body["spec"]["initContainers"] = [{"name": "i", "resources": {"requests": {"cpu": "3"}}}]
    assert pod_info(body).request.cpu_milli == 3000


def test_mig_and_fraction() -> None:
    mig = pod_info(pod("m", {"nvidia.com/mig-3g.20gb": "1"})).request
    assert mig is not None and mig.mig_profile == "3g.20gb"
    frac = pod_info(pod("f", ann={"gpu-fraction": "0.25", "gpu-memory": "4096"})).request
    assert frac is not None and (frac.num_gpu, frac.gpu_milli, frac.gpu_memory_mib) == (
        1, 250, 4096)
    assert frac.is_shared


def test_refusals_are_reasons_not_exceptions() -> None:
    two = pod_info(pod("m", {"nvidia.com/mig-1g.5gb": "2"}))
    assert two.request is None and "one MIG instance" in two.refusal
    bad = pod_info(pod("f", ann={"gpu-fraction": "1.5"}))
    assert bad.request is None and "gpu-fraction" in bad.refusal
    fields = pod_info(pod("z", {"nvidia.com/gpu": "1"}, affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"]}]}]}}}))
    assert fields.request is None and "matchFields" in fields.refusal


def test_other_node_requirements_stay_as_a_selector() -> None:
    p = pod_info(pod("z", {"nvidia.com/gpu": "1"},
                     nodeSelector={"topology.kubernetes.io/zone": "a",
                                   "nvidia.com/gpu.product": "Tesla-T4"}))
    assert p.request.gpu_models == {"T4"}
    assert p.selector == ((("topology.kubernetes.io/zone", "In", ("a",)),),)


def test_gpu_model_and_cuda_from_node_affinity() -> None:
    aff = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "nvidia.com/gpu.product", "operator": "In",
             "values": ["Tesla-T4", "NVIDIA-A100-SXM4-40GB"]},
            {"key": "nvidia.com/cuda.runtime.major", "operator": "Gt", "values": ["11"]}]}]}}}
    r = pod_info(pod("a", {"nvidia.com/gpu": "1"}, affinity=aff)).request
    assert r is not None and r.gpu_models == {"T4", "A100-40GB"} and r.min_cuda == 12000
    sel = pod_info(pod("b", {"nvidia.com/gpu": "1"},
                       nodeSelector={"nvidia.com/gpu.product": "Tesla-V100-SXM2-16GB"})).request
    assert sel is not None and sel.gpu_models == {"V100-16GB"}


def test_gang_label_and_min_available() -> None:
    p = pod_info(pod("w0", {"nvidia.com/gpu": "1"},
                     ann={"scheduling.x-k8s.io/min-available": "3"},
                     labels={"scheduling.x-k8s.io/pod-group": "train"}))
    assert p.group == "ns/train" and p.min_available == 3
    legacy = pod_info(pod("w1", labels={"pod-group.scheduling.sigs.k8s.io": "g",
                                        "pod-group.scheduling.sigs.k8s.io/min-available": "2"}))
    assert legacy.group == "ns/g" and legacy.min_available == 2


def test_annotations_round_trip_only_for_the_bound_node() -> None:
    whole = Bind("ns/a", "n1", gpus=(2, 3), milli_per_gpu=1000)
    frac = Bind("ns/b", "n1", gpus=(1,), milli_per_gpu=250)
    mig = Bind("ns/c", "n2", gpus=(), milli_per_gpu=0, mig=(MigSlot(7, "3g.20gb", 4),))
    for b in (whole, frac, mig):
        ann = {k: v for k, v in assignment_annotations(b).items() if v is not None}
        assert assignment_of(ann, b.node, b.job_id) == b
        assert assignment_of(ann, "elsewhere", b.job_id) is None  # stale: bound elsewhere
    assert assignment_of({"gpufleet.io/node": "n1", "gpufleet.io/gpus": "x"}, "n1", "k") is None



def test_binding_annotations_clear_stale_keys_it_cannot_delete() -> None:
    whole = Bind("ns/a", "n1", gpus=(2, 3), milli_per_gpu=1000)
    mig = Bind("ns/c", "n2", gpus=(), milli_per_gpu=0, mig=(MigSlot(7, "3g.20gb", 4),))
    # a fresh pod: only the keys that apply (a Binding cannot carry a deletion)
    assert binding_annotations(whole, {}) == {"gpufleet.io/node": "n1", "gpufleet.io/gpus": "2,3",
                                              "gpufleet.io/gpu-milli": "1000"}
    assert "gpufleet.io/gpu-milli" not in binding_annotations(mig, {})
    # stale keys already on the pod are written empty, and read back as absent
    stale = {"gpufleet.io/mig": "0:1g.5gb@0", "gpufleet.io/gpu-milli": "250", "other": "x"}
    for b in (whole, mig):
        ann = {**stale, **binding_annotations(b, stale)}
        assert assignment_of(ann, b.node, b.job_id) == b

def test_tolerations_follow_kubernetes_rules() -> None:
    t = "karpenter.sh/capacity-type=spot:NoSchedule"
    assert tolerates({"key": "karpenter.sh/capacity-type", "operator": "Equal", "value": "spot"}, t)
    assert tolerates({"key": "karpenter.sh/capacity-type", "operator": "Exists"}, t)
    assert tolerates({"operator": "Exists"}, t)
    assert not tolerates({"key": "karpenter.sh/capacity-type", "value": "od"}, t)
    assert not tolerates({"key": "karpenter.sh/capacity-type", "operator": "Exists",
                          "effect": "NoExecute"}, t)
    assert tolerated([{"key": "a", "operator": "Exists"}], [t, "a:NoSchedule"]) == {"a:NoSchedule"}


def job_pod(name: str, t: int, *, index: str | None = "0", owner: str = "j1",
            ann: dict | None = None, phase: str = "Pending", conditions: list | None = None,
            exit_code: int | None = None) -> dict:
    body = pod(name, {"nvidia.com/gpu": "1"}, ann={
        **({"batch.kubernetes.io/job-completion-index": index} if index is not None else {}),
        **(ann or {})})
    body["metadata"]["creationTimestamp"] = f"2026-01-01T00:00:{t:02d}Z"
    body["metadata"]["ownerReferences"] = [{"kind": "Job", "name": owner, "uid": "uid-" + owner,
                                            "controller": True}]
    body["status"] = {"phase": phase, "conditions": conditions or []}
    if exit_code is not None:
        body["status"]["containerStatuses"] = [
            {"name": "c", "state": {"terminated": {"exitCode": exit_code}}}]
    return body


EVICTED = [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}]


# (case, pods, the pending pods requeued_keys names)
REQUEUE_CASES = [
    ("the replacement of an evicted pod (same Job, same index, created later)",
     [job_pod("old", 1, phase="Failed", conditions=EVICTED), job_pod("new", 5)], {"ns/new"}),
    ("the replacement of a pod that exited 75 (checkpointed, asked to be rescheduled)",
     [job_pod("old", 1, phase="Failed", exit_code=75), job_pod("new", 5)], {"ns/new"}),
    ("a pod that crashed (exit 1) is a retry, not requeued work",
     [job_pod("old", 1, phase="Failed", exit_code=1), job_pod("new", 5)], set()),
    ("another index of the Job was evicted: not this pod's predecessor",
     [job_pod("old", 1, index="1", phase="Failed", conditions=EVICTED), job_pod("new", 5)],
     set()),
    ("another Job's pod was evicted", [job_pod("old", 1, owner="j2", phase="Failed",
                                               conditions=EVICTED), job_pod("new", 5)], set()),
    ("the evicted pod is gone, the Job controller counted the ignored failure on the new one",
     [job_pod("new", 5, ann={"batch.kubernetes.io/job-index-ignored-failure-count": "1"})],
     {"ns/new"}),
    ("a first pod of an Indexed Job (count 0) is new work",
     [job_pod("new", 5, ann={"batch.kubernetes.io/job-index-ignored-failure-count": "0"})],
     set()),
    ("a non-indexed Job: same owner, no index, still counts",
     [job_pod("old", 1, index=None, phase="Failed", conditions=EVICTED),
      job_pod("new", 5, index=None)], {"ns/new"}),
]


def test_requeued_keys_case_table() -> None:
    for case, pods, want in REQUEUE_CASES:
        assert requeued_keys(pod_info(p) for p in pods) == want, case
