"""The Applier without an API server: a refusal becomes the pod's ``PodScheduled=False``
condition and one ``FailedScheduling`` Event with the same message; a replica whose Lease
renewal is past its renew deadline writes nothing; an accepted eviction, and only that, is
counted by queue and cause with the running GPU-seconds it interrupts."""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
import pytest
from kubernetes.client.exceptions import ApiException

from gpufleet.decisions import Bind, Cause, Preempt, Refuse
from gpufleet.k8s.schedule.apply import Applier, running_gpu_seconds
from gpufleet.k8s.schedule.cycle import plan_cycle
from gpufleet.k8s.schedule.telemetry import ControllerMetrics
from gpufleet.k8s.translate.snapshot import build_snapshot
from gpufleet.k8s.watch.leader import LeaderElector
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


class FakeLeases:
    """One Lease in memory, as ``coordination.k8s.io/v1`` serves it: create, read, replace."""

    class Resp:
        def __init__(self, obj: dict) -> None:
            self.data = json.dumps(obj).encode()

        def release_conn(self) -> None:
            pass

    def __init__(self) -> None:
        self.lease: dict | None = None

    def read_namespaced_lease(self, name: str, ns: str, **_: Any) -> FakeLeases.Resp:
        if self.lease is None:
            raise ApiException(status=404)
        return self.Resp(self.lease)

    def create_namespaced_lease(self, ns: str, body: dict, **_: Any) -> FakeLeases.Resp:
        self.lease = {**body, "metadata": {**body["metadata"], "resourceVersion": "1"}}
        return self.Resp(self.lease)

    def replace_namespaced_lease(self, name: str, ns: str, body: dict,
                                 **_: Any) -> FakeLeases.Resp:
        assert self.lease is not None
        rv = int(self.lease["metadata"]["resourceVersion"]) + 1
        self.lease = {**body, "metadata": {**body["metadata"], "resourceVersion": str(rv)}}
        return self.Resp(self.lease)


class WritingCore(RecordingCore):
    """Every write the Applier makes, by kind."""

    def __init__(self) -> None:
        super().__init__()
        self.bindings: list[dict] = []
        self.evictions: list[str] = []

    def create_namespaced_binding(self, ns: str, body: dict, **_: Any) -> FakeLeases.Resp:
        self.bindings.append(body)
        return FakeLeases.Resp(body)

    def create_namespaced_pod_eviction(self, name: str, ns: str, body: dict,
                                       **_: Any) -> FakeLeases.Resp:
        self.evictions.append(name)
        return FakeLeases.Resp(body)


def test_a_leader_past_its_renew_deadline_writes_nothing_it_had_planned() -> None:
    """Lease 15 s, renew deadline 10 s. Renewed at t=100; at t=105 the cycle's bind is written.
    The process is then paused (SIGSTOP, a long GC) until t=111: its last renewal is 11 s old,
    past the deadline, while another replica may hold the lease since t=115 at the earliest —
    the Applier asks before each write, so the bind, eviction and refusal still queued are
    dropped as conflicts, unwritten, and the elector reports that it no longer leads."""
    now = [100.0]
    elector = LeaderElector(FakeLeases(), "kube-system", "gpufleet", "a", lease_s=15.0,
                            renew_deadline_s=10.0, retry_s=2.0, clock=lambda: now[0])
    assert elector.try_acquire_or_renew() and elector.is_leader
    core = WritingCore()
    applier = Applier(core, ControllerMetrics(), workers=1)
    applier.leading = lambda: elector.is_leader
    pod = gang_pod("w0", "1")
    pods = {f"ns/{n}": {**pod, "metadata": {**pod["metadata"], "name": n}}
            for n in ("w0", "w1", "w2", "w3")}
    try:
        now[0] = 105.0
        out = applier.apply([Bind("ns/w0", "t4")], pods)
        assert [b.job_id for b in out.bound] == ["ns/w0"] and len(core.bindings) == 1
        now[0] = 109.9  # 9.9 s since the renewal: still leading
        assert elector.is_leader
        now[0] = 111.0
        assert not elector.is_leader
        out = applier.apply([Bind("ns/w1", "t4"), Preempt("ns/w2", "victim"),
                             Refuse("ns/w3", "no room")], pods)
        assert out.conflicts == ["ns/w1", "ns/w2", "ns/w3"]
        assert not out.bound and not out.evicted and not out.refused
        assert len(core.bindings) == 1 and core.evictions == [] and core.conditions == []
        # a renewal that succeeds again restores writing (the lease was still its own)
        assert elector.try_acquire_or_renew() and elector.is_leader
        out = applier.apply([Bind("ns/w1", "t4")], pods)
        assert [b.job_id for b in out.bound] == ["ns/w1"] and len(core.bindings) == 2
    finally:
        applier.close()


