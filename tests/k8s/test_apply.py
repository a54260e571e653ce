"""The Applier's Refuse path without an API server: a refusal becomes the pod's
``PodScheduled=False`` condition and one ``FailedScheduling`` Event with the same message."""

from __future__ import annotations

from typing import Any

import numpy as np

from gpufleet.decisions import Refuse
from gpufleet.k8s.schedule.apply import Applier
from gpufleet.k8s.schedule.cycle import plan_cycle
from gpufleet.k8s.schedule.telemetry import ControllerMetrics
from gpufleet.k8s.translate.snapshot import build_snapshot
from gpufleet.placement import get_policy


class RecordingCore:
    """The status patches and Events the Applier writes."""

    def __init__(self) -> None:
        self.conditions: list[tuple[str, dict]] = []  # (pod name, condition)
        self.events: list[dict] = []

    def patch_namespaced_pod_status(self, name: str, ns: str, body: dict, **_: Any) -> None:
        self.conditions.extend((name, c) for c in body["status"]["conditions"])

    def create_namespaced_event(self, ns: str, body: dict, **_: Any) -> None:
        self.events.append(body)


def gang_pod(name: str, size: str) -> dict:
    return {"metadata": {"name": name, "namespace": "ns", "uid": "u-" + name,
                         "annotations": {"scheduling.x-k8s.io/min-available": size},
                         "labels": {"scheduling.x-k8s.io/pod-group": "g1"},
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"schedulerName": "gpufleet", "containers": [
                {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Pending"}}


def test_a_malformed_annotation_reaches_the_condition_and_the_event() -> None:
    node = {"metadata": {"name": "t4", "labels": {"nvidia.com/gpu.product": "Tesla-T4",
                                                  "nvidia.com/gpu.count": "2"}},
            "spec": {}, "status": {"allocatable": {"cpu": "8", "memory": "32Gi",
                                                   "nvidia.com/gpu": "2"}}}
    body = gang_pod("w0", "x")
    plan = plan_cycle(build_snapshot([node], [body]), get_policy("fgd-strand", tie_seed=0),
                      np.random.default_rng(0))
    want = 'annotation scheduling.x-k8s.io/min-available: "x" is not a whole number >= 1, e.g. "4"'
    assert plan.decisions == [Refuse("ns/w0", want, never=True)]
    core = RecordingCore()
    applier = Applier(core, ControllerMetrics(), workers=1)
    try:
        out = applier.apply(plan.decisions, {"ns/w0": body})
        assert out.refused == ["ns/w0"] and not out.errors
        ((name, cond),) = core.conditions
        assert name == "w0" and (cond["type"], cond["status"], cond["reason"],
                                 cond["message"]) == ("PodScheduled", "False", "Unschedulable",
                                                      want)
        (event,) = core.events
        assert (event["reason"], event["type"], event["message"]) == (
            "FailedScheduling", "Warning", want)
        assert event["involvedObject"]["name"] == "w0"
        # the next cycle's same refusal writes nothing again: one Event per message
        applier.apply(plan.decisions, {"ns/w0": body})
        assert len(core.conditions) == len(core.events) == 1
    finally:
        applier.close()
