"""The assume cache's state machine as a table: what a write leaves in the next snapshot, for
each thing the informer may show meanwhile (TTL 30 s, a hand-driven clock)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from gpufleet.decisions import Bind, Preempt, Refuse
from gpufleet.k8s.schedule.cycle import plan_cycle
from gpufleet.k8s.translate.assume import AssumeCache
from gpufleet.k8s.translate.pods import PodInfo, pod_info
from gpufleet.k8s.translate.snapshot import ParseCache, build_snapshot
from gpufleet.placement import get_policy

BIND = Bind(job_id="ns/a", node="t4", gpus=(1,), milli_per_gpu=1000)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def pod(name: str = "a", *, node: str = "", uid: str = "u1", deleting: bool = False,
        gpus: int = 1, ann: dict | None = None, priority: int = 0, t: int = 0) -> dict:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": uid,
                            "resourceVersion": "7", "annotations": ann or {},
                            "creationTimestamp": f"2026-01-01T00:00:{t:02d}Z"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    return {"metadata": meta,
            "spec": {"schedulerName": "gpufleet", "nodeName": node, "priority": priority,
                     "containers": [{"name": "c", "resources": {
                         "limits": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": {"phase": "Running" if node else "Pending"}}


# what the informer shows of pod "a" when the cycle after the write runs
INFORMER = {
    "pending": [pod()],  # not seen yet
    "bound": [pod(node="t4", ann={"gpufleet.io/node": "t4", "gpufleet.io/gpus": "1"})],
    "bound elsewhere": [pod(node="t4-b")],  # someone else's bind won: the API is the truth
    "terminating": [pod(node="t4", deleting=True)],
    "gone": [],
    "recreated": [pod(uid="u2")],  # a new pod under the same name: not ours to hold
}

# (case, writes, seconds later, informer shows) →
#   (a's node in the overlay, a terminating there, binds held, evictions held, confirmed, expired)
BIND_CASES = [
    ("assume, in flight", ["assume"], 0, "pending", ("t4", False, 1, 0, 0, 0)),
    ("in flight never expires", ["assume"], 3600, "pending", ("t4", False, 1, 0, 0, 0)),
    ("assume → finish, before TTL", ["assume", "finish"], 29, "pending",
     ("t4", False, 1, 0, 0, 0)),
    ("assume → finish → expire", ["assume", "finish"], 31, "pending", ("", False, 0, 0, 0, 1)),
    ("assume → confirm", ["assume", "finish"], 1, "bound", ("t4", False, 0, 0, 1, 0)),
    ("confirm on another node", ["assume", "finish"], 1, "bound elsewhere",
     ("t4-b", False, 0, 0, 1, 0)),
    ("assume → forget (failed or 409)", ["assume", "forget"], 0, "pending",
     ("", False, 0, 0, 0, 0)),
    ("assume → pod deleted", ["assume", "finish"], 1, "gone", (None, False, 0, 0, 1, 0)),
    ("assume → pod recreated", ["assume", "finish"], 1, "recreated", ("", False, 0, 0, 1, 0)),
]
EVICT_CASES = [
    ("evicted, not seen", ["evict"], 1, "bound", ("t4", True, 0, 1, 0, 0)),
    ("evicted → confirm", ["evict"], 1, "terminating", ("t4", True, 0, 0, 1, 0)),
    ("evicted → gone", ["evict"], 1, "gone", (None, False, 0, 0, 1, 0)),
    ("evicted → expire", ["evict"], 31, "bound", ("t4", False, 0, 0, 0, 1)),
    ("bound and evicted, neither seen", ["assume", "finish", "evict"], 1, "pending",
     ("t4", True, 1, 1, 0, 0)),
    ("after a restart: empty", ["assume", "finish", "evict", "clear"], 1, "pending",
     ("", False, 0, 0, 0, 0)),
]


def write(cache: AssumeCache, op: str) -> None:
    match op:
        case "assume":
            cache.assume(BIND, "u1")
        case "finish":
            cache.finish("ns/a")
        case "forget":
            cache.forget("ns/a")
        case "evict":
            cache.evicted("ns/a", "u1")
        case "clear":
            cache.clear()


@pytest.mark.parametrize(("case", "writes", "later", "shows", "want"), BIND_CASES + EVICT_CASES,
                         ids=[c[0] for c in BIND_CASES + EVICT_CASES])
def test_assume_state_machine(case: str, writes: list[str], later: float, shows: str,
                              want: tuple) -> None:
    clock = Clock()
    cache = AssumeCache(30.0, clock=clock)
    for op in writes:
        write(cache, op)
    clock.t += later
    got = cache.overlay([pod_info(p) for p in INFORMER[shows]])
    a: PodInfo | None = next((i for i in got.infos if i.key == "ns/a"), None)
    node, terminating, binds, evictions, confirmed, expired = want
    assert (a.node_name if a else None) == node
    assert (a.terminating if a else False) == terminating
    assert (len(got.binds), len(got.evictions)) == (binds, evictions)
    assert (got.confirmed, got.expired) == (confirmed, expired)
    assert len(cache) == binds + evictions  # what was confirmed or expired is gone for good
    if binds:
        assert a is not None and a.assignment == BIND and not a.pending
        assert a.annotations["gpufleet.io/gpus"] == "1"


def test_held_bind_takes_its_gpus_in_the_snapshot_and_the_parse_cache_stays_true() -> None:
    """The overlay is laid over the parse, so the parse cache (keyed by resourceVersion, which an
    assumption does not change) keeps the informer's pod, and the snapshot the assumed one."""
    node = {"metadata": {"name": "t4", "resourceVersion": "1",
                         "labels": {"nvidia.com/gpu.product": "Tesla-T4",
                                    "nvidia.com/gpu.count": "2"}},
            "spec": {}, "status": {"allocatable": {"cpu": "32", "memory": "128Gi",
                                                   "nvidia.com/gpu": "2"}}}
    clock = Clock()
    cache, parses = AssumeCache(30.0, clock=clock), ParseCache()
    pods = [pod(), pod("b", uid="ub", t=1)]
    cache.assume(BIND, "u1")
    cache.finish("ns/a")
    snap = build_snapshot([node], pods, cache=parses, assumed=cache)
    assert snap.allocations["ns/a"].bind == BIND
    assert [p.key for p in snap.pending] == ["ns/b"]
    plan = plan_cycle(snap, get_policy("fgd-strand", tie_seed=0), np.random.default_rng(0))
    (b,) = plan.of(Bind)
    assert (b.job_id, b.gpus) == ("ns/b", (0,))  # not GPU 1, which "a" holds
    assert parses.index.infos["ns/a"].pending  # the cached parse is the informer's pod
    clock.t += 31  # expired, never confirmed: "a" is pending again, as the API shows it
    snap = build_snapshot([node], pods, cache=parses, assumed=cache)
    assert "ns/a" not in snap.allocations and {p.key for p in snap.pending} == {"ns/a", "ns/b"}
    assert snap.assumed is not None and snap.assumed.expired == 1


