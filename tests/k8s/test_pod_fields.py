"""Every annotation and label gpufleet reads from a pod (``k8s.translate.pod_fields``): a
malformed value refuses the pending pod with a reason naming the key, the value and what was
expected — through the scheduling cycle, so the pod is left pending, never bound as if the key
were absent — and valid values still read as before."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gpufleet.decisions import Bind, Refuse
from gpufleet.k8s.schedule.cycle import plan_cycle
from gpufleet.k8s.translate import pod_fields
from gpufleet.k8s.translate.pods import pod_info
from gpufleet.k8s.translate.snapshot import build_snapshot
from gpufleet.placement import get_policy

CREATED = 1_767_225_600.0  # 2026-01-01T00:00:00Z
GROUP = {"scheduling.x-k8s.io/pod-group": "g1"}
WHOLE_GPU = {"nvidia.com/gpu": "1"}


def pod(name: str = "p", ann: dict | None = None, labels: dict | None = None,
        limits: dict | None = None, node_name: str = "") -> dict:
    return {"metadata": {"name": name, "namespace": "ns", "uid": "u-" + name,
                         "annotations": ann or {}, "labels": labels or {},
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"schedulerName": "gpufleet", "nodeName": node_name,
                     "containers": [{"name": "c", "resources": {
                         "limits": WHOLE_GPU if limits is None else limits}}]},
            "status": {"phase": "Running" if node_name else "Pending"}}


def node(name: str = "t4", gpus: int = 4) -> dict:
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "Tesla-T4",
                                                  "nvidia.com/gpu.count": str(gpus)}},
            "spec": {}, "status": {"allocatable": {"cpu": "32", "memory": "128Gi",
                                                   "nvidia.com/gpu": str(gpus)}}}


def plan(pods: list[dict]):
    snap = build_snapshot([node()], pods)
    return plan_cycle(snap, get_policy("fgd-strand", tie_seed=0), np.random.default_rng(0))


SHARE = {"gpu-fraction": "0.5"}

# (where, key, malformed value, what else the pod carries: annotations, labels, limits)
BAD: list[tuple[str, str, str, dict, dict, dict | None]] = [
    ("annotation", "gpu-fraction", "1.5", {}, {}, {}),
    ("annotation", "gpu-fraction", "0", {}, {}, {}),
    ("annotation", "gpu-fraction", "500m", {}, {}, {}),
    ("annotation", "gpu-fraction", " 0.5", {}, {}, {}),
    ("annotation", "gpu-fraction", "half", {}, {}, {}),
    ("annotation", "gpu-memory", "4Gi", SHARE, {}, {}),
    ("annotation", "gpu-memory", "0", SHARE, {}, {}),
    ("annotation", "gpu-memory", "lots", {}, {}, None),  # malformed even without a share
    ("label", "scheduling.x-k8s.io/pod-group", "", {}, {}, None),
    ("label", "pod-group.scheduling.sigs.k8s.io", "", {}, {}, None),
    ("label", "pod-group.scheduling.sigs.k8s.io/name", "", {}, {}, None),
    ("annotation", "scheduling.x-k8s.io/min-available", "x", {}, GROUP, None),
    ("annotation", "scheduling.x-k8s.io/min-available", "-1", {}, GROUP, None),
    ("annotation", "scheduling.x-k8s.io/min-available", "0", {}, GROUP, None),
    ("annotation", "scheduling.x-k8s.io/min-available", "2.5", {}, GROUP, None),
    ("annotation", "scheduling.x-k8s.io/min-available", " 3", {}, GROUP, None),
    ("annotation", "scheduling.x-k8s.io/min-available", "²", {}, GROUP, None),
    ("label", "scheduling.x-k8s.io/min-available", "four", {}, GROUP, None),
    ("annotation", "pod-group.scheduling.sigs.k8s.io/min-available", "0", {},
     {"pod-group.scheduling.sigs.k8s.io": "g1"}, None),
    ("label", "pod-group.scheduling.sigs.k8s.io/min-available", "-2", {},
     {"pod-group.scheduling.sigs.k8s.io/name": "g1"}, None),
    ("annotation", "gpufleet.io/deadline", "tomorrow", {}, {}, None),
    ("annotation", "gpufleet.io/deadline", "2026-01-01T00:15:00", {}, {}, None),
    ("annotation", "gpufleet.io/duration", "10m", {}, {}, None),
    ("annotation", "gpufleet.io/duration", "-5", {}, {}, None),
    ("annotation", "gpufleet.io/duration", "inf", {}, {}, None),
    ("annotation", "gpufleet.io/value-of-time", "-1", {}, {}, None),
    ("annotation", "gpufleet.io/value-of-time", "ten", {}, {}, None),
    ("annotation", "gpufleet.io/value-of-time", "10$/h", {}, {}, None),
    ("annotation", "gpufleet.io/value-of-time", "nan", {}, {}, None),
    ("annotation", "gpufleet.io/value-of-time", "2e6", {}, {}, None),  # above the bound, 1e6
    ("annotation", "gpufleet.io/latency-sensitive", "yes", {}, {}, None),
    ("annotation", "gpufleet.io/latency-sensitive", "True", {}, {}, None),
    ("annotation", "karpenter.sh/do-not-disrupt", "yes", {}, {}, None),
    ("annotation", "karpenter.sh/do-not-disrupt", "True", {}, {}, None),
    ("annotation", "batch.kubernetes.io/job-completion-index", "first", {}, {}, None),
    ("annotation", "batch.kubernetes.io/job-completion-index", "-1", {}, {}, None),
    ("annotation", "batch.kubernetes.io/job-index-ignored-failure-count", "x", {}, {}, None),
]


def test_the_table_covers_every_spelling_of_every_field() -> None:
    read = {spelling for f in pod_fields.FIELDS for spelling in f.keys}
    assert {(where, key) for where, key, *_ in BAD} == read


@pytest.mark.parametrize(("where", "key", "value", "ann", "labels", "limits"), BAD,
                         ids=[f"{w} {k}={v!r}" for w, k, v, *_ in BAD])
def test_a_malformed_value_refuses_the_pending_pod_naming_key_and_value(
        where: str, key: str, value: str, ann: dict, labels: dict, limits: dict | None) -> None:
    body = pod(ann={**ann, key: value} if where == "annotation" else ann,
               labels={**labels, key: value} if where == "label" else labels, limits=limits)
    field = next(f for f in pod_fields.FIELDS if (where, key) in f.keys)
    info = pod_info(body)
    assert info.request is None and info.refusal is not None
    assert info.refusal.startswith(f"{where} {key}: {json.dumps(value, ensure_ascii=False)} "
                                   f"is not {field.expected}")
    p = plan([body])
    assert not p.of(Bind)
    assert [(r.job_id, r.message) for r in p.of(Refuse)] == [("ns/p", info.refusal)]


def test_the_gang_with_an_unreadable_size_is_refused_not_bound_as_single_pods() -> None:
    ann = {"scheduling.x-k8s.io/min-available": "x"}
    members = [pod("w0", ann=ann, labels=GROUP), pod("w1", ann=ann, labels=GROUP)]
    p = plan(members)
    want = 'annotation scheduling.x-k8s.io/min-available: "x" is not a whole number >= 1, e.g. "4"'
    assert not p.of(Bind)
    assert sorted((r.job_id, r.message) for r in p.of(Refuse)) == [
        ("ns/w0", want), ("ns/w1", want)]
    # one member's bad size holds the whole group: its other members are not bound either
    p = plan([pod("w0", ann=ann, labels=GROUP),
              pod("w1", ann={"scheduling.x-k8s.io/min-available": "2"}, labels=GROUP)])
    assert not p.of(Bind) and {r.message for r in p.of(Refuse)} == {want}


@pytest.mark.parametrize(("ann", "labels", "named"), [
    ({}, {"scheduling.x-k8s.io/pod-group": "a", "pod-group.scheduling.sigs.k8s.io": "b"},
     'label scheduling.x-k8s.io/pod-group: "a" and label pod-group.scheduling.sigs.k8s.io: '
     '"b" disagree'),
    ({"scheduling.x-k8s.io/min-available": "3"},
     {**GROUP, "scheduling.x-k8s.io/min-available": "2"},
     'annotation scheduling.x-k8s.io/min-available: "3" and label '
     'scheduling.x-k8s.io/min-available: "2" disagree'),
])
def test_spellings_that_disagree_refuse_the_pod(ann: dict, labels: dict, named: str) -> None:
    info = pod_info(pod(ann=ann, labels=labels))
    assert info.request is None and info.refusal is not None and info.refusal.startswith(named)


def test_a_long_value_is_quoted_cut_short() -> None:
    info = pod_info(pod(ann={"gpufleet.io/duration": "9" * 70 + "s"}))
    assert info.refusal == ('annotation gpufleet.io/duration: "' + "9" * 64 + '…" is not a '
                            'number of seconds >= 0, e.g. "3600"')


def test_a_share_beside_whole_gpus_is_refused_naming_both() -> None:
    info = pod_info(pod(ann=SHARE, limits=WHOLE_GPU))
    assert info.request is None and info.refusal == (
        'annotation gpu-fraction: "0.5" asks for a share of one GPU; the pod cannot also ask '
        "for nvidia.com/gpu")


# hand-worked: share × 1000 milli-GPU; the deadline 01:15+01:00 is 00:15Z, 900 s after creation
@pytest.mark.parametrize(("ann", "labels", "limits", "want"), [
    ({"gpu-fraction": "0.25"}, {}, {}, {"gpu_milli": 250, "gpu_memory_mib": 0}),
    ({"gpu-fraction": ".5", "gpu-memory": "4096"}, {}, {},
     {"gpu_milli": 500, "gpu_memory_mib": 4096}),
    ({"gpu-fraction": "0.125"}, {}, {}, {"gpu_milli": 125}),
    ({"gpu-fraction": "1"}, {}, {}, {"gpu_milli": 1000}),
    ({"scheduling.x-k8s.io/min-available": "3"}, {"scheduling.x-k8s.io/pod-group": "train"},
     None, {"group": "ns/train", "min_available": 3}),
    ({}, {"pod-group.scheduling.sigs.k8s.io/name": "g",
          "pod-group.scheduling.sigs.k8s.io/min-available": "2"},
     None, {"group": "ns/g", "min_available": 2}),
    ({"scheduling.x-k8s.io/min-available": "3"},
     {**GROUP, "scheduling.x-k8s.io/min-available": "03"},  # the same number twice
     None, {"group": "ns/g1", "min_available": 3}),
    ({}, GROUP, None, {"group": "ns/g1", "min_available": 1}),
    ({"gpufleet.io/deadline": "2026-01-01T01:15:00+01:00", "gpufleet.io/duration": "90.5"}, {},
     None, {"deadline_s": CREATED + 900, "work_s": 90.5}),
    ({"karpenter.sh/do-not-disrupt": "false"}, {}, None, {}),
    ({"karpenter.sh/do-not-disrupt": "true"}, {}, None, {}),
    ({"batch.kubernetes.io/job-completion-index": "3",
      "batch.kubernetes.io/job-index-ignored-failure-count": "2"}, {}, None,
     {"completion_index": "3", "ignored_failures": 2}),
    ({}, {}, None, {"group": None, "min_available": 1, "deadline_s": None, "work_s": None,
                    "completion_index": None, "ignored_failures": 0}),
])
def test_valid_values_read_as_written(ann: dict, labels: dict, limits: dict | None,
                                      want: dict) -> None:
    info = pod_info(pod(ann=ann, labels=labels, limits=limits))
    assert info.refusal is None and info.request is not None
    got = {k: getattr(info.request if k.startswith("gpu_") else info, k) for k in want}
    assert got == want


def test_do_not_disrupt_reads_as_a_bool() -> None:
    def read(v: str) -> bool | None:
        return pod_fields.DO_NOT_DISRUPT.get({"annotations": {"karpenter.sh/do-not-disrupt": v}})
    assert (read("true"), read("false"), read("yes")) == (True, False, None)
    assert pod_fields.DO_NOT_DISRUPT.get({}) is None


def test_a_bound_pod_keeps_its_request_and_reads_a_malformed_value_as_absent() -> None:
    bound = pod("r", node_name="t4", labels=GROUP,
                ann={"scheduling.x-k8s.io/min-available": "x", "gpufleet.io/deadline": "soon",
                     "gpufleet.io/node": "t4", "gpufleet.io/gpus": "0"})
    info = pod_info(bound)
    assert info.refusal is None and info.request is not None and info.request.num_gpu == 1
    assert (info.min_available, info.deadline_s) == (1, None)
    snap = build_snapshot([node(gpus=1)], [bound, pod("new")])
    assert snap.allocations["ns/r"].bind.gpus == (0,)  # still booked: the new pod must wait


def test_every_field_documents_itself() -> None:
    for f in pod_fields.FIELDS:
        assert f.keys and f.means and f.absent and f.expected
        if f.example is not None:
            assert f.parse(f.example) is not None, f.keys


@pytest.mark.parametrize(("ann", "v", "sensitive"), [
    ({}, None, None),  # absent: the team's or the scenario's (k8s.settings.LiveDelays)
    ({"gpufleet.io/value-of-time": "10"}, 10.0, None),
    ({"gpufleet.io/value-of-time": "2.5", "gpufleet.io/latency-sensitive": "true"}, 2.5, True),
    ({"gpufleet.io/value-of-time": "0", "gpufleet.io/latency-sensitive": "false"}, 0.0, False),
    ({"gpufleet.io/latency-sensitive": "true"}, None, True),
])
def test_the_price_of_delay_annotations_read_into_the_pod(ann: dict, v: float | None,
                                                          sensitive: bool | None) -> None:
    info = pod_info(pod(ann=ann))
    assert info.refusal is None and info.request is not None
    assert (info.value_of_time, info.latency_sensitive) == (v, sensitive)


def test_a_bad_price_of_delay_refuses_the_pending_pod_and_reads_as_absent_when_bound() -> None:
    ann = {"gpufleet.io/value-of-time": "-3"}
    pending = pod_info(pod(ann=ann))
    assert pending.request is None and pending.refusal == (
        'annotation gpufleet.io/value-of-time: "-3" is not a number of dollars per GPU-hour '
        'in [0, 1e6], e.g. "10"')
    bound = pod_info(pod(ann={**ann, "gpufleet.io/latency-sensitive": "maybe"},
                         node_name="t4"))
    assert bound.refusal is None and bound.request is not None
    assert (bound.value_of_time, bound.latency_sensitive) == (None, None)
