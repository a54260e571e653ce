"""The kwok provider and the capacity controller against the lab's real API server, on a clock
the test drives (no sleeping for provisioning delays, notices or timeouts).

Each test works in its own namespace (the provider's pending launches, its market clock and the
launch records live there); the one Node the provider test materializes is deleted by it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from live_wait import wait_for
from prometheus_client import CollectorRegistry

from gpufleet.catalog.instances import default_instance_catalog
from gpufleet.cloud.kwok import (
    ANN_RECLAIM,
    PENDING_LABEL,
    KwokProvider,
    kwok_market,
    node_name,
)
from gpufleet.cloud.provider import (
    TAG_MANAGED,
    TAG_TOKEN,
    CapacityShortage,
    CloudProvider,
    Instance,
    InstanceState,
    InterruptionKind,
    LaunchRequest,
)
from gpufleet.config import Scenario
from gpufleet.control.admission import SPOT_TAINT_EFFECT, SPOT_TAINT_KEY, SPOT_TAINT_VALUE
from gpufleet.decisions import CapacityType
from gpufleet.k8s.capacity.launch_records import LaunchRecord, LaunchRecords, new_token
from gpufleet.k8s.capacity.loop import CapacityController
from gpufleet.k8s.disruption.consolidation_mark import mark_of
from gpufleet.k8s.translate.snapshot import build_snapshot

pytestmark = pytest.mark.live

P3 = default_instance_catalog()["p3.2xlarge"]
ZONE = "us-east-1b"


class Clock:
    def __init__(self, t: float = 1_800_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def write_trace(folder: Path, zone: str, data: list[int], gap_s: int = 60) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{zone}_v100_1.json").write_text(
        json.dumps({"metadata": {"gap_seconds": gap_s}, "data": data}))
    return folder


def provider(core: client.CoreV1Api, ns: str, clock: Clock, tmp: Path,
             delay_s: float = 5.0) -> KwokProvider:
    # spot in us-east-1b until market second 600, gone for 5 ticks, back after
    traces = write_trace(tmp / "traces" / "t", ZONE, [1] * 10 + [0] * 5 + [1] * 10)
    market = kwok_market([P3], traces, 0.3)
    assert market is not None and market.zones(P3.name) == [ZONE]
    return KwokProvider(core, {P3.name: P3}, market, namespace=ns, provisioning_delay_s=delay_s,
                        notice_s=30.0, clock=clock)


def spot_request(token: str) -> LaunchRequest:
    return LaunchRequest(token, (P3.name,), (ZONE,), CapacityType.SPOT, None,
                         {TAG_MANAGED: "true", TAG_TOKEN: token})


def test_kwok_provider_launches_idempotently_and_replays_a_reclaim(lab: Any,
                                                                   tmp_path: Path) -> None:
    core = lab.core
    ns = lab.namespace("kwok")
    clock = Clock()
    kw = provider(core, ns, clock, tmp_path)
    assert isinstance(kw, CloudProvider)
    tok = new_token()
    name = node_name(tok)
    try:
        first = kw.create(spot_request(tok))
        assert isinstance(first, Instance) and first.state == InstanceState.PENDING
        again = kw.create(spot_request(tok))
        assert isinstance(again, Instance) and again.instance_id == first.instance_id == name
        pending = core.list_namespaced_config_map(ns, label_selector=f"{PENDING_LABEL}=true")
        assert len(pending.items) == 1  # one launch for one token, kept in the API
        assert [i.state for i in kw.list()] == [InstanceState.PENDING]

        clock.t += 5.0  # the provisioning delay
        (inst,) = kw.list()
        assert inst.state == InstanceState.RUNNING and inst.client_token == tok
        assert core.list_namespaced_config_map(
            ns, label_selector=f"{PENDING_LABEL}=true").items == []
        node = core.read_node(name)
        labels = node.metadata.labels
        assert node.spec.provider_id == f"kwok://{name}" == inst.provider_id
        assert labels["karpenter.sh/capacity-type"] == "spot"
        assert labels["node.kubernetes.io/instance-type"] == P3.name
        assert labels["topology.kubernetes.io/zone"] == ZONE
        assert labels[TAG_MANAGED] == "true" and labels[TAG_TOKEN] == tok
        assert labels["nvidia.com/gpu.product"].endswith("V100-SXM2-16GB")
        assert node.metadata.annotations["kwok.x-k8s.io/node"] == "fake"
        # the node lifecycle controller may have added node.kubernetes.io/not-ready before
        # KWOK reports the Node Ready: that taint is Kubernetes', not the provider's
        assert [(t.key, t.value, t.effect) for t in node.spec.taints
                if not t.key.startswith("node.kubernetes.io/")] == [
            (SPOT_TAINT_KEY, SPOT_TAINT_VALUE, SPOT_TAINT_EFFECT)]
        assert node.status.capacity["nvidia.com/gpu"] == "1"
        third = kw.create(spot_request(tok))  # after the Node exists: still the same one
        assert isinstance(third, Instance) and third.instance_id == name
        assert len(core.list_node(label_selector=f"{TAG_TOKEN}={tok}").items) == 1

        assert kw.interruptions() == []
        kw.advance_market(601.0)  # past the trace's drop at market second 600
        (ev,) = kw.interruptions()
        assert ev.instance_id == name and ev.kind == InterruptionKind.SPOT_INTERRUPTION
        assert ev.deadline == pytest.approx(clock.t + 30.0)
        assert float(core.read_node(name).metadata.annotations[ANN_RECLAIM]) == ev.deadline
        kw.acknowledge(ev)
        assert kw.interruptions() == []  # acknowledged: not reported twice
        # no spot capacity in the zone while the trace says so; on-demand is there
        short = kw.create(spot_request(new_token()))
        assert isinstance(short, CapacityShortage) and short.pools == ((P3.name, ZONE),)
        cheap = [o for o in kw.offerings() if o.capacity_type == CapacityType.SPOT]
        assert [(o.zone, o.available) for o in cheap] == [(ZONE, False)]
        assert all(o.price_per_hour < P3.usd_per_hour for o in cheap)

        clock.t += 30.0  # the deadline: the instance goes
        assert kw.interruptions() == []
        assert kw.list() == []
        assert core.list_node(label_selector=f"{TAG_TOKEN}={tok}").items == []
        kw.delete(name)  # already gone: not an error
    finally:
        kw.delete(name)
        core.delete_namespace(ns)


class StaleReads:
    """The real CoreV1Api, except that each of the first ``stale`` Node reads is followed by a
    real write to that Node (a label bump, as KWOK's heartbeat or the node lifecycle controller
    would make), so the read's resourceVersion is out of date when the caller patches with it:
    the API server answers 409 Conflict itself."""

    def __init__(self, core: client.CoreV1Api, stale: int) -> None:
        self.core, self.stale, self.conflicts = core, stale, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.core, name)

    def read_node(self, name: str) -> Any:
        node = self.core.read_node(name)
        if self.stale > 0:
            self.stale -= 1
            self.conflicts += 1
            self.core.patch_node(name, {"metadata": {"labels": {
                "gpufleet.io/test-bump": str(self.conflicts)}}})
        return node


def test_a_reclaim_announced_during_a_concurrent_node_write_is_written_after_a_retry(
        lab: Any, tmp_path: Path) -> None:
    """A CI run once lost a reclaim deadline: the trace's drop came while another writer
    touched the Node, the resourceVersion-guarded patch got 409 and the announcement was
    dropped. Now a conflict re-reads and retries (bounded), and the deadline reported is the
    one the Node carries."""
    core = lab.core
    ns = lab.namespace("kwok-conflict")
    clock = Clock()
    kw = provider(core, ns, clock, tmp_path)
    tok = new_token()
    name = node_name(tok)
    try:
        kw.create(spot_request(tok))
        clock.t += 5.0
        (inst,) = kw.list()
        assert inst.state == InstanceState.RUNNING
        stale = StaleReads(core, stale=2)
        kw.core = stale
        kw.advance_market(601.0)
        (ev,) = kw.interruptions()
        assert stale.conflicts == 2  # two real 409s, then the write went through
        assert ev.deadline == pytest.approx(clock.t + 30.0)
        node = core.read_node(name)
        assert float(node.metadata.annotations[ANN_RECLAIM]) == ev.deadline
        assert node.metadata.labels["gpufleet.io/test-bump"] == "2"
        clock.t += 10.0
        assert kw.reclaim(name) == ev.deadline  # announced once: the first deadline holds

        kw.core = StaleReads(core, stale=10)
        core.patch_node(name, {"metadata": {"annotations": {ANN_RECLAIM: None}}})
        with pytest.raises(RuntimeError, match="kept changing"):
            kw.reclaim(name)  # bounded: a Node that never stops changing is an error
    finally:
        kw.core = core
        kw.delete(name)
        core.delete_namespace(ns)


def scenario(**kw: Any) -> Scenario:
    return Scenario(name="capacity-test", spot=False, instance_types=(P3.name,), **kw)


def gpu_pod(name: str, gpus: int) -> dict:
    return {"metadata": {"name": name, "namespace": "ns",
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"schedulerName": "gpufleet", "containers": [
                {"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": {"phase": "Pending"}}


def test_launch_records_converge_and_an_unregistered_instance_is_deleted(
        lab: Any, tmp_path: Path) -> None:
    core = lab.core
    ns = lab.namespace("cap")
    clock = Clock()
    # a provisioning delay far beyond the test: the Node never registers
    kw = provider(core, ns, clock, tmp_path, delay_s=3600.0)
    cap = CapacityController(core, kw, scenario(), [P3], namespace=ns,
                             registry=CollectorRegistry(), registration_timeout_s=60.0,
                             clock=clock)
    records = LaunchRecords(core, ns)
    try:
        snap = build_snapshot([], [gpu_pod("p", 1), gpu_pod("q", 1)])
        got = cap.reconcile(snap, list(snap.pods), [], [])
        assert len(got.launched) == 2  # two 1-GPU pods: two p3.2xlarge on-demand
        assert sorted(r.token for r in records.list()) == sorted(got.launched)
        assert sorted(i.client_token for i in kw.list()) == sorted(got.launched)
        clock.t += 10.0
        again = cap.reconcile(snap, list(snap.pods), [], [])
        assert again.launched == [] and again.resumed == []  # booting capacity absorbs them

        # a record written before a crash that never reached the cloud: asked again, same token
        lost = LaunchRecord(new_token(), P3.name, ZONE, CapacityType.ON_DEMAND, clock.t,
                            Decimal("3.06"))
        records.write(lost)
        third = cap.reconcile(build_snapshot([], []), [], [], [])
        assert third.resumed == [lost.token]
        assert sum(i.client_token == lost.token for i in kw.list()) == 1
        fourth = cap.reconcile(build_snapshot([], []), [], [], [])
        assert fourth.resumed == [] and len(kw.list()) == 3

        clock.t += 55.0  # the first two are past the registration timeout, the third is not
        late = cap.reconcile(build_snapshot([], []), [], [], [])
        assert sorted(late.timed_out) == sorted(node_name(t) for t in got.launched)
        assert [r.token for r in records.list()] == [lost.token]
        assert [i.client_token for i in kw.list()] == [lost.token]
        metric = cap.metrics.terminations.labels(reason="registration-timeout")._value.get()
        assert metric == 2
    finally:
        for i in kw.list():
            kw.delete(i.instance_id)
        core.delete_namespace(ns)


def test_scale_down_terminates_only_empty_gpufleet_nodes_after_the_idle_time(
        lab: Any, tmp_path: Path) -> None:
    core = lab.core
    ns = lab.namespace("down")
    clock = Clock()
    kw = provider(core, ns, clock, tmp_path, delay_s=0.0)
    cap = CapacityController(core, kw, scenario(scale_down_unneeded_s=30.0), [P3], namespace=ns,
                             registry=CollectorRegistry(), clock=clock)
    static = lab.add_instance_nodes(P3.name, 1, prefix="static")  # not gpufleet's: never touched
    tok = new_token()
    try:
        inst = kw.create(LaunchRequest(tok, (P3.name,), (ZONE,), CapacityType.ON_DEMAND, None,
                                       {TAG_MANAGED: "true", TAG_TOKEN: tok}))
        assert isinstance(inst, Instance) and inst.state == InstanceState.RUNNING

        def nodes() -> list[dict]:
            wanted = {inst.instance_id, *static}
            out = []
            for n in core.list_node().items:
                if n.metadata.name in wanted:
                    out.append(lab.api.sanitize_for_serialization(n))
            return out

        def ready() -> bool:
            return all(any(c["type"] == "Ready" and c["status"] == "True"
                           for c in n["status"].get("conditions") or ()) for n in nodes())

        end = time.monotonic() + 30
        while not ready() and time.monotonic() < end:
            time.sleep(0.2)
        snap = build_snapshot(nodes(), [])
        assert cap.reconcile(snap, [], nodes(), []).terminated == []  # idle clock starts
        clock.t += 29.0
        assert cap.reconcile(snap, [], nodes(), []).terminated == []
        busy = {"metadata": {"name": "p", "namespace": ns},
                "spec": {"nodeName": inst.instance_id}, "status": {"phase": "Running"}}
        clock.t += 2.0
        assert cap.reconcile(snap, [], nodes(), [busy]).terminated == []  # a pod: not idle
        clock.t += 31.0
        assert cap.reconcile(snap, [], nodes(), []).terminated == []  # idle again since now
        clock.t += 31.0
        assert cap.reconcile(snap, [], nodes(), []).terminated == [inst.instance_id]
        assert kw.list() == []
        assert [n.metadata.name for n in core.list_node().items
                if n.metadata.name in {inst.instance_id, *static}] == static
    finally:
        kw.delete(node_name(tok))
        for n in static:
            core.delete_node(n)
        core.delete_namespace(ns)


def test_headroom_launches_spare_gpus_and_scale_down_keeps_them(lab: Any,
                                                                tmp_path: Path) -> None:
    """``control.headroom`` in the capacity loop: the GPUs that arrived buy a buffer of free
    GPUs, launched with the pending pod, which emptiness keeps until the arrivals are an hour
    old."""
    core = lab.core
    ns = lab.namespace("room")
    clock = Clock()
    kw = provider(core, ns, clock, tmp_path, delay_s=0.0)
    # one arrival is below the 10 the arrivals' quantile needs (``min_sample``), so the Poisson
    # rule: horizon = provisioning 3590 s + scan 10 s = the 1 h window, so its mean is simply
    # the GPUs that arrived over the last hour
    sc = scenario(headroom=True, scale_down_unneeded_s=30.0, provisioning_delay_s=3590.0)
    cap = CapacityController(core, kw, sc, [P3], namespace=ns, registry=CollectorRegistry(),
                             clock=clock)
    created = datetime.fromtimestamp(clock.t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    pod = gpu_pod("p", 1)
    pod["metadata"]["creationTimestamp"] = created
    try:
        snap = build_snapshot([], [pod])
        got = cap.reconcile(snap, list(snap.pods), [], [])
        # 1 GPU arrived: mean 1 → buffer 2 (CDF 0.368, 0.736, 0.920); nothing is free, so the
        # pod and 2 placeholders: three 1-GPU p3.2xlarge
        assert len(got.launched) == 3
        mine = {node_name(t) for t in got.launched}

        def nodes() -> list[dict]:
            return [lab.api.sanitize_for_serialization(n) for n in core.list_node().items
                    if n.metadata.name in mine]

        def idle() -> list[str]:
            """One cycle on the Nodes left, the pod gone (it ran and finished)."""
            now = nodes()
            return cap.reconcile(build_snapshot(now, []), [], now, []).terminated

        end = time.monotonic() + 30
        while time.monotonic() < end and not (len(nodes()) == 3 and all(
                any(c["type"] == "Ready" and c["status"] == "True"
                    for c in n["status"].get("conditions") or ()) for n in nodes())):
            time.sleep(0.2)
        assert idle() == []  # the idle clocks start
        clock.t += 31.0
        gone = idle()  # 3 free GPUs, a buffer of 2: one node may go
        assert len(gone) == 1 and set(gone) < mine
        clock.t += 31.0
        assert idle() == []  # 2 free = the buffer
        clock.t += 3600.0  # the arrival left the window: no buffer, the fleet may reach zero
        assert sorted(idle()) == sorted(mine - set(gone))
        assert kw.list() == []
    finally:
        for i in kw.list():
            kw.delete(i.instance_id)
        core.delete_namespace(ns)


def test_headroom_counts_each_pod_at_its_creation_time(lab: Any, tmp_path: Path) -> None:
    """From 10 arrivals in the hour the buffer is the arrivals' quantile (``control.headroom``),
    and the capacity loop counts each pod at its creationTimestamp. Twelve 1-GPU pods created
    200 s apart each arrived alone within the 190 s horizon (180 s provisioning + 10 s scan):
    twelve demands of 1, a buffer of 1. Counted at the cycle's time instead, all twelve would
    have arrived together (demands 1 … 12: a buffer of 11); the Poisson rule at 12 GPUs an
    hour says 2 (mean 0.633: CDF 0.531, 0.867, 0.974)."""
    core = lab.core
    ns = lab.namespace("room12")
    clock = Clock()
    kw = provider(core, ns, clock, tmp_path, delay_s=0.0)
    cap = CapacityController(core, kw, scenario(headroom=True), [P3], namespace=ns,
                             registry=CollectorRegistry(), clock=clock)
    pods = []
    for k in range(12):  # created 2,400 s … 200 s ago
        pod = gpu_pod(f"p{k}", 1)
        pod["metadata"]["creationTimestamp"] = datetime.fromtimestamp(
            clock.t - 200.0 * (12 - k), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        pods.append(pod)
    try:
        snap = build_snapshot([], pods)
        got = cap.reconcile(snap, list(snap.pods), [], [])
        assert len(got.launched) == 12 + 1  # the pods and one placeholder
        assert len(kw.list()) == 13
    finally:
        for i in kw.list():
            kw.delete(i.instance_id)
        core.delete_namespace(ns)


@dataclass
class SwapBed:
    """The swap tests' bed: a kwok provider on a test clock, a capacity controller with the swap
    on, and one on-demand p3.2xlarge launched (not yet Ready)."""

    core: Any
    ns: str
    clock: Clock
    kw: Any
    cap: CapacityController
    od: Instance

    def job_pod(self, annotations: dict[str, str] | None = None) -> dict:
        """A Job's pod (movable), tolerating spot, started 2 h ago on the on-demand node."""
        pod = gpu_pod("p", 1)
        pod["metadata"].update(namespace=self.ns, creationTimestamp=_iso(self.clock.t - 7300),
                               annotations=annotations or {}, ownerReferences=[
                                   {"kind": "Job", "name": "j", "uid": "uid-j",
                                    "controller": True}])
        pod["spec"].update(nodeName=self.od.instance_id, tolerations=[
            {"key": SPOT_TAINT_KEY, "operator": "Equal", "value": SPOT_TAINT_VALUE,
             "effect": SPOT_TAINT_EFFECT}])
        pod["status"] = {"phase": "Running", "startTime": _iso(self.clock.t - 7200)}
        return pod

    def close(self) -> None:
        for i in self.kw.list():
            self.kw.delete(i.instance_id)
        self.core.delete_namespace(self.ns)


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def swap_bed(lab: Any, tmp_path: Path, name: str) -> SwapBed:
    core = lab.core
    ns = lab.namespace(name)
    clock = Clock()
    kw = provider(core, ns, clock, tmp_path, delay_s=0.0)
    # v = 0: the move's figures below price delay at on-demand only (at the default v = 3 the
    # move costs (3.06 + 3) × 330 s / 3600 × 8 = 4.444 > 4.284 $ and does not pay)
    sc = Scenario(name="swap-test", spot=True, spot_swap=True, instance_types=(P3.name,),
                  scale_down_unneeded_s=30.0, value_of_time_usd_per_gpu_hour=0.0)
    cap = CapacityController(core, kw, sc, [P3], namespace=ns, registry=CollectorRegistry(),
                             clock=clock, consolidation_validation_s=10.0)
    tok = new_token()
    od = kw.create(LaunchRequest(tok, (P3.name,), (ZONE,), CapacityType.ON_DEMAND, None,
                                 {TAG_MANAGED: "true", TAG_TOKEN: tok}))
    assert isinstance(od, Instance)
    return SwapBed(core, ns, clock, kw, cap, od)