def test_held_eviction_stops_a_second_preemption() -> None:
    """The "eviction in progress" guard of preemption reads the held eviction."""
    node = {"metadata": {"name": "t4", "labels": {"nvidia.com/gpu.product": "Tesla-T4",
                                                  "nvidia.com/gpu.count": "2"}},
            "spec": {}, "status": {"allocatable": {"cpu": "32", "memory": "128Gi",
                                                   "nvidia.com/gpu": "2"}}}
    low = [pod(f"low{i}", uid=f"l{i}", node="t4", t=i,
               ann={"gpufleet.io/node": "t4", "gpufleet.io/gpus": str(i)}) for i in range(2)]
    vip = pod("vip", uid="v", priority=100, t=5)
    policy, cache = get_policy("fgd-strand", tie_seed=0), AssumeCache(30.0, clock=Clock())
    plan = plan_cycle(build_snapshot([node], [*low, vip], assumed=cache), policy,
                      np.random.default_rng(0))
    (victim,) = plan.of(Preempt)
    cache.evicted(victim.job_id, "l" + victim.job_id[-1])
    snap = build_snapshot([node], [*low, vip], assumed=cache)
    plan = plan_cycle(snap, policy, np.random.default_rng(0))
    assert not plan.of(Preempt) and [r.job_id for r in plan.of(Refuse)] == ["ns/vip"]
    assert snap.pods[victim.job_id].terminating
    assert victim.job_id in snap.allocations  # a terminating pod still holds its GPU


def test_a_write_during_the_overlay_is_kept() -> None:
    """The pass over the assumptions runs outside the lock: a binding thread may assume the pod
    again while it runs (the old pod confirmed gone, a new one under the name bound). The pass
    drops the entry it saw, not the new one."""
    cache = AssumeCache(30.0, clock=Clock())
    cache.assume(BIND, "u1")
    again = Bind(job_id="ns/a", node="t4-b", gpus=(0,), milli_per_gpu=1000)

    class Informer(dict[str, PodInfo]):
        def get(self, key: str, default: Any = None) -> Any:
            cache.assume(again, "u2")  # meanwhile the new pod's bind is assumed
            return super().get(key, default)

    recreated = pod_info(pod(uid="u2"))  # recreated: the held bind of u1 is moot
    got = cache.overlay_on(Informer({recreated.key: recreated}))
    assert got.confirmed == 1 and not got.replaced
    later = cache.overlay([pod_info(pod(uid="u2"))])
    assert later.infos[0].assignment == again  # still held
