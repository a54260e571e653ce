"""The drain plan for interrupted Nodes (pure) and the recovery clock."""

from __future__ import annotations

from typing import Any

from gpufleet.cloud.provider import InterruptionKind
from gpufleet.decisions import Cause, Cordon, Preempt
from gpufleet.k8s.disruption.consolidation_mark import ConsolidationMark
from gpufleet.k8s.disruption.drain import plan_drain
from gpufleet.k8s.disruption.interruption import InterruptionMark
from gpufleet.k8s.disruption.recovery_clock import RecoveryClock
from gpufleet.k8s.translate import names


def node(name: str, mark: InterruptionMark | None = None, cordoned: bool = False) -> dict:
    ann = {names.ANN_INTERRUPTION: mark.to_json()} if mark else {}
    return {"metadata": {"name": name, "annotations": ann},
            "spec": {"unschedulable": True} if cordoned else {}}


def pod(name: str, on: str | None, *, phase: str = "Running", owner: str | None = "job-1",
        kind: str = "Job", deleting: bool = False, uid: str | None = None,
        started: str | None = None, ann: dict | None = None) -> dict:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": uid or f"uid-{name}",
                            "annotations": ann or {}}
    if owner:
        meta["ownerReferences"] = [{"kind": kind, "uid": owner, "controller": True}]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status: dict[str, Any] = {"phase": phase}
    if started:
        status["containerStatuses"] = [{"state": {"running": {"startedAt": started}}}]
    return {"metadata": meta, "spec": {"nodeName": on} if on else {}, "status": status}


SPOT = InterruptionMark(InterruptionKind.SPOT_INTERRUPTION, 1120.0, 1000.0, "agent")


def test_unmarked_nodes_are_left_alone() -> None:
    plan = plan_drain([node("a"), node("b")], [pod("p", "a")], now=0.0)
    assert (plan.cordon, plan.evict, plan.terminate) == ((), (), ())


def test_a_marked_node_is_cordoned_and_its_pods_evicted_except_daemons_and_mirrors() -> None:
    pods = [pod("work", "a"), pod("agent", "a", owner="ds", kind="DaemonSet"),
            pod("static", "a", owner=None, ann={"kubernetes.io/config.mirror": "x"}),
            pod("done", "a", phase="Succeeded"), pod("elsewhere", "b")]
    plan = plan_drain([node("a", SPOT), node("b")], pods, now=1010.0)
    assert [c.node for c in plan.cordon] == ["a"]
    assert isinstance(plan.cordon[0], Cordon) and "agent" in plan.cordon[0].reason
    assert plan.evict == (Preempt("ns/work", plan.cordon[0].reason),)
    assert plan.terminate == ()  # "work" is still there and the deadline is ahead


def test_pods_already_terminating_are_not_evicted_twice_but_keep_the_node() -> None:
    plan = plan_drain([node("a", SPOT, cordoned=True)], [pod("w", "a", deleting=True)], 1010.0)
    assert (plan.cordon, plan.evict, plan.terminate) == ((), (), ())


def test_the_controllers_held_binds_and_evictions_count_as_the_pods_will_show_them() -> None:
    """A bind the pods do not show yet keeps its node from looking empty, and an eviction the
    pods do not show yet is not made again (the controller's assume cache)."""
    marked = node("a", SPOT, cordoned=True)
    plan = plan_drain([marked], [pod("new", None)], 1010.0, assumed_on={"ns/new": "a"})
    assert plan.evict == (Preempt("ns/new", plan.evict[0].reason),) and plan.terminate == ()
    plan = plan_drain([marked], [pod("w", "a")], 1010.0, evicting={"ns/w"})
    assert (plan.evict, plan.terminate) == ((), ())


def test_an_empty_marked_node_goes_to_termination() -> None:
    plan = plan_drain([node("a", SPOT, cordoned=True)],
                      [pod("agent", "a", owner="ds", kind="DaemonSet")], 1010.0)
    assert [t.node for t in plan.terminate] == ["a"]
    assert "drained" in plan.terminate[0].reason