def test_spot_swap_launches_spot_first_then_marks_the_on_demand_node(lab: Any,
                                                                     tmp_path: Path) -> None:
    """``control.spot_swap`` in the capacity loop: an on-demand node whose pod has run 2 h is
    swapped — scale-up's spot plan launched first, re-validated once Ready, then the on-demand
    node marked for the drain, as a consolidation."""
    bed = swap_bed(lab, tmp_path, "swap")
    core, clock, kw, cap, od = bed.core, bed.clock, bed.kw, bed.cap, bed.od
    mine = {od.instance_id}

    def nodes() -> list[dict]:
        return [lab.api.sanitize_for_serialization(n) for n in core.list_node().items
                if n.metadata.name in mine]

    def wait_ready(want: int) -> None:
        end = time.monotonic() + 30
        while time.monotonic() < end and not (len(nodes()) == want and all(
                any(c["type"] == "Ready" and c["status"] == "True"
                    for c in n["status"].get("conditions") or ()) for n in nodes())):
            time.sleep(0.2)

    pod = bed.job_pod()
    try:
        wait_ready(1)
        # p3.2xlarge 3.06 $/h on-demand, spot 0.918 ≤ 0.6 × 3.06; the move costs
        # 3.06 × (30 + 120 + 180) / 3600 = 0.2805 $, × 8 = 2.244 ≤ (3.06 − 0.918) × 2 h = 4.284
        got = cap.reconcile(build_snapshot(nodes(), [pod]), [], nodes(), [pod])
        assert len(got.launched) == 1 and got.consolidating == []
        (spot,) = [i for i in kw.list() if i.client_token == got.launched[0]]
        assert spot.capacity_type == CapacityType.SPOT
        mine.add(spot.instance_id)
        wait_ready(2)
        clock.t += 5.0  # the spot node is Ready, the validation period is not over
        assert cap.reconcile(build_snapshot(nodes(), [pod]), [], nodes(), [pod]).consolidating \
            == []
        clock.t += 6.0
        out = cap.reconcile(build_snapshot(nodes(), [pod]), [], nodes(), [pod])
        assert out.consolidating == [od.instance_id]  # marked for the drain
        mark = mark_of(lab.api.sanitize_for_serialization(core.read_node(od.instance_id)))
        assert mark is not None and mark.method == "spot-swap"
        assert cap.metrics.consolidations.labels(method="spot-swap",
                                                 outcome="started")._value.get() == 1
    finally:
        bed.close()