def running_pod(name: str, limits: dict[str, str], started: str | None,
                annotations: dict[str, str] | None = None) -> dict:
    status: dict[str, Any] = {"phase": "Running"}
    if started is not None:
        status["startTime"] = started
    return {"metadata": {"name": name, "namespace": "ns", "uid": "u-" + name,
                         "annotations": annotations or {}},
            "spec": {"schedulerName": "gpufleet", "nodeName": "n1", "containers": [
                {"name": "c", "resources": {"limits": limits}}]},
            "status": status}


T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


@pytest.mark.parametrize(("pod", "gpu_s"), [
    # 4 GPUs × 600 s since it started
    (running_pod("a", {"nvidia.com/gpu": "4"}, "2026-01-01T00:00:00Z"), 2400.0),
    # a quarter of a GPU (gpu-fraction) × 400 s
    (running_pod("b", {}, "2026-01-01T00:03:20Z", {"gpu-fraction": "0.25"}), 100.0),
    # a 1g.10gb MIG instance counts its compute share of an H100 (1 of 7 slices: 142 milli)
    (running_pod("c", {"nvidia.com/mig-1g.10gb": "1"}, "2026-01-01T00:00:00Z"), 0.142 * 600),
    # not started yet (bound, no startTime): nothing ran, nothing lost
    (running_pod("d", {"nvidia.com/gpu": "2"}, None), 0.0),
    # no GPUs: a CPU pod's eviction interrupts no GPU work
    (running_pod("e", {"cpu": "2"}, "2026-01-01T00:00:00Z"), 0.0),
])
def test_running_gpu_seconds(pod: dict, gpu_s: float) -> None:
    assert running_gpu_seconds(pod, T0 + 600.0) == pytest.approx(gpu_s)


class RefusingCore(WritingCore):
    """A PodDisruptionBudget refuses every eviction (429)."""

    def create_namespaced_pod_eviction(self, name: str, ns: str, body: dict,
                                       **_: Any) -> FakeLeases.Resp:
        raise ApiException(status=429, reason="Too Many Requests")


def _sample(m: ControllerMetrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, labels)


def test_an_accepted_eviction_counts_its_cause_queue_and_running_work() -> None:
    pods = {"ns/a": running_pod("a", {"nvidia.com/gpu": "2"}, "2026-01-01T00:00:00Z"),
            "ns/b": running_pod("b", {"nvidia.com/gpu": "1"}, "2026-01-01T00:00:00Z")}
    m = ControllerMetrics()
    applier = Applier(WritingCore(), m, workers=1)
    applier.queue_of = {"ns": "research"}.get  # type: ignore[assignment]
    try:
        out = applier.apply([Preempt("ns/a", "spot swap", Cause.SWAP),
                             Preempt("ns/b", "preempted by ns/vip")], pods)
        assert out.evicted == ["ns/a", "ns/b"]
    finally:
        applier.close()
    swap = {"queue": "research", "cause": "swap"}
    assert _sample(m, "gpufleet_pod_disruptions_total", **swap) == 1.0
    assert _sample(m, "gpufleet_pod_disruptions_total", queue="research",
                   cause="preemption") == 1.0
    # 2 GPUs since midnight 2026-01-01: every second since then, twice (a lower bound: the
    # sample was taken after the eviction)
    got = _sample(m, "gpufleet_caused_delay_gpu_seconds_total", **swap)
    assert got is not None and got >= 2 * (time.time() - T0) - 60
    # the same eviction refused by a disruption budget is not counted: nothing was disrupted
    m2 = ControllerMetrics()
    refusing = Applier(RefusingCore(), m2, workers=1)
    try:
        out = refusing.apply([Preempt("ns/a", "spot swap", Cause.SWAP)], pods)
        assert out.evicted == [] and not out.errors
    finally:
        refusing.close()
    assert _sample(m2, "gpufleet_pod_disruptions_total", queue="", cause="swap") is None
    assert _sample(m2, "gpufleet_caused_delay_gpu_seconds_total", queue="",
                   cause="swap") is None