def test_at_the_deadline_the_node_goes_whatever_is_left() -> None:
    pods = [pod("slow", "a", deleting=True)]
    assert plan_drain([node("a", SPOT, cordoned=True)], pods, 1119.0).terminate == ()
    plan = plan_drain([node("a", SPOT, cordoned=True)], pods, 1120.0)
    assert [t.node for t in plan.terminate] == ["a"] and "deadline" in plan.terminate[0].reason


def test_without_a_deadline_the_default_drain_time_applies() -> None:
    reb = InterruptionMark(InterruptionKind.REBALANCE, None, 1000.0, "agent")
    pods = [pod("w", "a", deleting=True)]
    assert plan_drain([node("a", reb)], pods, 1599.0, default_drain_s=600).terminate == ()
    assert plan_drain([node("a", reb)], pods, 1600.0, default_drain_s=600).terminate


def test_recovery_clock_times_the_owners_replacement_on_another_node() -> None:
    clock = RecoveryClock()
    old = pod("j-old", "a", owner="job-1")
    other = pod("k", "a", owner="job-2")
    clock.note({"a": SPOT}, [old, other, pod("z", "b", owner="job-3")])
    assert clock.waiting == 2
    # the evicted pod itself, a pending replacement, one on the same node: not yet
    pending = pod("j-new", None, owner="job-1", phase="Pending")
    assert clock.observe([old, pending], 1050.0) == []
    assert clock.observe([pod("j-new", "a", owner="job-1", started="1970-01-01T00:17:40Z")],
                         1060.0) == []
    # Running elsewhere: notice (1000) → containers started (1970-01-01T00:18:20Z = 1100)
    done = clock.observe([pod("j-new", "b", owner="job-1", started="1970-01-01T00:18:20Z")],
                         1200.0)
    assert done == [100.0]
    assert clock.waiting == 1
    # noting the same owner again (the old pod still terminating) does not restart its clock
    clock.note({"a": SPOT}, [other])
    assert clock.waiting == 1


def test_each_drain_says_its_cause() -> None:
    """What the disruption metrics count an eviction as: an interrupted node's pods are
    ``interruption``; a consolidated node's are ``consolidation``, or ``swap`` when the mark
    says the on-demand → spot swap chose it (a swap is carried out as a consolidation)."""
    def marked(name: str, method: str) -> dict:
        return {"metadata": {"name": name, "annotations": {
            names.ANN_CONSOLIDATION: ConsolidationMark(method, 1000.0).to_json()}},
            "spec": {"unschedulable": True}}
    nodes = [node("a", SPOT), marked("b", "single-node-consolidation"),
             marked("c", "spot-swap")]
    plan = plan_drain(nodes, [pod("pa", "a"), pod("pb", "b"), pod("pc", "c")], now=1010.0)
    assert {d.job_id: d.cause for d in plan.evict} == {
        "ns/pa": Cause.INTERRUPTION, "ns/pb": Cause.CONSOLIDATION, "ns/pc": Cause.SWAP}


class _Core:
    """Records the Node patches a drainer makes (``None``: a response with nothing to read)."""

    def __init__(self) -> None:
        self.patched: list[str] = []

    def patch_node(self, name: str, body: dict, _preload_content: bool = True) -> None:
        self.patched.append(name)


def test_the_drainer_reads_the_marks_again_only_after_a_node_object_changed() -> None:
    """Node objects are an informer's, replaced on each event: the same objects carry the same
    marks, and a replaced one (here: a new notice on ``a``) is read again."""
    from gpufleet.k8s.disruption.drain import Drainer
    from gpufleet.k8s.schedule.telemetry import ControllerMetrics

    core = _Core()
    drainer = Drainer(core, applier=None, metrics=ControllerMetrics(),  # type: ignore[arg-type]
                      terminate=lambda t: None)
    nodes = [node("a"), node("b")]
    drainer.cycle(nodes, [], now=1010.0)
    marks = drainer._marks
    drainer.cycle(list(nodes), [], now=1011.0)  # another list of the same objects
    assert drainer._marks is marks and core.patched == []
    drainer.cycle([node("a", SPOT), nodes[1]], [], now=1012.0)
    assert drainer._marks is not marks and list(drainer._marks.marked) == ["a"]
    assert core.patched == ["a"]  # cordoned; no pod on it: terminated (recorded by the lambda)
