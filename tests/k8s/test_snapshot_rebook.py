"""``ParseCache.accounted``: a build books only the bound pods that changed since the last one.

The oracle is a build without the cache: after every step of each case the cached build must
hold the same arrays (all but the rows' change counters) and the same allocations, in the same
order; and the case says whether the step went the incremental way or rebuilt."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.k8s.translate.snapshot import ParseCache, Snapshot, build_snapshot

from .test_cycle import node, pod


def versioned(obj: dict, rv: str) -> dict:
    return {**obj, "metadata": {**obj["metadata"], "resourceVersion": rv}}


def bound(name: str, where: str, gpus: str, milli: int = 1000, n: int = 1, rv: str = "1",
          uid: str = "") -> dict:
    limits = {"nvidia.com/gpu": str(n)} if milli == 1000 else {}
    ann = {"gpufleet.io/node": where, "gpufleet.io/gpus": gpus,
           "gpufleet.io/gpu-milli": str(milli)}
    if milli != 1000:
        ann["gpu-fraction"] = f"{milli / 1000:.3f}"
    p = versioned(pod(name, limits, ann=ann, node_name=where), rv)
    p["metadata"]["uid"] = uid or f"uid-{name}"
    return p


def mig(name: str, where: str, rv: str = "1") -> dict:
    ann = {"gpufleet.io/node": where, "gpufleet.io/mig": "0:1g.5gb@6"}
    p = versioned(pod(name, {"nvidia.com/mig-1g.5gb": "1"}, ann=ann, node_name=where), rv)
    p["metadata"]["uid"] = f"uid-{name}"
    return p


NODES = [versioned(node("a", 4), "1"), versioned(node("b", 8, product="NVIDIA-A100-SXM4-80GB"),
                                                  "1"),
         versioned(node("m", 1, product="NVIDIA-A100-SXM4-40GB", mig=1), "1")]


def same(got: Snapshot, want: Snapshot) -> None:
    n = want.state.n
    assert got.state.n == n and got.state.index == want.state.index
    for name, arr in want.state.__dict__.items():
        if isinstance(arr, np.ndarray) and name != "row_version":
            assert (getattr(got.state, name)[:n] == arr[:n]).all(), name
    assert list(got.allocations) == list(want.allocations)
    assert got.allocations == want.allocations
    assert got.unaccounted == want.unaccounted
    assert [p.key for p in got.pending] == [p.key for p in want.pending]


# each step: the pods the API holds; whether the cached build books incrementally
STEPS: dict[str, list[tuple[list[dict], bool]]] = {
    "pods come, change and go": [
        ([bound("x", "a", "0"), bound("y", "b", "0,1", n=2)], False),  # first build
        ([bound("x", "a", "0"), bound("y", "b", "0,1", n=2), bound("z", "a", "1")], True),
        ([bound("y", "b", "0,1", n=2), bound("z", "a", "1")], True),  # x deleted
        ([bound("y", "b", "0,1", n=2), bound("z", "a", "1", rv="2")], True),  # status update
        # z evicted and its replacement bound elsewhere under the same name
        ([bound("y", "b", "0,1", n=2), bound("z", "b", "5", rv="3", uid="z2")], True),
        ([bound("y", "b", "0,1", n=2), bound("s1", "a", "2", milli=300),
          bound("s2", "a", "2", milli=500), mig("g", "m")], True),
        ([bound("s2", "a", "2", milli=500), mig("g", "m")], True),
    ],
    "a pod without our annotations rebuilds, and so does the build after it": [
        ([bound("x", "a", "0")], False),
        ([bound("x", "a", "0"), versioned(pod("f", {"nvidia.com/gpu": "1"}, node_name="a",
                                              schedulerName="default-scheduler"), "1")], False),
        ([bound("x", "a", "0")], False),  # the unannotated build was not kept
        ([bound("x", "a", "0"), bound("w", "a", "3")], True),
    ],
    "an over-commit rebuilds and is booked as a fresh build books it": [
        ([bound("x", "a", "0")], False),
        ([bound("x", "a", "0"), bound("o", "a", "0")], False),  # GPU 0 twice: unaccounted
        ([bound("x", "a", "0"), bound("o", "a", "0")], False),  # still: never kept
        ([bound("x", "a", "0")], False),
        ([bound("x", "a", "0"), bound("v", "b", "7")], True),
    ],
    "a pod bound to a node not in the fleet rebuilds": [
        ([bound("x", "a", "0")], False),
        ([bound("x", "a", "0"), bound("gone", "nowhere", "0")], False),
        ([bound("x", "a", "0")], False),
    ],
    "pending and terminal pods book nothing": [
        ([bound("x", "a", "0")], False),
        ([bound("x", "a", "0"), versioned(pod("p", {"nvidia.com/gpu": "1"}), "1")], True),
        ([{**bound("x", "a", "0", rv="2"), "status": {"phase": "Succeeded"}}], True),
    ],
}


@pytest.mark.parametrize("case", list(STEPS))
def test_cached_builds_equal_fresh_builds(case: str) -> None:
    cache = ParseCache()
    for i, (pods, incremental) in enumerate(STEPS[case]):
        before = cache.accounted
        got = build_snapshot(NODES, pods, cache=cache)
        same(got, build_snapshot(NODES, pods))
        took = before is not None and cache.accounted is before
        assert took == incremental, f"step {i}"


def test_a_changed_node_rebuilds() -> None:
    cache = ParseCache()
    pods = [bound("x", "a", "0")]
    build_snapshot(NODES, pods, cache=cache)
    kept = cache.accounted
    build_snapshot([versioned(NODES[0], "2"), *NODES[1:]], pods, cache=cache)  # heartbeat
    assert cache.accounted is kept
    grown = [versioned(node("a", 8), "3"), *NODES[1:]]
    got = build_snapshot(grown, pods, cache=cache)
    assert cache.accounted is not kept and cache.accounted is not None
    same(got, build_snapshot(grown, pods))


def test_the_planner_writes_on_its_own_copy() -> None:
    """A snapshot's state is the planner's to change: the kept booking must not see it."""
    cache = ParseCache()
    pods = [bound("x", "a", "0")]
    first = build_snapshot(NODES, pods, cache=cache)
    first.state.free_milli[0, :] = 0
    same(build_snapshot(NODES, pods, cache=cache), build_snapshot(NODES, pods))


def test_random_churn_matches_fresh_builds() -> None:
    """Seeded churn over whole-GPU and shared pods: binds, deletions, moves; every step is
    compared with a fresh build."""
    rng = np.random.default_rng(7)
    nodes = [versioned(node(f"n{i}", 8), "1") for i in range(6)]
    live: dict[str, dict] = {}
    cache = ParseCache()
    incremental = 0
    for step in range(60):
        for _ in range(int(rng.integers(1, 6))):
            name = f"p{int(rng.integers(0, 40))}"
            if name in live and rng.random() < 0.5:
                del live[name]
                continue
            where = f"n{int(rng.integers(0, 6))}"
            gpu = int(rng.integers(0, 8))
            taken = {(p["spec"]["nodeName"], p["metadata"]["annotations"]["gpufleet.io/gpus"])
                     for k, p in live.items() if k != name}
            if (where, str(gpu)) in taken:
                continue  # keep it clean: an over-commit is its own case above
            live[name] = bound(name, where, str(gpu), rv=str(step))
        pods = list(live.values())
        before = cache.accounted
        got = build_snapshot(nodes, pods, cache=cache)
        same(got, build_snapshot(nodes, pods))
        incremental += before is not None and cache.accounted is before
    assert incremental == 59


def test_an_api_serving_dra_without_devices_or_claims_still_books_incrementally() -> None:
    """The controller builds a DRA world whenever the API serves resource.k8s.io; with no
    slices and no claims it books nothing, and the carried-over booking holds. A claim in the
    world (or a slice's devices) makes every build a full one."""
    from gpufleet.catalog.gpus import default_gpu_catalog
    from gpufleet.k8s.dra.claim_view import DraWorld

    cat = default_gpu_catalog()
    empty = DraWorld.of([], [], [], cat)
    cache = ParseCache()
    pods = [bound("x", "a", "0")]
    build_snapshot(NODES, pods, cache=cache, dra=empty)
    kept = cache.accounted
    more = [*pods, bound("y", "a", "1")]
    got = build_snapshot(NODES, more, cache=cache, dra=empty)
    assert kept is not None and cache.accounted is kept
    same(got, build_snapshot(NODES, more, dra=DraWorld.of([], [], [], cat)))
    claim = {"metadata": {"name": "c", "namespace": "ns", "uid": "cu"},
             "spec": {"devices": {"requests": []}}, "status": {}}
    build_snapshot(NODES, more, cache=cache, dra=DraWorld.of([], [claim], [], cat))
    assert cache.accounted is None


def test_the_cycles_view_is_booked_on_a_copy_as_a_full_booking_books_it() -> None:
    """What a cycle sees otherwise than the index (a placed pod taken out, one moved to other
    GPUs, one added) is booked on a copy of the kept booking: the same arrays and allocations,
    in the view's order, as a fresh build of the pods as the view shows them; the kept booking
    itself is unchanged."""
    from gpufleet.catalog.gpus import default_gpu_catalog
    from gpufleet.k8s.translate.pod_index import PLACED, Overlaid
    from gpufleet.k8s.translate.pods import pod_info
    from gpufleet.k8s.translate.snapshot import _overlaid

    cat = default_gpu_catalog()
    pods = [bound("x", "a", "0"), bound("y", "b", "0,1", n=2), bound("z", "a", "1"),
            mig("g", "m")]
    cache = ParseCache()
    build_snapshot(NODES, pods, cache=cache)
    kept = cache.accounted
    assert kept is not None
    free_before = kept.state.free_milli.copy()
    moved, added = bound("y", "b", "2,3", n=2, rv="2"), bound("w", "a", "0", rv="2")
    view = Overlaid(cache.index[PLACED])
    view.drop("ns/x")  # taken out: GPU 0 of a is free in the view, and w takes it
    view.put("ns/y", pod_info(moved, cat))  # keeps its place
    view.put("ns/w", pod_info(added, cat))  # goes last
    got = _overlaid(kept, view, cat)
    assert got is not None
    state, allocations = got
    want = build_snapshot(NODES, [moved, bound("z", "a", "1"), mig("g", "m"), added])
    n = want.state.n
    for name, arr in want.state.__dict__.items():
        if isinstance(arr, np.ndarray) and name != "row_version":
            assert (getattr(state, name)[:n] == arr[:n]).all(), name
    assert list(allocations) == ["ns/y", "ns/z", "ns/g", "ns/w"] == list(view)
    assert allocations == {k: want.allocations[k] for k in allocations}
    assert (kept.state.free_milli == free_before).all()
    view.put("ns/v", pod_info(bound("v", "a", "1", rv="2"), cat))  # z holds GPU 1 of a
    assert _overlaid(kept, view, cat) is None  # an over-commit: the caller books in full


def test_the_same_node_objects_are_not_parsed_again_and_a_replaced_one_is() -> None:
    """A build given the very same Node objects (an informer's, with no Node event since)
    reuses their sorted parse; one replaced object (a Node event) is parsed again."""
    cache = ParseCache()
    nodes = list(reversed(NODES))
    build_snapshot(nodes, [], cache=cache)
    parsed = cache.node_parse
    assert [n["metadata"]["name"] for n in parsed[0]] == ["a", "b", "m"]
    build_snapshot(list(nodes), [], cache=cache)
    assert cache.node_parse is parsed
    relabelled = versioned(node("a", 4), "2")
    relabelled["metadata"]["labels"]["pool"] = "x"
    got = build_snapshot([relabelled, *NODES[1:]], [], cache=cache)
    assert cache.node_parse is not parsed
    assert got.state.nodes[got.state.index["a"]].labels.get("pool") == "x"
    same(got, build_snapshot([relabelled, *NODES[1:]], []))


def test_a_pod_made_anew_under_a_placed_name_goes_last_as_in_the_index() -> None:
    """Deleted, recreated and bound between two cycles (one changed key, a new uid): the
    index puts the new pod last, and so does the kept booking."""
    store = {f"ns/{p['metadata']['name']}": p for p in
             (bound("x", "a", "0"), bound("z", "a", "1"), bound("y", "b", "0"))}
    cache = ParseCache()
    build_snapshot(NODES, store, cache=cache, changed=None)
    store["ns/z"] = bound("z", "b", "1", rv="2", uid="z2")
    got = build_snapshot(NODES, store, cache=cache, changed={"ns/z"})
    assert cache.accounted is not None
    assert list(got.allocations) == list(got.placed) == ["ns/x", "ns/y", "ns/z"]
    assert list(cache.accounted.allocations) == ["ns/x", "ns/y", "ns/z"]
    same(got, build_snapshot(NODES, [store[k] for k in ("ns/x", "ns/y", "ns/z")]))
