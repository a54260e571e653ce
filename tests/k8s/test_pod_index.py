"""``PodIndex``: a snapshot built from the pods that changed equals one built from every pod.

The oracle is a build from scratch (no cache, the pods as a list). A fixed-seed walk of pod
events — created pending (ours or another scheduler's, of a Job or not, after failed runs),
bound, status updates, terminating, finished or interrupted, deleted, recreated under the same
name — drives an informer-like store; after each event the cached build, told only the keys
that changed, must give the same pods in the same order, the same pending pods in the same
order, the same bookings and requeued set, while an assume cache holds a bind and an eviction
of this replica's over both. Both must also say what the rules say when read over every parsed
pod (the pods, the pending ones, the requeued set, the booked ones). Bookings are compared as
sets: a pod that joins the placed pods goes last in the index but keeps its place in the
informer (a fresh build's order), and bookings do not depend on order."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from gpufleet.decisions import Bind
from gpufleet.k8s.translate.assume import AssumeCache
from gpufleet.k8s.translate.names import JOB_INDEX_IGNORED_FAILURES
from gpufleet.k8s.translate.pod_index import PodIndex, pods_by_key
from gpufleet.k8s.translate.pods import requeued_keys
from gpufleet.k8s.translate.snapshot import ParseCache, Snapshot, build_snapshot

from .test_cycle import node, pod

NODES = [node("a", 4), node("b", 8, product="NVIDIA-A100-SXM4-80GB")]
GPUS = {"a": 4, "b": 8}
STEPS = 160  # events per seed; the three seeds take about a second


class Clock:
    t = 0.0

    def __call__(self) -> float:
        return self.t


class World:
    """An informer's store driven by pod events, with the keys each event changed."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.store: dict[str, dict[str, Any]] = {}
        self.rv = 0
        self.n = 0
        self.free = {(n, g) for n, k in GPUS.items() for g in range(k)}

    def _write(self, obj: dict[str, Any]) -> str:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        key = f"ns/{obj['metadata']['name']}"
        self.store[key] = obj
        return key

    def create(self, name: str | None = None) -> str:
        self.n += 1
        name = name or f"p{self.n}"
        ann = {JOB_INDEX_IGNORED_FAILURES: "1"} if self.rng.random() < 0.2 else {}
        obj = pod(name, {"nvidia.com/gpu": "1"}, ann=ann, t=self.n % 60)
        obj["metadata"]["uid"] = f"uid-{self.n}"
        if self.rng.random() < 0.5:
            obj["metadata"]["ownerReferences"] = [{"uid": "job-1", "controller": True}]
        if self.rng.random() < 0.2:
            obj["spec"]["schedulerName"] = "default-scheduler"
        return self._write(obj)

    def step(self) -> set[str]:
        r = self.rng.random()
        keys = sorted(self.store)
        if r < 0.3 or not keys:
            return {self.create()}
        key = self.rng.choice(keys)
        obj = {**self.store[key], "metadata": dict(self.store[key]["metadata"]),
               "spec": dict(self.store[key]["spec"]),
               "status": dict(self.store[key]["status"])}
        phase = obj["status"].get("phase")
        if r < 0.5 and not obj["spec"]["nodeName"] and self.free:  # bound
            where, gpu = sorted(self.free)[self.rng.randrange(len(self.free))]
            self.free.discard((where, gpu))
            obj["spec"]["nodeName"] = where
            obj["metadata"]["annotations"] = {
                **obj["metadata"]["annotations"], "gpufleet.io/node": where,
                "gpufleet.io/gpus": str(gpu), "gpufleet.io/gpu-milli": "1000"}
            obj["status"]["phase"] = "Running"
        elif r < 0.6:  # a status update
            obj["status"]["message"] = f"seen {self.rv}"
        elif r < 0.7 and phase == "Running":  # terminating
            obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
        elif r < 0.8 and phase == "Running":  # finished, or interrupted
            obj["status"]["phase"] = "Failed" if self.rng.random() < 0.5 else "Succeeded"
            if obj["status"]["phase"] == "Failed":
                obj["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True"}]
            self._release(obj)
        elif r < 0.9:  # deleted
            self._release(obj)
            del self.store[key]
            return {key}
        else:  # deleted and recreated under the same name
            self._release(obj)
            del self.store[key]
            return {self.create(obj["metadata"]["name"])}
        return {self._write(obj)}

    def _release(self, obj: dict[str, Any]) -> None:
        ann = obj["metadata"]["annotations"]
        if obj["spec"]["nodeName"] and obj["status"].get("phase") == "Running":
            self.free.add((obj["spec"]["nodeName"], int(ann["gpufleet.io/gpus"])))


