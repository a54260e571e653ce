"""Live consolidation without a cluster: the mark, which pods may move, the drain of a marked
Node, and the capacity loop's propose → re-validate → mark / drop / abandon steps on a fake API
and a fake cloud (the live test, tests/k8s/test_consolidation_live.py, runs it for real)."""

from __future__ import annotations

import json
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from gpufleet.catalog.instances import default_instance_catalog
from gpufleet.cloud.provider import (
    TAG_MANAGED,
    Instance,
    InstanceState,
    LaunchRequest,
    Offering,
)
from gpufleet.config import Scenario
from gpufleet.decisions import CapacityType, Preempt
from gpufleet.k8s.capacity.loop import CapacityController
from gpufleet.k8s.disruption.consolidation_mark import ConsolidationMark, mark_of, movable
from gpufleet.k8s.disruption.drain import plan_drain
from gpufleet.k8s.translate import names
from gpufleet.k8s.translate.node_objects import node_object, spec_from_instance
from gpufleet.k8s.translate.snapshot import build_snapshot

P16 = default_instance_catalog()["p3.16xlarge"]  # 8 V100, 64 vCPU, 24.48 $/h
A100 = default_instance_catalog()["p4d.24xlarge"]  # 8 A100, 96 vCPU, 32.77 $/h
ZONE = "us-east-1a"
T0 = 1_800_000_000.0


def job_pod(name: str, node: str, gpus: int = 1, cpu: str = "0", **meta: Any) -> dict:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                         "creationTimestamp": "2026-01-01T00:00:00Z",
                         "ownerReferences": [{"kind": "Job", "name": name, "uid": f"j-{name}",
                                              "controller": True}], **meta},
            "spec": {"schedulerName": "gpufleet", "nodeName": node, "containers": [
                {"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus),
                                                       "cpu": cpu}}}]},
            "status": {"phase": "Running"}}


class FakeCore:
    """The calls the capacity loop makes, on dict Nodes; no launch records."""

    def __init__(self, nodes: list[dict]) -> None:
        self.nodes = {n["metadata"]["name"]: n for n in nodes}
        self.patches: list[tuple[str, dict]] = []

    def list_namespaced_config_map(self, *_: Any, **__: Any) -> Any:
        return SimpleNamespace(items=[])  # launch records: none survive a cycle here

    def create_namespaced_config_map(self, *_: Any, **__: Any) -> None:
        pass

    def patch_node(self, name: str, body: dict, **_: Any) -> None:
        self.patches.append((name, body))
        node = self.nodes[name]
        ann = node["metadata"].setdefault("annotations", {})
        for k, v in ((body.get("metadata") or {}).get("annotations") or {}).items():
            if v is None:
                ann.pop(k, None)
            else:
                ann[k] = v
        node["spec"].update(body.get("spec") or {})

    def delete_node(self, name: str, **_: Any) -> None:
        self.patches.append((name, {"deleted": True}))
        self.nodes.pop(name, None)


class FakeCloud:
    name = "kwok"

    def __init__(self, names_: list[str]) -> None:
        self.instances = [Instance(n, f"kwok://{n}", P16.name, ZONE, CapacityType.ON_DEMAND,
                                   InstanceState.RUNNING, T0 - 3600) for n in names_]

        self.requests: list[LaunchRequest] = []

    def list(self) -> list[Instance]:
        return list(self.instances)

    def offerings(self) -> list[Offering]:
        return [Offering(t.name, ZONE, CapacityType.ON_DEMAND, Decimal(t.usd_per_hour))
                for t in (P16, A100)]

    def create(self, req: LaunchRequest) -> Instance:
        self.requests.append(req)
        inst = Instance(f"r{len(self.requests)}", f"kwok://r{len(self.requests)}",
                        req.instance_types[0], ZONE, req.capacity_type, InstanceState.PENDING,
                        T0, req.client_token)
        self.instances.append(inst)
        return inst

    def interruptions(self) -> list:
        return []

    def delete(self, iid: str) -> None:
        self.instances = [i for i in self.instances if i.instance_id != iid]


