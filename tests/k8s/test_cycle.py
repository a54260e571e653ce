"""Snapshot restore and one scheduling cycle, on hand-written Node/Pod JSON (no API server)."""

from __future__ import annotations

import numpy as np

from gpufleet.control.gang_room import Costs, GangRoomBook, GangRoomSettings
from gpufleet.decisions import Bind, Preempt, Refuse
from gpufleet.k8s.schedule.cycle import VictimMemo, gang_room_input, plan_cycle, victims_of
from gpufleet.k8s.translate.snapshot import ParseCache, build_snapshot
from gpufleet.placement import get_policy


def node(name: str, gpus: int, product: str = "Tesla-T4", mig: int = 0) -> dict:
    alloc = {"cpu": "32", "memory": "128Gi", "nvidia.com/gpu": str(gpus - mig)}
    if mig:
        alloc["nvidia.com/mig-1g.5gb"] = str(7 * mig)
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product,
                                                  "nvidia.com/gpu.count": str(gpus)}},
            "spec": {}, "status": {"allocatable": alloc}}


def pod(name: str, limits: dict | None = None, ann: dict | None = None, node_name: str = "",
        labels: dict | None = None, t: int = 0, **spec: object) -> dict:
    return {"metadata": {"name": name, "namespace": "ns", "annotations": ann or {},
                         "labels": labels or {},
                         "creationTimestamp": f"2026-01-01T00:00:{t:02d}Z"},
            "spec": {"schedulerName": "gpufleet", "nodeName": node_name,
                     "containers": [{"name": "c", "resources": {"limits": limits or {}}}],
                     **spec},
            "status": {"phase": "Running" if node_name else "Pending"}}


POLICY = get_policy("fgd-strand", tie_seed=0)


def plan(nodes: list, pods: list, **kw: object):
    snap = build_snapshot(nodes, pods)
    return snap, plan_cycle(snap, POLICY, np.random.default_rng(0), **kw)


def test_restored_annotations_hold_their_gpus() -> None:
    running = pod("r", {"nvidia.com/gpu": "1"}, node_name="t4",
                  ann={"gpufleet.io/node": "t4", "gpufleet.io/gpus": "1",
                       "gpufleet.io/gpu-milli": "1000"})
    snap, p = plan([node("t4", 2)], [running, pod("new", {"nvidia.com/gpu": "1"})])
    assert snap.allocations["ns/r"].bind.gpus == (1,)
    (b,) = p.of(Bind)
    assert (b.job_id, b.node, b.gpus) == ("ns/new", "t4", (0,))


def test_unannotated_bound_pod_and_terminal_pods() -> None:
    foreign = pod("f", {"nvidia.com/gpu": "2"}, node_name="t4", schedulerName="default-scheduler")
    done = pod("d", {"nvidia.com/gpu": "2"}, node_name="t4")
    done["status"]["phase"] = "Succeeded"
    snap, p = plan([node("t4", 2)], [foreign, done, pod("new", {"nvidia.com/gpu": "1"})])
    assert snap.allocations["ns/f"].bind.gpus == (0, 1) and "ns/d" not in snap.allocations
    (r,) = p.of(Refuse)
    assert r.job_id == "ns/new" and r.message.startswith("0/1 nodes are available: 1 insufficient")


def test_mig_and_fraction_binds() -> None:
    _snap, p = plan([node("a100", 2, "NVIDIA-A100-SXM4-40GB", mig=1)], [
        pod("m", {"nvidia.com/mig-1g.5gb": "1"}, t=1),
        pod("f1", ann={"gpu-fraction": "0.5"}, t=2),
        pod("f2", ann={"gpu-fraction": "0.5"}, t=3)])
    binds = {b.job_id: b for b in p.of(Bind)}
    assert binds["ns/m"].mig[0].gpu == 1 and binds["ns/m"].mig[0].profile == "1g.5gb"
    assert binds["ns/f1"].gpus == binds["ns/f2"].gpus == (0,)
    assert binds["ns/f1"].milli_per_gpu == 500


