"""The live driver's carry of pods refused for want of room (``k8s.schedule.blocked``).

A case table of what clears the carry (capacity freed, read from two snapshots of hand-written
Nodes and Pods), the carry's own upkeep (a pod that changed, or whose refusal is not written
yet, is planned again), and the controller's cycles on informers fed event by event: carried
pods are not planned, keep their refusal (no write again) and still count as pending, until a
pod on a node is deleted.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from recording_controller import controller

from gpufleet.decisions import Refuse
from gpufleet.k8s.schedule.blocked import BlockedPods, freed, room_of
from gpufleet.k8s.schedule.controller import Controller
from gpufleet.k8s.schedule.cycle import plan_cycle
from gpufleet.k8s.translate.snapshot import ParseCache, build_snapshot
from gpufleet.placement import get_policy

GPU = {"nvidia.com/gpu": "1"}
TWO = {"nvidia.com/gpu": "2"}


def node(name: str, gpus: int = 2, taints: list | None = None, labels: dict | None = None,
         unschedulable: bool = False) -> dict:
    return {"metadata": {"name": name, "resourceVersion": "1",
                         "labels": {"nvidia.com/gpu.product": "Tesla-T4",
                                    "nvidia.com/gpu.count": str(gpus), **(labels or {})}},
            "spec": {"taints": taints or [], "unschedulable": unschedulable},
            "status": {"allocatable": {"cpu": "32", "memory": "128Gi",
                                       "nvidia.com/gpu": str(gpus)}}}


def pod(name: str, limits: dict, node_name: str = "", gpus: str = "0", t: int = 0,
        phase: str | None = None, group: str | None = None) -> dict:
    ann = {"gpufleet.io/node": node_name, "gpufleet.io/gpus": gpus,
           "gpufleet.io/gpu-milli": "1000"} if node_name else {}
    labels = {"pod-group.scheduling.sigs.k8s.io": group} if group else {}
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                         "resourceVersion": f"{100 + t}", "annotations": ann, "labels": labels,
                         "creationTimestamp": f"2026-01-01T00:00:{t:02d}Z"},
            "spec": {"schedulerName": "gpufleet", "nodeName": node_name,
                     "containers": [{"name": "c", "resources": {"limits": limits}}]},
            "status": {"phase": phase or ("Running" if node_name else "Pending")}}


def full() -> tuple[list[dict], list[dict]]:
    """Two 2-GPU nodes, every GPU held by a running 1-GPU pod."""
    nodes = [node("a"), node("b")]
    pods = [pod(f"r-{n}{g}", GPU, n, str(g), t=g) for n in "ab" for g in (0, 1)]
    return nodes, pods


def without(pods: list[dict], name: str) -> list[dict]:
    return [p for p in pods if p["metadata"]["name"] != name]


def succeeded(pods: list[dict], name: str) -> list[dict]:
    out = copy.deepcopy(pods)
    for p in out:
        if p["metadata"]["name"] == name:
            p["status"]["phase"] = "Succeeded"
    return out


NODES, PODS = full()
NOT_READY = [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]
# (case, nodes and pods after, quotas after, whether capacity was freed since the full fleet)
CASES: list[tuple[str, list[dict], list[dict], object, bool]] = [
    ("nothing changed", NODES, PODS, None, False),
    ("a new pending pod", NODES, [*PODS, pod("new", GPU, t=9)], None, False),
    ("a node's heartbeat (new resourceVersion)",
     [{**NODES[0], "metadata": {**NODES[0]["metadata"], "resourceVersion": "2"}}, NODES[1]],
     PODS, None, False),
    ("a node removed", [NODES[0]], [p for p in PODS if p["spec"]["nodeName"] == "a"], None,
     False),
    ("a node cordoned", [node("a", unschedulable=True), NODES[1]], PODS, None, True),
    ("a running pod deleted", NODES, without(PODS, "r-a0"), None, True),
    ("a running pod finished", NODES, succeeded(PODS, "r-b1"), None, True),
    ("a node added", [*NODES, node("c")], PODS, None, True),
    ("a node became Ready (not-ready taint gone)", NODES, PODS, None, True),
    ("a node relabelled", [node("a", labels={"pool": "x"}), NODES[1]], PODS, None, True),
    ("a team's quota changed", NODES, PODS, [("team-a", 8)], True),
]


@pytest.mark.parametrize("cached", [False, True], ids=["fresh builds", "one parse cache"])
@pytest.mark.parametrize(("case", "nodes", "pods", "quotas", "want"), CASES,
                         ids=[c[0] for c in CASES])
def test_what_frees_capacity(case: str, nodes: list, pods: list, quotas: object,
                             want: bool, cached: bool) -> None:
    """Both ways ``freed`` compares: row by row where both rooms stand on the same node
    records (a parse cache's unchanged Nodes), and by name otherwise."""
    before_nodes = NODES
    if case.startswith("a node became Ready"):
        before_nodes = [node("a", taints=NOT_READY), NODES[1]]
    if case == "a node cordoned":  # the reverse is the freeing: uncordoned
        before_nodes, nodes = nodes, NODES
    cache = None
    if cached:  # as the API does: an object that changed has a new resourceVersion
        cache = ParseCache()
        nodes, pods = ([o if any(o is b for b in was) else
                        {**o, "metadata": {**o["metadata"], "resourceVersion": "changed"}}
                        for o in now] for now, was in ((nodes, before_nodes), (pods, PODS)))
    before = room_of(build_snapshot(before_nodes, PODS, cache=cache))
    now = room_of(build_snapshot(nodes, pods, cache=cache), quotas)
    assert freed(before, now) is want
    if cached and before_nodes is NODES and nodes is NODES:
        assert all(a is b for a, b in zip(before.nodes, now.nodes, strict=True))


def test_a_bind_the_cycle_made_is_not_freed_room() -> None:
    """The carry starts from the fleet after the cycle's binds: the next snapshot, showing the
    bind (assumed or confirmed), has no more room than that."""
    nodes, pods = full()
    pods = without(pods, "r-a0")
    snap = build_snapshot(nodes, [*pods, pod("new", GPU, t=9)])
    p = plan_cycle(snap, get_policy("fgd-strand", tie_seed=0), np.random.default_rng(0))
    (b,) = p.binds
    after = room_of(snap)
    bound = pod("new", GPU, b.node, ",".join(map(str, b.gpus)), t=9)
    assert not freed(after, room_of(build_snapshot(nodes, [*pods, bound])))
    assert freed(after, room_of(build_snapshot(nodes, pods)))  # and it ends: freed


def test_only_placement_refusals_of_single_pods_are_carried() -> None:
    nodes, pods = full()
    gang = [pod(f"g{i}", GPU, t=5, group="gang") for i in range(2)]
    snap = build_snapshot(nodes, [*pods, pod("big", TWO, t=3), pod("small", GPU, t=4), *gang])
    out: dict[str, Refuse] = {}
    p = plan_cycle(snap, get_policy("fgd-strand", tie_seed=0), np.random.default_rng(0),
                   blocked_out=out)
    assert {r.job_id for r in p.refusals} >= {"ns/big", "ns/small", "ns/g0", "ns/g1"}
    assert set(out) == {"ns/big", "ns/small"}  # the pod group is planned every cycle
    assert out["ns/big"].message.startswith("0/2 nodes are available")


def objects(*pods: dict, says: str | None = None) -> dict[str, dict]:
    out = {}
    for p in pods:
        p = copy.deepcopy(p)
        if says is not None:
            p["status"]["conditions"] = [{"type": "PodScheduled", "status": "False",
                                          "reason": "Unschedulable", "message": says}]
        out[f"ns/{p['metadata']['name']}"] = p
    return out


def test_the_carry_upkeep() -> None:
    nodes, pods = full()
    big = pod("big", TWO, t=3)
    snap = build_snapshot(nodes, [*pods, big])
    msg = "0/2 nodes are available: 2 insufficient nvidia.com/gpu."
    refusal = Refuse("ns/big", msg)
    carry = BlockedPods(max_age_s=60.0)
    room = room_of(snap)
    carry.observe(room, 0.0)
    carry.record({"ns/big": refusal}, objects(big), room, 0.0)
    # carried: unchanged, and its condition says the refusal
    carry.observe(room, 1.0)
    plan, carried = carry.split(snap.pending, objects(big, says=msg))
    assert plan == [] and list(carried) == ["ns/big"]
    assert carry.pods["ns/big"][1] == refusal and carry.messages == {msg: 1}
    # the refusal not written yet (or its write failed): planned again
    assert carry.split(snap.pending, objects(big))[0] == snap.pending
    carry.record({"ns/big": refusal}, objects(big), room, 1.0)
    # the pod changed since (another resourceVersion): planned again
    changed = copy.deepcopy(big)
    changed["metadata"]["resourceVersion"] = "999"
    assert carry.split(snap.pending, objects(changed, says=msg))[0] == snap.pending
    # a reclaim claimant nominated: planned whatever it carries
    carry.record({"ns/big": refusal}, objects(big), room, 1.0)
    assert carry.split(snap.pending, objects(big, says=msg), ("ns/big",))[0] == snap.pending
    # older than max_age_s: everything planned (a full pass)
    carry.record({"ns/big": refusal}, objects(big), room, 1.0)
    carry.observe(room, 60.0)
    assert carry.pods == {} and carry.clears == 1
    # capacity freed: cleared
    carry.observe(room, 61.0)
    carry.record({"ns/big": refusal}, objects(big), room, 61.0)
    carry.observe(room_of(build_snapshot(nodes, without(pods, "r-a0"))), 62.0)
    assert carry.pods == {} and carry.clears == 2


def event(ctl: Controller, kind: str, obj: dict) -> None:
    """One watch event, applied by the informer's own path (no relist)."""
    ctl.pods._apply({"type": kind, "object": obj})


def test_carried_pods_are_not_planned_nor_rewritten_until_a_pod_is_deleted() -> None:
    nodes, pods = full()
    bigs = [pod(f"big{i}", TWO, t=10 + i) for i in range(3)]
    ctl, rec = controller(nodes, [*pods, *bigs])
    tried = ctl.metrics.attempts.labels(result="unschedulable")

    def cycle() -> float:
        before = tried._value.get()
        ctl.run_cycle()
        return tried._value.get() - before

    assert cycle() == 3 and sorted(rec.status) == ["big0", "big1", "big2"]
    assert sorted(rec.events) == ["big0", "big1", "big2"]
    # the informer sees the refusals written (a new resourceVersion each)
    msg = ctl.applier._written["ns/big0"]
    assert msg.startswith("0/2 nodes are available")
    for i, b in enumerate(bigs):
        b = copy.deepcopy(b)
        b["metadata"]["resourceVersion"] = f"{200 + i}"
        b["status"]["conditions"] = [{"type": "PodScheduled", "status": "False",
                                      "reason": "Unschedulable", "message": msg}]
        bigs[i] = b
        event(ctl, "MODIFIED", b)
    assert cycle() == 3  # changed since refused: planned once more, not rewritten
    assert cycle() == 0  # carried: not planned
    assert cycle() == 0
    assert len(rec.status) == 3 and len(rec.events) == 3
    pending = ctl.metrics.pending.collect()[0].samples
    assert sum(s.value for s in pending) == 3  # still pending, by their refusal's reason
    # a new pod that fits nowhere either is planned (and refused) on its own
    new = pod("new", GPU, t=30)
    event(ctl, "ADDED", new)
    assert cycle() == 1 and rec.status[-1] == "new"
    # a running pod deleted: capacity freed, every pod planned again
    event(ctl, "DELETED", pods[0])
    assert cycle() == 3  # new binds on the freed GPU; the three are refused again
    assert len(rec.status) == 4  # the same refusal: not written again


def test_a_split_told_what_changed_carries_what_a_split_of_every_pod_carries() -> None:
    """The carry's incremental split (only the pods changed, recorded since, or left loose are
    looked at) against the split that looks at every pod, fed the same fixed-seed walk: pods
    created, changed, bound by someone or deleted; the planned ones refused for want of room
    (their refusal then written, or its write failed and held, or still to be made) or bound
    by this replica (assumed, then confirmed or forgotten); nominated; the carry cleared. After
    each split both plan the same pods and carry the same ones."""
    import random

    from gpufleet.k8s.translate.pods import pod_info

    rng = random.Random(11)
    msg = "0/2 nodes are available: 2 insufficient nvidia.com/gpu."
    room = room_of(build_snapshot([node("a")], []))
    inc, ref = BlockedPods(), BlockedPods()
    objs: dict[str, dict] = {}
    listed: set[str] = set()
    held: set[str] = set()
    assumed: set[str] = set()
    unwritten: set[str] = set()
    rv = 0

    def write(k: str, says: bool) -> None:
        nonlocal rv
        rv += 1
        p = pod(k.removeprefix("ns/"), TWO)
        p["metadata"]["resourceVersion"] = str(rv)
        if says:
            p["status"]["conditions"] = [{"type": "PodScheduled", "status": "False",
                                          "reason": "Unschedulable", "message": msg}]
        objs[k] = p

    for step in range(300):
        changed: set[str] = set()
        for k in sorted(unwritten):  # the refusals to write: written, failed, or later
            r = rng.random()
            if r < 0.5:
                write(k, True)
                changed.add(k)
                held.discard(k)
                unwritten.discard(k)
            elif r < 0.7:
                held.add(k)
        for k in sorted(assumed):  # this replica's binds: confirmed, or forgotten
            r = rng.random()
            if r < 0.4:
                write(k, False)
                listed.discard(k)
                changed.add(k)
                assumed.discard(k)
            elif r < 0.6:
                assumed.discard(k)
        for k in sorted(held):  # a backoff ends
            if rng.random() < 0.3:
                held.discard(k)
        for _ in range(rng.randrange(1, 4)):
            r, keys = rng.random(), sorted(listed)
            if r < 0.4 or not keys:
                k = f"ns/p{step}-{len(objs)}"
                write(k, False)
                listed.add(k)
            else:
                k = rng.choice(keys)
                if r < 0.7:
                    write(k, False)  # changed
                else:  # bound by someone, or deleted
                    listed.discard(k)
                    objs.pop(k, None) if rng.random() < 0.5 else write(k, False)
            changed.add(k)
        if rng.random() < 0.03:
            inc.clear()
            ref.clear()
        queued = {k: pod_info(objs[k]) for k in sorted(listed) if k not in held | assumed}
        nominated = rng.sample(sorted(queued), 1) if queued and rng.random() < 0.1 else []
        got = inc.split(queued, objs, nominated, changed, listed)
        want = ref.split(queued, objs, nominated)
        assert {p.key for p in got[0]} == {p.key for p in want[0]}, step
        assert set(got[1]) == set(want[1]), step
        assert inc.messages == ref.messages
        refused: dict[str, Refuse] = {}
        for p in want[0]:
            r = rng.random()
            if r < 0.6:
                refused[p.key] = Refuse(p.key, msg)
                if "conditions" not in objs[p.key]["status"]:
                    unwritten.add(p.key)
            elif r < 0.8:
                assumed.add(p.key)
        inc.record(refused, objs, room, float(step))
        ref.record(refused, objs, room, float(step))
