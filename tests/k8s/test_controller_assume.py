"""The controller's assume step, cycle to cycle, before the informer has seen its own writes.

A bind (or an eviction) this replica made is in the API at once but reaches the informer only
with the watch event, milliseconds to seconds later. Cycles that run in between must treat the
pod as bound on the node and GPUs it was given (or as terminating), or they plan it again and
hand its GPUs to someone else. Here the informers are filled by their own list path from
hand-written objects and never updated after a write, which is exactly that window; the API
writes go to a recorder that answers as the API server would (201 for a Binding and an
Eviction).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from live_wait import wait_for
from recording_controller import RecordingCore, controller, inform

A100 = "NVIDIA-A100-SXM4-40GB"


def node(name: str, gpus: int, product: str = "Tesla-T4", mig: int = 0) -> dict:
    alloc = {"cpu": "32", "memory": "128Gi", "nvidia.com/gpu": str(gpus - mig)}
    if mig:
        alloc["nvidia.com/mig-1g.5gb"] = str(7 * mig)
    return {"metadata": {"name": name, "resourceVersion": "1",
                         "labels": {"nvidia.com/gpu.product": product,
                                    "nvidia.com/gpu.count": str(gpus)}},
            "spec": {}, "status": {"allocatable": alloc}}


def pod(name: str, limits: dict | None = None, ann: dict | None = None, node_name: str = "",
        t: int = 0, **spec: object) -> dict:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                         "resourceVersion": f"{100 + t}", "annotations": ann or {},
                         "creationTimestamp": f"2026-01-01T00:00:{t:02d}Z"},
            "spec": {"schedulerName": "gpufleet", "nodeName": node_name,
                     "containers": [{"name": "c", "resources": {"limits": limits or {}}}],
                     **spec},
            "status": {"phase": "Running" if node_name else "Pending"}}


# (case, node, the first pod's limits and annotations, the second pod's): the second pod fits
# only in what the first one was given
BIND_CASES = [
    ("whole GPUs", node("n", 4), ({"nvidia.com/gpu": "4"}, {}), ({"nvidia.com/gpu": "1"}, {})),
    ("fraction", node("n", 1), ({}, {"gpu-fraction": "0.6"}), ({}, {"gpu-fraction": "0.6"})),
    ("MIG", node("n", 1, A100, mig=1), ({"nvidia.com/mig-4g.20gb": "1"}, {}),
     ({"nvidia.com/mig-4g.20gb": "1"}, {})),
]


@pytest.mark.parametrize(("case", "n", "first", "second"), BIND_CASES,
                         ids=[c[0] for c in BIND_CASES])
def test_a_bind_not_yet_seen_holds_its_pod_and_its_gpus(case: str, n: dict, first: tuple,
                                                        second: tuple) -> None:
    a = pod("a", first[0], first[1], t=1)
    ctl, rec = controller([n], [a])
    out = ctl.run_cycle()
    assert out is not None and [b.job_id for b in out.bound] == ["ns/a"]
    assert rec.binds == [("a", "n")]
    # the informer has not seen the binding yet: "a" is still pending there; "b" arrives
    inform(ctl, [n], [a, pod("b", second[0], second[1], t=2)])
    ctl.run_cycle()
    assert rec.binds == [("a", "n")]  # neither "a" again nor "b" into a's GPUs


def test_an_eviction_not_yet_seen_counts_as_in_progress() -> None:
    held = {"nvidia.com/gpu": "1"}
    low = [pod(f"low{i}", held, {"gpufleet.io/node": f"t4-{i}", "gpufleet.io/gpus": "0",
                                 "gpufleet.io/gpu-milli": "1000"}, node_name=f"t4-{i}", t=i)
           for i in range(2)]
    vip = pod("vip", held, t=5, priority=100)
    nodes = [node("t4-0", 1), node("t4-1", 1)]
    ctl, rec = controller(nodes, [*low, vip])
    ctl.run_cycle()
    assert len(rec.evictions) == 1  # one victim for one preemptor
    ctl.run_cycle()  # the informer still shows the victim running, not terminating
    assert len(rec.evictions) == 1, "evicted again (or a second victim) for one preemptor"


class ConflictingCore(RecordingCore):
    """Every Binding answered 409, as when another replica or a user changed the pod first."""

    def create_namespaced_binding(self, ns: str, body: dict, **_: Any) -> None:
        super().create_namespaced_binding(ns, body)
        raise ApiException(status=409, reason="Conflict")


def test_a_409_bind_is_forgotten_at_once() -> None:
    n = node("n", 4)
    a = pod("a", {"nvidia.com/gpu": "4"}, t=1)
    ctl, _ = controller([n], [a])
    ctl.applier.core = rec = ConflictingCore()
    out = ctl.run_cycle()
    assert out is not None and out.conflicts == ["ns/a"] and not out.bound
    assert len(ctl.assumed) == 0  # nothing held: the next cycle reads the pod as the API has it
    ctl.run_cycle()
    assert rec.binds == [("a", "n"), ("a", "n")]  # planned again from the API's view


def test_assumed_binds_are_confirmed_by_the_informer_and_counted() -> None:
    n = node("n", 4)
    a = pod("a", {"nvidia.com/gpu": "2"}, t=1)
    ctl, rec = controller([n], [a])
    ctl.run_cycle()
    inform(ctl, [n], [a, pod("b", {"nvidia.com/gpu": "2"}, t=2)])
    ctl.run_cycle()  # "a" held: "b" gets the other two GPUs
    assert rec.binds == [("a", "n"), ("b", "n")]
    sample = ctl.metrics.registry.get_sample_value
    assert sample("gpufleet_cycles_with_assumed_binds_total") == 1
    assert sample("gpufleet_assumed_pods", {"kind": "bind"}) == 1
    shown = []
    for p, (name, where) in zip([a, pod("b", {"nvidia.com/gpu": "2"}, t=2)], rec.binds,
                                strict=True):
        got = {**p, "metadata": {**p["metadata"], "resourceVersion": "900"}}
        got["spec"] = {**p["spec"], "nodeName": where}
        assert name == p["metadata"]["name"]
        shown.append(got)
    inform(ctl, [n], shown)  # the informer catches up: nothing left to hold
    ctl.run_cycle()
    assert len(ctl.assumed) == 0 and rec.binds == [("a", "n"), ("b", "n")]


def test_bind_cases_are_tight() -> None:
    """The table's second pod does fit where the first is absent: a refusal in the test above is
    the held GPUs', not the request's."""
    for case, n, _first, second in BIND_CASES:
        ctl, rec = controller([n], [pod("b", second[0], second[1], t=2)])
        ctl.run_cycle()
        assert rec.binds == [("b", "n")], case


def test_an_overcommitted_pod_is_counted_logged_once_and_its_room_not_handed_out(
        caplog: pytest.LogCaptureFixture) -> None:
    """Someone bound b (500 milli) on the GPU where a holds 600: the snapshot cannot book b as
    written. The gauge counts it, the log names it once (not every cycle), and the 400 milli
    left are b's, so a pending 0.4 share is not bound there. Once b is gone, the gauge reads 0
    and the share fits."""
    n = node("n", 1)
    a, b = (pod(x, {}, {"gpufleet.io/node": "n", "gpufleet.io/gpus": "0",
                        "gpufleet.io/gpu-milli": m}, node_name="n", t=i)
            for i, (x, m) in enumerate((("a", "600"), ("b", "500"))))
    share = pod("s", {}, {"gpu-fraction": "0.4"}, t=5)
    ctl, rec = controller([n], [a, b, share])
    sample = ctl.metrics.registry.get_sample_value
    with caplog.at_level("WARNING", logger="gpufleet.k8s.schedule.controller"):
        ctl.run_cycle()
        ctl.run_cycle()
    assert rec.binds == []
    assert sample("gpufleet_snapshot_unaccounted", {"kind": "pod"}) == 1
    assert sample("gpufleet_snapshot_unaccounted", {"kind": "claim"}) == 0
    assert [r.getMessage() for r in caplog.records if "not booked" in r.getMessage()] == [
        "snapshot: ns/b not booked as written: bind of ns/b overcommits node n"]
    inform(ctl, [n], [a, share])
    ctl.run_cycle()
    assert sample("gpufleet_snapshot_unaccounted", {"kind": "pod"}) == 0
    assert rec.binds == [("s", "n")]


class GatedCore(RecordingCore):
    """Bindings wait for ``gate`` (a bind in flight while the next cycle plans), then are
    answered 201, or 409 with ``conflict``."""

    def __init__(self, conflict: bool = False) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.conflict = conflict

    def create_namespaced_binding(self, ns: str, body: dict, **_: Any) -> None:
        assert self.gate.wait(10), "the test never opened the gate"
        super().create_namespaced_binding(ns, body)
        if self.conflict:
            raise ApiException(status=409, reason="Conflict")


@pytest.mark.parametrize("conflict", [False, True], ids=["accepted", "409"])
def test_an_async_bind_in_flight_holds_its_gpus_while_the_next_cycle_plans(
        conflict: bool) -> None:
    n = node("n", 4)
    a = pod("a", {"nvidia.com/gpu": "4"}, t=1)
    ctl, _ = controller([n], [a], async_binds=True)
    ctl.applier.core = rec = GatedCore(conflict)
    try:
        out = ctl.run_cycle()  # returns with a's bind still in flight
        assert out is not None and out.bound == [] and rec.binds == []
        assert ctl.assumed.bound_nodes() == {"ns/a": "n"}
        inform(ctl, [n], [a, pod("b", {"nvidia.com/gpu": "1"}, t=2)])
        ctl.changed.clear()
        ctl.run_cycle()  # b does not get a's GPUs, a is not planned again
        rec.gate.set()
        wait_for("a's bind to be answered", lambda: len(rec.binds) == 1, 10)
        if conflict:  # forgotten, and the loop is woken to re-read the world
            wait_for("the assumption to be dropped", lambda: len(ctl.assumed) == 0, 10)
            assert ctl.changed.is_set()
        else:  # held until the informer shows it
            wait_for("the write to be finished", lambda: ctl.assumed.bound_nodes(), 10)
            assert ctl.assumed.bound_nodes() == {"ns/a": "n"}
        assert rec.binds == [("a", "n")]
    finally:
        rec.gate.set()
        ctl.stop(release=False)