def test_gang_all_or_nothing_and_waiting_for_members() -> None:
    g = {"scheduling.x-k8s.io/pod-group": "g"}
    big = [pod(f"w{i}", {"nvidia.com/gpu": "1"}, labels=g,
               ann={"scheduling.x-k8s.io/min-available": "3"}) for i in range(3)]
    _, p = plan([node("t4", 2)], big)
    assert not p.of(Bind) and len(p.of(Refuse)) == 3
    assert "pod group ns/g (3 pods, all or nothing)" in p.of(Refuse)[0].message
    _, p = plan([node("t4", 4)], big[:2])
    assert not p.of(Bind) and "waiting for 3 members, 2 pending" in p.of(Refuse)[0].message
    _, p = plan([node("t4", 4)], big)
    assert sorted(b.job_id for b in p.of(Bind)) == ["ns/w0", "ns/w1", "ns/w2"]


def test_queue_order_priority_first() -> None:
    _, p = plan([node("t4", 1)], [pod("old", {"nvidia.com/gpu": "1"}, t=1),
                                  pod("vip", {"nvidia.com/gpu": "1"}, t=5, priority=100)])
    assert [b.job_id for b in p.of(Bind)] == ["ns/vip"]


def test_preemption_evicts_the_lower_priority_pod_only() -> None:
    low = pod("low", {"nvidia.com/gpu": "1"}, node_name="t4", priority=0,
              ann={"gpufleet.io/node": "t4", "gpufleet.io/gpus": "0"})
    mid = pod("mid", {"nvidia.com/gpu": "1"}, node_name="t4", priority=50,
              ann={"gpufleet.io/node": "t4", "gpufleet.io/gpus": "1"})
    vip = pod("vip", {"nvidia.com/gpu": "1"}, priority=10)
    _, p = plan([node("t4", 2)], [low, mid, vip])
    assert p.of(Preempt) == [Preempt("ns/low", "preempted by ns/vip (priority 10)")]
    low["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    _, p = plan([node("t4", 2)], [low, mid, vip])  # eviction in flight: no second victim
    assert not p.of(Preempt)
    _, p = plan([node("t4", 2)], [low, mid, vip], preemption=False)
    assert not p.of(Preempt)


def test_unreadable_request_is_refused_with_reason() -> None:
    _, p = plan([node("t4", 1)], [pod("x", {"nvidia.com/mig-1g.5gb": "2"})])
    (r,) = p.of(Refuse)
    assert "one MIG instance" in r.message and r.never


def test_node_selector_masks_nodes_and_names_them_in_the_reason() -> None:
    a, b = node("t4-a", 1), node("t4-b", 1)
    a["metadata"]["labels"]["topology.kubernetes.io/zone"] = "za"
    b["metadata"]["labels"]["topology.kubernetes.io/zone"] = "zb"
    sel = {"topology.kubernetes.io/zone": "zb"}
    snap, p = plan([a, b], [pod("p", {"nvidia.com/gpu": "1"}, nodeSelector=sel, t=1),
                            pod("q", {"nvidia.com/gpu": "1"}, nodeSelector=sel, t=2)])
    (bind,) = p.of(Bind)
    assert (bind.job_id, bind.node) == ("ns/p", "t4-b")
    (r,) = p.of(Refuse)
    assert r.message == ("0/2 nodes are available: 1 node(s) didn't match Pod's node "
                         "affinity/selector, 1 insufficient GPU")
    assert snap.state.active[:2].all()  # the mask was undone


def test_parse_cache_reuses_unchanged_objects_and_sees_changes() -> None:
    cache = ParseCache()
    n = node("t4", 2)
    n["metadata"]["resourceVersion"] = "1"
    p = pod("a", {"nvidia.com/gpu": "1"})
    p["metadata"]["resourceVersion"] = "5"
    first = build_snapshot([n], [p], cache=cache)
    again = build_snapshot([n], [p], cache=cache)
    assert again.pending[0] is first.pending[0]  # same parsed object: not re-parsed
    p2 = {**p, "metadata": {**p["metadata"], "resourceVersion": "6"},
          "spec": {**p["spec"], "nodeName": "t4"}}
    later = build_snapshot([n], [p2], cache=cache)
    assert not later.pending and "ns/a" in later.allocations
    build_snapshot([n], [], cache=cache)
    assert not cache.pods  # deleted pods leave the cache


def test_gang_room_input_reads_ends_and_movable_pods_from_the_pods() -> None:
    def running(name: str, gpus: str, ann: dict, **kw: object) -> dict:
        return pod(name, {"nvidia.com/gpu": gpus}, node_name="t4",
                   ann={"gpufleet.io/node": "t4", **ann}, **kw)

    timed = running("timed", "1", {"gpufleet.io/gpus": "0", "gpufleet.io/gpu-milli": "1000",
                                    "gpufleet.io/duration": "600"},
                    terminationGracePeriodSeconds=10)
    timed["status"]["startTime"] = "2026-01-01T00:01:00Z"
    member = running("m0", "1", {"gpufleet.io/gpus": "1", "gpufleet.io/gpu-milli": "1000"},
                     labels={"scheduling.x-k8s.io/pod-group": "old"})
    waiting = [pod(f"g{i}", {"nvidia.com/gpu": "2"}, labels={
        "scheduling.x-k8s.io/pod-group": "g"}, ann={"scheduling.x-k8s.io/min-available": "2"})
        for i in range(2)]
    snap = build_snapshot([node("t4", 4)], [timed, member, *waiting])
    settings = GangRoomSettings(False, 180, 600)
    book = GangRoomBook()
    got = gang_room_input(snap, settings, book, lambda r: 1.0, 0.0, {"ns/timed"})
    assert sorted(v.job_id for v in got.running) == ["ns/m0", "ns/timed"]
    assert {v.job_id: v.workload for v in got.running} == {"ns/m0": "ns/old", "ns/timed": None}
    start = 1767225660.0  # 2026-01-01T00:01:00Z: startTime + gpufleet.io/duration
    assert got.ends == {"ns/timed": start + 600}  # the member states no duration: never ends
    (m,) = got.movable
    # JobSpec's defaults: 30 s write + 120 s restart; it leaves within min(grace 10, write 30)
    assert (m.victim.job_id, m.loss_s, m.leave_s) == ("ns/timed", 150.0, 10.0)
    # the running pods are preemption's victims, made once: with the driver's memo the
    # gang room and the cycle's preemption hold the same objects
    memo: VictimMemo = {}
    first = gang_room_input(snap, settings, book, lambda r: 1.0, 0.0, {"ns/timed"}, memo)
    assert first is not None
    assert {v.job_id: v for v in first.running} == {v.job_id: v for v in victims_of(snap, memo)}
    assert all(a is b for a, b in zip(first.running, victims_of(snap, memo), strict=True))
    book.record("ns/g", Costs(1.0, None, None, 100.0), 0.0)  # it waits: not due at 50 s
    quiet = gang_room_input(snap, settings, book, lambda r: 1.0, 50.0, {"ns/timed"})
    assert quiet is None  # nothing due, nothing reserved: the step is skipped


def test_a_capped_pod_only_sees_nodes_within_its_size() -> None:
    """Right-sized nodes (``caps``, ``k8s.capacity.inputs.node_caps``): best fit would put the
    pod on the nearly full 8-GPU node; capped at 2 GPUs it goes to the 2-GPU node."""
    busy = pod("r", {"nvidia.com/gpu": "7"}, node_name="big",
               ann={"gpufleet.io/node": "big", "gpufleet.io/gpus": "0,1,2,3,4,5,6",
                    "gpufleet.io/gpu-milli": "1000"})
    nodes = [node("big", 8), node("small", 2)]
    for caps, where in (({}, "big"), ({"ns/x": 2}, "small")):
        snap = build_snapshot(nodes, [busy, pod("x", {"nvidia.com/gpu": "1"})])
        got = plan_cycle(snap, get_policy("bestfit", tie_seed=0), np.random.default_rng(0),
                         caps=caps)
        assert [(b.job_id, b.node) for b in got.of(Bind)] == [("ns/x", where)]


def test_the_nodes_only_state_is_reused_while_the_nodes_do_not_change() -> None:
    """``ParseCache.fleet``: the second build copies the first's nodes-only state; each build
    books its own pods on its own copy; a Node's new resourceVersion with the same spec (a
    heartbeat) keeps it, a changed spec rebuilds it."""
    def versioned(n: dict, rv: str) -> dict:
        return {**n, "metadata": {**n["metadata"], "resourceVersion": rv}}

    nodes = [versioned(node("a", 2), "1"), versioned(node("b", 4), "1")]
    held = pod("r", {"nvidia.com/gpu": "2"}, node_name="b",
               ann={"gpufleet.io/node": "b", "gpufleet.io/gpus": "0,1",
                    "gpufleet.io/gpu-milli": "1000"})
    cache = ParseCache()
    first = build_snapshot(nodes, [held], cache=cache)
    assert cache.fleet is not None
    base = cache.fleet[1]
    second = build_snapshot(nodes, [], cache=cache)
    assert cache.fleet[1] is base  # reused, not rebuilt
    fresh = build_snapshot(nodes, [])
    for name in ("free_milli", "cpu_free", "active", "num_gpus"):
        assert (getattr(second.state, name)[:2] == getattr(fresh.state, name)[:2]).all(), name
    assert first.state.free_milli[1, :2].tolist() == [0, 0]  # r's GPUs, on first's copy only
    assert second.state.free_milli[1, :2].tolist() == [1000, 1000]
    beat = [nodes[0], versioned(node("b", 4), "2")]  # a status heartbeat: same spec
    build_snapshot(beat, [], cache=cache)
    assert cache.fleet[1] is base
    grown = [nodes[0], versioned(node("b", 8), "3")]
    third = build_snapshot(grown, [], cache=cache)
    assert cache.fleet[1] is not base and int(third.state.num_gpus[1]) == 8


def test_victims_are_read_only_when_a_pod_is_left_and_reused_across_cycles() -> None:
    """``victims_of``'s memo: a cycle that places every pod never builds the victims; one that
    leaves a pod does, and the next build (the incremental booking keeps the allocation
    objects) reuses each ``Victim``."""
    def versioned(obj: dict, rv: str = "1") -> dict:
        return {**obj, "metadata": {**obj["metadata"], "resourceVersion": rv, "uid": rv}}

    nodes = [versioned(node("t4", 2))]
    running = versioned(pod("r", {"nvidia.com/gpu": "1"}, node_name="t4",
                            ann={"gpufleet.io/node": "t4", "gpufleet.io/gpus": "0",
                                 "gpufleet.io/gpu-milli": "1000"}))
    memo: dict = {}
    cache = ParseCache()
    fits = build_snapshot(nodes, [running, versioned(pod("a", {"nvidia.com/gpu": "1"}))],
                          cache=cache)
    got = plan_cycle(fits, POLICY, np.random.default_rng(0), victim_memo=memo)
    assert [b.job_id for b in got.of(Bind)] == ["ns/a"] and memo == {}
    left = [running, versioned(pod("big", {"nvidia.com/gpu": "2"}, priority=5))]
    snap = build_snapshot(nodes, left, cache=cache)
    got = plan_cycle(snap, POLICY, np.random.default_rng(0), victim_memo=memo)
    assert [p.job_id for p in got.of(Preempt)] == ["ns/r"]  # it reads the victims
    first = memo["ns/r"][1]
    again = build_snapshot(nodes, left, cache=cache)
    assert again.allocations["ns/r"] is snap.allocations["ns/r"]
    plan_cycle(again, POLICY, np.random.default_rng(0), victim_memo=memo)
    assert memo["ns/r"][1] is first