def test_a_latency_sensitive_pod_is_never_swapped(lab: Any, tmp_path: Path) -> None:
    """The swap test's node and pod (a movable Job pod that has run 2 h: the move pays), the pod
    marked ``gpufleet.io/latency-sensitive: "true"``: cycle after cycle nothing is launched and
    the on-demand node is not marked (``control.value_of_time``: never moved for the fleet's
    sake). Without the mark the same node is swapped on the next cycle (the test can fail)."""
    bed = swap_bed(lab, tmp_path, "swap-ls")
    core, clock, kw, cap, od = bed.core, bed.clock, bed.kw, bed.cap, bed.od

    def nodes() -> list[dict]:
        return [lab.api.sanitize_for_serialization(n) for n in core.list_node().items
                if n.metadata.name == od.instance_id]

    def ready() -> bool:
        return len(nodes()) == 1 and any(c["type"] == "Ready" and c["status"] == "True"
                                         for c in nodes()[0]["status"].get("conditions") or ())

    pod = bed.job_pod({"gpufleet.io/latency-sensitive": "true"})
    try:
        wait_for("the on-demand node Ready", ready, timeout=60.0)
        for _ in range(3):  # the move would pay (test_spot_swap_…: 2.244 ≤ 4.284 $), every time
            got = cap.reconcile(build_snapshot(nodes(), [pod]), [], nodes(), [pod])
            assert got.launched == [] and got.consolidating == []
            clock.t += 11.0
        assert [i.instance_id for i in kw.list()] == [od.instance_id]
        assert mark_of(lab.api.sanitize_for_serialization(core.read_node(od.instance_id))) \
            is None
        # the same pod without the mark: the swap launches its spot node
        pod["metadata"]["annotations"] = {}
        got = cap.reconcile(build_snapshot(nodes(), [pod]), [], nodes(), [pod])
        assert len(got.launched) == 1
        (spot,) = [i for i in kw.list() if i.client_token == got.launched[0]]
        assert spot.capacity_type == CapacityType.SPOT
    finally:
        bed.close()