def kwok_node(name: str, it: Any = P16) -> dict:
    body = node_object(spec_from_instance(it, name, zone=ZONE))
    body["metadata"]["labels"][TAG_MANAGED] = "true"
    body["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return body


class Rig:
    """Two gpufleet nodes a and b, a fake clock, and the capacity loop over them."""

    def __init__(self, **scenario: Any) -> None:
        self.t = T0
        self.core = FakeCore([kwok_node("a"), kwok_node("b")])
        self.cloud = FakeCloud(["a", "b"])
        self.cap = CapacityController(
            self.core, self.cloud,  # type: ignore[arg-type]
            Scenario(name="consolidation", spot=False, instance_types=(P16.name, A100.name),
                     scale_down_unneeded_s=60.0, **scenario),
            [P16, A100], namespace="ns", registry=CollectorRegistry(), clock=lambda: self.t,
            consolidation_validation_s=15.0, consolidation_drain_timeout_s=600.0)

    def cycle(self, pods: list[dict], after_s: float = 0.0) -> Any:
        self.t += after_s
        nodes = list(self.core.nodes.values())
        return self.cap.reconcile(build_snapshot(nodes, pods), [], nodes, pods)

    def metric(self, outcome: str, method: str = "single-node-consolidation") -> float:
        return self.cap.metrics.consolidations.labels(
            method=method, outcome=outcome)._value.get()


def test_the_mark_round_trips_and_a_malformed_one_names_the_field() -> None:
    mark = ConsolidationMark("single-node-consolidation", T0)
    node = {"metadata": {"name": "a", "annotations": {names.ANN_CONSOLIDATION: mark.to_json()}}}
    assert mark_of(node) == mark
    with pytest.raises(ValueError, match="started_at"):
        ConsolidationMark.from_json(json.dumps({"method": "x", "started_at": "soon"}))
    with pytest.raises(ValueError, match="method"):
        ConsolidationMark.from_json(json.dumps({"started_at": 1.0}))
    assert mark_of({"metadata": {"name": "a",
                                 "annotations": {names.ANN_CONSOLIDATION: "{"}}}) is None


def test_only_controller_owned_pods_outside_gangs_and_without_do_not_disrupt_move() -> None:
    assert movable(job_pod("p", "a"))
    bare = job_pod("p", "a")
    del bare["metadata"]["ownerReferences"]
    assert not movable(bare)  # nobody would recreate it
    ds = job_pod("p", "a")
    ds["metadata"]["ownerReferences"][0]["kind"] = "DaemonSet"
    assert not movable(ds)
    assert not movable(job_pod("p", "a", labels={"scheduling.x-k8s.io/pod-group": "g"}))
    assert not movable(job_pod("p", "a", annotations={"karpenter.sh/do-not-disrupt": "true"}))


def test_a_consolidated_node_is_drained_and_terminated_only_once_empty_never_by_deadline(
) -> None:
    mark = ConsolidationMark("single-node-consolidation", 1000.0)
    node = {"metadata": {"name": "a", "annotations": {names.ANN_CONSOLIDATION: mark.to_json()}},
            "spec": {}}
    plan = plan_drain([node], [job_pod("p", "a")], now=1001.0)
    assert [c.node for c in plan.cordon] == ["a"]
    assert [e.job_id for e in plan.evict] == ["ns/p"] and isinstance(plan.evict[0], Preempt)
    assert plan.terminate == () and plan.marked == {}  # not an interruption: no recovery clock
    slow = job_pod("p", "a", deletionTimestamp="2026-01-01T00:00:00Z")
    later = plan_drain([node], [slow], now=1000.0 + 10 * 86400)
    assert later.evict == () and later.terminate == ()  # terminating: wait, however long
    done = plan_drain([node], [], now=1002.0)
    assert [t.node for t in done.terminate] == ["a"] and "consolidated" in done.terminate[0].reason


def test_two_under_used_nodes_one_is_proposed_revalidated_then_marked_for_the_drain() -> None:
    rig = Rig()
    pods = [job_pod("p", "a"), job_pod("q", "b")]
    assert rig.cycle(pods).consolidating == []  # the under-used clocks start
    assert rig.cycle(pods, 59.0).consolidating == [] and rig.cap.consolidator.proposal is None
    rig.cycle(pods, 1.0)  # under-used for 60 s: proposed, nothing touched yet
    assert rig.cap.consolidator.proposal is not None and rig.core.patches == []
    assert rig.cycle(pods, 14.0).consolidating == []  # the validation period
    got = rig.cycle(pods, 1.0)
    assert got.consolidating == ["a"] and rig.cap.consolidator.proposal is None
    a = rig.core.nodes["a"]
    assert a["spec"]["unschedulable"] is True
    assert mark_of(a) == ConsolidationMark("single-node-consolidation", rig.t)
    assert (rig.metric("proposed"), rig.metric("started")) == (1, 1)
    # marked: neither candidate nor room for a second command while it drains
    assert rig.cycle(pods, 120.0).consolidating == [] and rig.cap.consolidator.proposal is None


def test_a_proposal_that_no_longer_validates_is_dropped_and_nothing_is_cordoned() -> None:
    rig = Rig()
    pods = [job_pod("p", "a"), job_pod("q", "b")]
    rig.cycle(pods)
    rig.cycle(pods, 60.0)
    assert rig.cap.consolidator.proposal is not None
    # before the re-validation a 7-GPU pod lands on b: a's pod no longer fits anywhere
    crowded = [*pods, job_pod("big", "b", gpus=7)]
    assert rig.cycle(crowded, 15.0).consolidating == []
    assert rig.cap.consolidator.proposal is None and rig.core.patches == []
    assert rig.metric("invalid") == 1


def test_a_marked_node_whose_pods_can_no_longer_move_is_uncordoned_and_unmarked() -> None:
    rig = Rig()
    pods = [job_pod("p", "a"), job_pod("q", "b")]
    rig.cycle(pods)
    rig.cycle(pods, 60.0)
    assert rig.cycle(pods, 15.0).consolidating == ["a"]
    # a budget refused p's eviction (still running on a) and b filled up meanwhile
    got = rig.cycle([*pods, job_pod("big", "b", gpus=7)], 1.0)
    assert got.abandoned == ["a"]
    a = rig.core.nodes["a"]
    assert a["spec"]["unschedulable"] is False and mark_of(a) is None
    assert names.ANN_CONSOLIDATION not in a["metadata"]["annotations"]
    assert rig.metric("abandoned") == 1


def test_a_marked_node_still_holding_pods_after_the_drain_timeout_is_uncordoned() -> None:
    rig = Rig()
    pods = [job_pod("p", "a"), job_pod("q", "b")]
    rig.cycle(pods)
    rig.cycle(pods, 60.0)
    assert rig.cycle(pods, 15.0).consolidating == ["a"]
    stuck = [job_pod("p", "a", deletionTimestamp="2026-01-01T00:00:00Z"), pods[1]]
    assert rig.cycle(stuck, 599.0).abandoned == []  # terminating: the drain waits for it
    assert rig.cycle(stuck, 2.0).abandoned == ["a"]
    assert rig.core.nodes["a"]["spec"]["unschedulable"] is False


def test_consolidation_off_in_the_scenario_leaves_under_used_nodes_alone() -> None:
    rig = Rig(consolidation=False)
    pods = [job_pod("p", "a"), job_pod("q", "b")]
    for dt in (0.0, 60.0, 15.0, 300.0):
        assert rig.cycle(pods, dt).consolidating == []
    assert rig.cap.consolidator.proposal is None and rig.core.patches == []


def test_a_multi_node_command_launches_its_replacement_first_and_marks_once_it_is_ready(
) -> None:
    rig = Rig()
    # 40 vCPU each: neither fits the other's 24 vCPU left, both fit one 96-vCPU p4d (< 2 × p3)
    pods = [job_pod("p", "a", cpu="40"), job_pod("q", "b", cpu="40")]
    rig.cycle(pods)
    got = rig.cycle(pods, 60.0)
    (req,) = rig.cloud.requests  # the replacement, through the launch-record path
    assert got.launched == [req.client_token] and req.instance_types == (A100.name,)
    held = rig.cap.consolidator.proposal
    assert held is not None and held.replacement == req.client_token
    assert rig.cycle(pods, 30.0).consolidating == []  # booting: nothing is cordoned yet
    assert rig.core.patches == [] and len(rig.cloud.requests) == 1  # not launched twice
    rig.core.nodes["r1"] = kwok_node("r1", A100)  # its Node registers, Ready
    assert sorted(rig.cycle(pods, 1.0).consolidating) == ["a", "b"]
    assert rig.metric("started", "multi-node-consolidation") == 1


def test_a_replacement_whose_room_was_taken_meanwhile_drops_the_command() -> None:
    rig = Rig()
    pods = [job_pod("p", "a", cpu="40"), job_pod("q", "b", cpu="40")]
    rig.cycle(pods)
    rig.cycle(pods, 60.0)
    assert rig.cap.consolidator.proposal is not None
    rig.core.nodes["r1"] = kwok_node("r1", A100)
    # a pending pod was bound to the replacement first: 60 of its 96 vCPU are gone
    busy = [*pods, job_pod("other", "r1", cpu="60")]
    assert rig.cycle(busy, 30.0).consolidating == []
    assert rig.cap.consolidator.proposal is None and rig.core.patches == []
    assert rig.metric("invalid", "multi-node-consolidation") == 1


def test_no_replacement_is_launched_at_max_nodes() -> None:
    rig = Rig(max_nodes=2)
    pods = [job_pod("p", "a", cpu="40"), job_pod("q", "b", cpu="40")]
    for dt in (0.0, 60.0, 15.0, 300.0):
        assert rig.cycle(pods, dt).consolidating == []
    assert rig.cloud.requests == [] and rig.cap.consolidator.proposal is None


def test_empty_nodes_go_through_the_termination_path_after_unneeded_s() -> None:
    rig = Rig()
    pods = [job_pod("p", "a")]
    assert rig.cycle(pods).terminated == []  # b empty since T0, a busy
    assert rig.cycle(pods, 59.0).terminated == []
    got = rig.cycle(pods, 1.0)  # b empty for 60 s
    assert got.terminated == ["b"]
    assert rig.core.patches == [("b", {"spec": {"unschedulable": True}}), ("b", {"deleted": True})]
    assert [i.instance_id for i in rig.cloud.instances] == ["a"]
    assert rig.cap.metrics.terminations.labels(reason="empty")._value.get() == 1
    assert "b" not in rig.cap.scale_down.empty.since  # the clock went with the node


def test_consolidation_looks_again_only_after_a_pod_left_and_the_recheck() -> None:
    """The simulator's look rule live (``control.scan.ConsolidationLook``): a look that found
    nothing is not repeated every ``consolidation_recheck_s`` with nothing new."""
    rig = Rig(consolidation_recheck_s=100.0, multi_node_consolidation=False)
    # a holds 7 of 8 GPUs (busy), b two 1-GPU pods (underused) that do not fit a's one free
    # GPU: no command
    pods = [job_pod("big", "a", gpus=7), job_pod("x", "b"), job_pod("y", "b")]
    looks: list[float] = []
    real = rig.cap.consolidator.decide

    def counting(*args: Any, **kw: Any) -> Any:
        looks.append(rig.t)
        return real(*args, **kw)

    rig.cap.consolidator.decide = counting  # type: ignore[method-assign]
    rig.cycle(pods)
    rig.cycle(pods, 60.0)  # b underused for 60 s: the first look
    rig.cycle(pods, 150.0)  # recheck passed, nothing new: no look
    rig.cycle(pods[:2], 10.0)  # y left b: something new, 160 s since the look
    assert looks == [T0 + 60.0, T0 + 220.0]