def same(got: Snapshot, want: Snapshot) -> None:
    assert list(got.pods.items()) == list(want.pods.items())
    assert got.pending == want.pending
    assert got.allocations == want.allocations
    assert got.unaccounted == want.unaccounted
    assert got.requeued == want.requeued
    n = want.state.n
    for name in ("free_milli", "cpu_free", "mem_free", "gpu_mem_free"):
        assert (getattr(got.state, name)[:n] == getattr(want.state, name)[:n]).all(), name


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_builds_from_changed_pods_equal_builds_from_every_pod(seed: int) -> None:
    world = World(seed)
    clock = Clock()
    held, fresh = AssumeCache(30.0, clock=clock), AssumeCache(30.0, clock=clock)
    cache = ParseCache()
    build_snapshot(NODES, dict(world.store), cache=cache, assumed=held, changed=None)
    kept = 0
    for i in range(STEPS):
        changed = world.step()
        if i % 7 == 3:  # this replica binds a pending pod of ours and evicts a running one
            pending = sorted(k for k, o in world.store.items() if not o["spec"]["nodeName"]
                             and o["spec"]["schedulerName"] == "gpufleet")
            running = sorted(k for k, o in world.store.items()
                             if o["status"].get("phase") == "Running")
            for c in (held, fresh):
                if pending and world.free:
                    where, gpu = sorted(world.free)[0]
                    c.assume(Bind(pending[0], where, (gpu,), 1000),
                             world.store[pending[0]]["metadata"]["uid"])
                if running:
                    c.evicted(running[-1], world.store[running[-1]]["metadata"]["uid"])
        clock.t += 1.0
        got = build_snapshot(NODES, dict(world.store), cache=cache, assumed=held,
                             changed=changed)
        want = build_snapshot(NODES, list(world.store.values()), assumed=fresh)
        same(got, want)
        # and both as the rules read every pod: the informer's order, the overlay laid over
        assert got.assumed is not None
        seen = [got.assumed.replaced.get(k, i) for k, i in cache.index.infos.items()]
        assert list(got.pods.values()) == [i for i in seen if not i.terminal]
        assert got.pending == [i for i in seen if i.pending and i.ours]
        assert got.requeued == requeued_keys(seen)
        assert set(got.allocations) == {i.key for i in seen if not i.terminal and not i.pending
                                        and i.node_name} - set(got.unaccounted)
        # the kept booking, brought up to date by the changed pods and the assumptions laid
        # over a copy, books in the order the cycle sees the placed pods, as a full booking
        assert list(got.allocations) == [k for k in got.placed if k not in got.unaccounted]
        assert got.evicting == any(i.terminating for i in got.placed.values())
        assert want.evicting == any(i.terminating for i in want.placed.values())
        kept += cache.accounted is not None
    assert kept >= STEPS * 3 // 4  # most builds book from the kept booking


def test_a_relist_or_a_first_build_reads_every_pod_and_keeps_unchanged_parses() -> None:
    world = World(7)
    for _ in range(20):
        world.step()
    index = PodIndex()
    from gpufleet.catalog.gpus import default_gpu_catalog

    cat = default_gpu_catalog()
    index.update(dict(world.store), None, cat)
    before = dict(index.infos)
    index.update(pods_by_key(list(world.store.values())), None, cat)  # a relist: same objects
    assert all(index.infos[k] is before[k] for k in before)
    index.update({}, None, cat)
    assert not index.infos and not any(index.groups.values())


def test_states_arrays_equal_after_many_events() -> None:
    """A longer walk ends with the same free room as a fresh build (bookings kept per event)."""
    world = World(3)
    cache = ParseCache()
    build_snapshot(NODES, dict(world.store), cache=cache, changed=None)
    for _ in range(400):
        changed = world.step()
        got = build_snapshot(NODES, dict(world.store), cache=cache, changed=changed)
    want = build_snapshot(NODES, list(world.store.values()))
    assert np.array_equal(got.state.free_milli[:2], want.state.free_milli[:2])


def test_an_overlaid_group_reads_as_a_copy_with_the_same_changes() -> None:
    """``Overlaid`` against the copy it stands for: the same keys in the same order, lengths,
    lookups and misses, over a fixed-seed run of puts and drops."""
    from gpufleet.k8s.translate.pod_index import Overlaid
    from gpufleet.k8s.translate.pods import pod_info

    infos = {f"ns/p{i}": pod_info(pod(f"p{i}", {"nvidia.com/gpu": "1"})) for i in range(12)}
    rng = random.Random(5)
    for _ in range(40):
        base = {k: infos[k] for k in rng.sample(sorted(infos), 6)}
        view, copy = Overlaid(base), dict(base)
        assert list(view) == list(copy) and len(view) == len(copy)
        for _ in range(rng.randrange(1, 6)):
            k = rng.choice(sorted(infos))
            if rng.random() < 0.5:
                view.put(k, infos[k])
                copy[k] = infos[k]
            else:
                view.drop(k)
                copy.pop(k, None)
        assert list(view.items()) == list(copy.items()) and len(view) == len(copy)
        for k in infos:
            assert (k in view) == (k in copy) and view.get(k) == copy.get(k)
