"""The general claim allocator (:mod:`gpufleet.k8s.dra.allocator`) as case tables: hand-worked
device choices on small published pools, each row a rule of kube's structured-parameters
allocator (``k8s.io/dynamic-resource-allocation/structured``) — device order, ``count``,
``firstAvailable``, ``allocationMode: All``, constraints, shared devices and their capacity,
partitionable devices' counters, taints, admin access, config copying and the errors."""

from __future__ import annotations

import contextlib
import itertools
import signal
import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest

from gpufleet.k8s.dra.allocator import (
    AllocationError,
    allocate,
    consumption,
    in_use,
    node_pools,
    quantity_text,
)

DRV = "gpu.example.com"
GI = 1 << 30
ATTR = f"device.attributes['{DRV}']"


# -- the API objects, as the API serves them -----------------------------------------------------


def dev(name: str, model: str = "a", numa: int | None = None, **extra: Any) -> dict[str, Any]:
    attrs: dict[str, Any] = {"model": {"string": model}}
    if numa is not None:
        attrs["numa"] = {"int": numa}
    return {"name": name, "attributes": attrs, **extra}


def rslice(name: str, devices: list[dict[str, Any]], node: str | None = "n1",
           driver: str = DRV, pool: str = "p", gen: int = 1, count: int = 1,
           counters: dict[str, dict[str, str]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"driver": driver, "pool": {
        "name": pool, "generation": gen, "resourceSliceCount": count}}
    if devices:
        spec["devices"] = devices
    if node:
        spec["nodeName"] = node
    if counters:
        spec["sharedCounters"] = [{"name": n, "counters": {k: {"value": v} for k, v in c.items()}}
                                  for n, c in counters.items()]
    return {"metadata": {"name": name}, "spec": spec}


def dclass(name: str = "gpu", selectors: tuple[str, ...] = (),
           config: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {
        "selectors": [{"cel": {"expression": e}} for e in selectors],
        "config": [{"opaque": {"driver": DRV, "parameters": {"c": c}}} for c in config]}}


def ex(cls: str = "gpu", count: int = 1, sel: tuple[str, ...] = (), **extra: Any
       ) -> dict[str, Any]:
    """An ``exactly`` request (or a subrequest, less its name)."""
    out: dict[str, Any] = {"deviceClassName": cls, "count": count, **extra}
    if sel:
        out["selectors"] = [{"cel": {"expression": e}} for e in sel]
    return out


def req(name: str, cls: str = "gpu", count: int = 1, sel: tuple[str, ...] = (), **extra: Any
        ) -> dict[str, Any]:
    return {"name": name, "exactly": ex(cls, count, sel, **extra)}


def first(name: str, **subs: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "firstAvailable": [{"name": n, **s} for n, s in subs.items()]}


def claim(*requests: dict[str, Any], name: str = "c", constraints: tuple[dict, ...] = (),
          config: tuple[dict, ...] = ()) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": {"devices": {
        "requests": list(requests), "constraints": list(constraints), "config": list(config)}}}


def held(*results: dict[str, Any]) -> dict[str, Any]:
    """An allocated claim holding ``results``."""
    return {"status": {"allocation": {"devices": {"results": [
        {"request": "r", "driver": DRV, "pool": "p", **r} for r in results]}}}}


def is_model(m: str) -> str:
    return f"{ATTR}.model == '{m}'"


CLASSES = {"gpu": dclass(), "only-b": dclass("only-b", (is_model("b"),))}


def run(claims: list[dict[str, Any]], devices: list[dict[str, Any]] | None = None,
        slices: list[dict[str, Any]] | None = None, allocated: tuple[dict, ...] = (),
        classes: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]] | None:
    pools = node_pools(slices if slices is not None else [rslice("s", devices or [])])["n1"]
    ids = itertools.count()
    return allocate(claims, classes or CLASSES, pools, in_use(allocated),
                    share_id=lambda: f"s{next(ids)}")


def picks(got: list[dict[str, Any]] | None) -> list[list[str]] | None:
    """Each claim's results as ``request:device``."""
    if got is None:
        return None
    return [[f"{r['request']}:{r['device']}" for r in a["devices"]["results"]] for a in got]


# -- node_pools --------------------------------------------------------------------------------


def order(slices: list[dict[str, Any]]) -> dict[str, list[str]]:
    return {n: [f"{d.driver}/{d.pool}/{d.name}" for d in p.devices]
            for n, p in node_pools(slices).items()}


@pytest.mark.parametrize(("slices", "want"), [
    # pools by (driver, pool), each pool's slices by name, devices as published
    ([rslice("z", [dev("x")], driver="b.com", pool="p0"),
      rslice("s2", [dev("d2"), dev("d1")], pool="p0", count=2),
      rslice("q", [dev("y")], pool="p1"),
      rslice("s1", [dev("d9")], pool="p0", count=2)],
     {"n1": ["b.com/p0/x", f"{DRV}/p0/d9", f"{DRV}/p0/d2", f"{DRV}/p0/d1", f"{DRV}/p1/y"]}),
    # only the newest generation of a pool
    ([rslice("old", [dev("d-old")], gen=1), rslice("new", [dev("d-new")], gen=2)],
     {"n1": [f"{DRV}/p/d-new"]}),
    # a pool with fewer slices than resourceSliceCount is left out
    ([rslice("a", [dev("d0")], pool="half", count=2), rslice("b", [dev("d1")], pool="whole")],
     {"n1": [f"{DRV}/whole/d1"]}),
    # a slice without a nodeName (allNodes) offers nothing; each node gets its own pool
    ([rslice("all", [dev("d0")], node=None), rslice("a", [dev("d1")], pool="p1"),
      rslice("b", [dev("d2")], node="n2", pool="p2")],
     {"n1": [f"{DRV}/p1/d1"], "n2": [f"{DRV}/p2/d2"]}),
    # a counter slice (no nodeName, no devices) counts toward the pool's slices
    ([rslice("c", [], node=None, count=2, counters={"set": {"mem": "80Gi"}}),
      rslice("d", [dev("d0")], count=2)],
     {"n1": [f"{DRV}/p/d0"]}),
], ids=["sorted", "newest-generation", "incomplete-left-out", "node-name-only",
        "counter-slice-counts"])
def test_node_pools_order_and_completeness(slices: list[dict[str, Any]],
                                           want: dict[str, list[str]]) -> None:
    assert order(slices) == want


def test_node_pools_collect_the_shared_counters() -> None:
    got = node_pools([rslice("c", [], node=None, count=2, counters={
        "gpu0": {"mem": "80Gi", "sm": "7"}}), rslice("d", [dev("d0")], count=2)])["n1"]
    assert got.counters == {(DRV, "p", "gpu0"): {"mem": Decimal(80 * GI), "sm": Decimal(7)}}


def test_a_pool_spanning_nodes_offers_each_node_its_devices() -> None:
    assert order([rslice("a", [dev("d1")], count=2), rslice("b", [dev("d2")], node="n2",
                                                             count=2)]) == {
        "n1": [f"{DRV}/p/d1"], "n2": [f"{DRV}/p/d2"]}


# -- in_use ------------------------------------------------------------------------------------


def test_in_use_whole_shares_and_admin_access() -> None:
    got = in_use([
        held({"device": "d0"}, {"device": "d1", "adminAccess": True}),
        held({"device": "d2", "shareID": "a", "consumedCapacity": {"memory": "10Gi"}}),
        held({"device": "d2", "shareID": "b", "consumedCapacity": {"memory": "6Gi",
                                                                     "cores": "2"}}),
        {"status": {}}, {},  # not allocated
    ])
    assert got.whole == {(DRV, "p", "d0")}
    assert got.capacity == {(DRV, "p", "d2"): {"memory": Decimal(16 * GI), "cores": Decimal(2)}}
    assert got.holds((DRV, "p", "d2")) and not got.holds((DRV, "p", "d1"))


# -- consumption and quantity_text -------------------------------------------------------------

def _q(text: str) -> Decimal:
    units = {"Mi": 1 << 20, "Gi": GI}
    return Decimal(int(text[:-2]) * units[text[-2:]]) if text[-2:] in units else Decimal(text)


RANGE = {"default": "1Gi", "validRange": {"min": "1Gi", "max": "8Gi", "step": "1Gi"}}


@pytest.mark.parametrize(("asked", "policy", "want"), [
    (None, None, "40Gi"),  # not asked, no policy: all of it
    (None, {"default": "4Gi"}, "4Gi"),  # not asked: the default
    ("10Gi", None, "10Gi"),  # no policy: as asked
    ("3Gi", {"validValues": ["1Gi", "4Gi", "8Gi"]}, "4Gi"),  # up to the next valid value
    ("4Gi", {"validValues": ["1Gi", "4Gi", "8Gi"]}, "4Gi"),
    ("9Gi", {"validValues": ["1Gi", "4Gi", "8Gi"]}, None),  # above them all: not a valid value
    ("2560Mi", RANGE, "3Gi"),  # 2.5Gi: min + ⌈1.5Gi / step⌉ × step = 3Gi
    ("100Mi", RANGE, "1Gi"),  # below min: min
    ("9Gi", RANGE, None),  # above max
    ("1536Mi", {"validRange": {"min": "1Gi"}}, "1536Mi"),  # no step: as asked
    ("1600Mi", {"validRange": {"min": "512Mi", "step": "1Gi"}}, "2560Mi"),  # 512Mi + 2 × 1Gi
    # the default is valid even off the range's steps
    (None, {"default": "512Mi", "validRange": {"min": "1Gi", "step": "1Gi"}}, "512Mi"),
], ids=["unasked-all", "unasked-default", "no-policy", "values-round-up", "values-exact",
        "values-violated", "range-step-round-up", "range-min", "range-max-violated",
        "range-no-step", "range-step-from-min", "default-exempt"])
def test_consumption_follows_the_request_policy(asked: str | None, policy: dict | None,
                                                want: str | None) -> None:
    cap: dict[str, Any] = {"value": "40Gi"}
    if policy:
        cap["requestPolicy"] = policy
    got = consumption({} if asked is None else {"memory": _q(asked)}, {"memory": cap})
    assert got == (None if want is None else {"memory": _q(want)})


def test_consumption_fills_every_capacity_and_refuses_an_unknown_one() -> None:
    capacity = {"memory": {"value": "40Gi"}, "cores": {"value": "8", "requestPolicy": {
        "default": "1", "validValues": ["1", "2", "4"]}}}
    assert consumption({"memory": _q("2Gi")}, capacity) == {"memory": _q("2Gi"),
                                                            "cores": Decimal(1)}
    assert consumption({"cores": Decimal(3)}, capacity) == {"memory": _q("40Gi"),
                                                            "cores": Decimal(4)}
    assert consumption({"bandwidth": Decimal(1)}, capacity) is None


def test_consumption_rounds_a_fractional_ask_up_to_the_step() -> None:
    # min 1, step 1, asked 1.5: kube steps from Value() = 2, consuming 2 (not 1)
    policy = {"validRange": {"min": "1", "step": "1"}}
    got = consumption({"cores": Decimal("1.5")}, {"cores": {"value": "8",
                                                            "requestPolicy": policy}})
    assert got == {"cores": Decimal(2)}


@pytest.mark.parametrize(("q", "want"), [
    (Decimal(16 * GI), "16Gi"), (Decimal(1536 << 20), "1536Mi"), (Decimal(1024), "1Ki"),
    (Decimal(1 << 40), "1Ti"), (Decimal(1000), "1000"), (Decimal(0), "0"), (Decimal(7), "7"),
    (Decimal("2.50"), "2.5"),
])
def test_quantity_text(q: Decimal, want: str) -> None:
    assert quantity_text(q) == want


# -- allocate: which devices ---------------------------------------------------------------------

FOUR = [dev("d0", "a"), dev("d1", "a"), dev("d2", "b"), dev("d3", "b")]


@pytest.mark.parametrize(("claims", "allocated", "want"), [
    # count 2: the first two in order
    ([claim(req("gpu", count=2))], (), [["gpu:d0", "gpu:d1"]]),
    ([claim(req("gpu", count=2))], (held({"device": "d0"}),), [["gpu:d1", "gpu:d2"]]),
    ([claim(req("gpu", count=5))], (), None),
    # the request's selector, and the class's
    ([claim(req("gpu", sel=(is_model("b"),)))], (), [["gpu:d2"]]),
    ([claim(req("gpu", cls="only-b", sel=(f"{ATTR}.model != 'x'",)))], (), [["gpu:d2"]]),
    # firstAvailable: the first subrequest that fits, named request/subrequest
    ([claim(first("gpu", big=ex(count=5), small=ex(count=2)))], (),
     [["gpu/small:d0", "gpu/small:d1"]]),
    ([claim(first("gpu", big=ex(count=3), small=ex(count=2)))], (),
     [["gpu/big:d0", "gpu/big:d1", "gpu/big:d2"]]),
    # ... and with which the later requests still fit: with x, b finds one "a" device only
    ([claim(first("a", x=ex(sel=(is_model("a"),)), y=ex(sel=(is_model("b"),))),
            req("b", count=2, sel=(is_model("a"),)))], (),
     [["a/y:d2", "b:d0", "b:d1"]]),
    # allocationMode All: every matching device; none if one is in use or none matches
    ([claim(req("gpu", sel=(is_model("b"),), allocationMode="All"))], (),
     [["gpu:d2", "gpu:d3"]]),
    ([claim(req("gpu", sel=(is_model("b"),), allocationMode="All"))],
     (held({"device": "d3"}),), None),
    ([claim(req("gpu", sel=(is_model("z"),), allocationMode="All"))], (), None),
    # several claims: what claim 1 takes claim 2 does not get
    ([claim(req("gpu"), name="c1"), claim(req("gpu"), name="c2")], (),
     [["gpu:d0"], ["gpu:d1"]]),
    # ... and claim 1 moves on when claim 2 could not fit beside its first choice
    ([claim(req("gpu", count=2), name="c1"),
      claim(req("gpu", count=2, sel=(is_model("a"),)), name="c2")], (),
     [["gpu:d2", "gpu:d3"], ["gpu:d0", "gpu:d1"]]),
    ([claim(req("gpu", count=3), name="c1"), claim(req("gpu", count=2), name="c2")], (), None),
], ids=["count", "count-skips-in-use", "count-too-many", "request-selector", "class-selector",
        "first-available-second", "first-available-first", "first-available-backtracks",
        "all", "all-one-in-use", "all-none-match", "two-claims", "two-claims-backtrack",
        "two-claims-too-many"])
def test_allocate_picks(claims: list[dict], allocated: tuple[dict, ...],
                        want: list[list[str]] | None) -> None:
    assert picks(run(claims, FOUR, allocated=allocated)) == want


def with_pcie(d: dict[str, Any], name: str) -> dict[str, Any]:
    d["attributes"][name] = {"string": "x"}
    return d


# numa 0, 1, 1, 0; d1 publishes "pcie" under its short name, d2 under its qualified one
NUMA = [dev("d0", "a", 0), with_pcie(dev("d1", "a", 1), "pcie"),
        with_pcie(dev("d2", "b", 1), f"{DRV}/pcie"), dev("d3", "b", 0)]


def match(attr: str = f"{DRV}/numa", *requests: str) -> dict[str, Any]:
    return {"matchAttribute": attr, "requests": list(requests)}


def distinct(attr: str = f"{DRV}/numa", *requests: str) -> dict[str, Any]:
    return {"distinctAttribute": attr, "requests": list(requests)}


@pytest.mark.parametrize(("c", "want"), [
    # the two "a" devices are on different numa nodes
    (claim(req("gpu", count=2, sel=(is_model("a"),)), constraints=(match(),)), None),
    (claim(req("gpu", count=2), constraints=(match(),)), [["gpu:d0", "gpu:d3"]]),
    # without d3, d0 (numa 0) has no partner: back to d1, then d2
    (claim(req("gpu", count=2, sel=(f"!({is_model('b')} && {ATTR}.numa == 0)",)),
           constraints=(match(),)), [["gpu:d1", "gpu:d2"]]),
    (claim(req("gpu", count=3), constraints=(match(),)), None),
    # a short name published under the driver's domain, or the qualified name as published
    (claim(req("gpu", count=2), constraints=(match(f"{DRV}/pcie"),)), [["gpu:d1", "gpu:d2"]]),
    # another domain's attribute: no device has it
    (claim(req("gpu"), constraints=(match("other.com/numa"),)), None),
    # across requests: d0 lacks pcie, so a takes d1 and b the "b" device sharing its pcie
    (claim(req("a", sel=(is_model("a"),)), req("b", sel=(is_model("b"),)),
           constraints=(match(f"{DRV}/pcie"),)), [["a:d1", "b:d2"]]),
    (claim(req("a", sel=(is_model("a"),)), req("b", sel=(is_model("b"),)),
           constraints=(match(f"{DRV}/numa"),)), [["a:d0", "b:d3"]]),
    # requests: only those named are constrained
    (claim(req("a"), req("b"), req("c"), constraints=(match(f"{DRV}/pcie", "a", "b"),)),
     [["a:d1", "b:d2", "c:d0"]]),
    (claim(first("a", x=ex(sel=(is_model("a"),))), req("b"),
           constraints=(match(f"{DRV}/numa", "a/x", "b"),)), [["a/x:d0", "b:d3"]]),
    # distinct: d2 (numa 1) and d3 (numa 0)
    (claim(req("gpu", count=2, sel=(is_model("b"),)), constraints=(distinct(),)),
     [["gpu:d2", "gpu:d3"]]),
    (claim(req("a", sel=(is_model("a"),)), req("b", sel=(is_model("a"),)),
           constraints=(distinct(),)), [["a:d0", "b:d1"]]),
    (claim(req("a", sel=(f"{ATTR}.numa == 1",)), req("b", sel=(f"{ATTR}.numa == 1",)),
           constraints=(distinct(),)), None),
    # every device's value counts, a request's own devices too (kube-scheduler 1.36.3 compares
    # only with each request's latest: kubernetes/kubernetes#140438): two numa values, so
    # three devices cannot be distinct
    (claim(req("gpu", count=3), constraints=(distinct(),)), None),
    (claim(req("a", count=2), req("b"), constraints=(distinct(f"{DRV}/numa", "a", "b"),)),
     None),
    (claim(req("gpu", count=2), constraints=(distinct(),)), [["gpu:d0", "gpu:d1"]]),
], ids=["match-none", "match-first-fits", "match-backtracks", "match-too-many",
        "match-qualified-and-short", "match-other-domain", "match-across-requests",
        "match-across-requests-numa", "match-named-requests", "match-names-subrequest",
        "distinct", "distinct-across-requests", "distinct-impossible", "distinct-within-request",
        "distinct-within-request-across", "distinct-within-request-fits"])
def test_allocate_keeps_the_constraints(c: dict, want: list[list[str]] | None) -> None:
    assert picks(run([c], NUMA)) == want


# -- allocate: shared devices and their capacity -----------------------------------------------


def shared(name: str, memory: str) -> dict[str, Any]:
    return dev(name, "s", allowMultipleAllocations=True, capacity={"memory": {"value": memory}})


SHARED = [shared("s0", "80Gi"), shared("s1", "40Gi"),
          dev("w0", "w", capacity={"memory": {"value": "40Gi"}})]


def mem(amount: str | None = None, name: str = "gpu", **extra: Any) -> dict[str, Any]:
    """A request for one device, asking ``amount`` of its memory."""
    if amount is not None:
        extra["capacity"] = {"requests": {"memory": amount}}
    return req(name, **extra)


def shares(got: list[dict[str, Any]] | None) -> list[list[tuple]] | None:
    """Each claim's results as (request, device, shareID, consumedCapacity)."""
    if got is None:
        return None
    return [[(r["request"], r["device"], r.get("shareID"), r.get("consumedCapacity"))
             for r in a["devices"]["results"]] for a in got]


def c40(n: int) -> list[dict[str, Any]]:
    return [claim(mem("40Gi"), name=f"c{i}") for i in range(n)]


@pytest.mark.parametrize(("claims", "allocated", "want"), [
    # two 40Gi shares of the 80Gi device, each with its own share ID
    (c40(2), (), [[("gpu", "s0", "s0", {"memory": "40Gi"})],
                  [("gpu", "s0", "s1", {"memory": "40Gi"})]]),
    # the third does not fit there any more: the next device
    (c40(3), (), [[("gpu", "s0", "s0", {"memory": "40Gi"})],
                  [("gpu", "s0", "s1", {"memory": "40Gi"})],
                  [("gpu", "s1", "s2", {"memory": "40Gi"})]]),
    # what allocated shares consume counts
    ([claim(mem("30Gi"))], (held({"device": "s0", "shareID": "x", "consumedCapacity": {
        "memory": "60Gi"}}),), [[("gpu", "s1", "s0", {"memory": "30Gi"})]]),
    # nothing asked: all of it
    ([claim(mem()), claim(mem(), name="c2")], (),
     [[("gpu", "s0", "s0", {"memory": "80Gi"})], [("gpu", "s1", "s1", {"memory": "40Gi"})]]),
    # two requests of one claim may share a device; one request's devices are distinct
    ([claim(mem("8Gi", "a"), mem("8Gi", "b"))], (),
     [[("a", "s0", "s0", {"memory": "8Gi"}), ("b", "s0", "s1", {"memory": "8Gi"})]]),
    ([claim(mem("8Gi", count=2))], (),
     [[("gpu", "s0", "s0", {"memory": "8Gi"}), ("gpu", "s1", "s1", {"memory": "8Gi"})]]),
    ([claim(mem("100Gi"))], (), None),
    # a capacity no device has
    ([claim(req("gpu", capacity={"requests": {"cores": "1"}}))], (), None),
    # a device that is not shareable is held whole, its capacity checked but not recorded
    ([claim(mem("10Gi", sel=(is_model("w"),)))], (), [[("gpu", "w0", None, None)]]),
    ([claim(mem("50Gi", sel=(is_model("w"),)))], (), None),
], ids=["two-shares", "full-then-next", "allocated-shares", "unasked-all", "two-requests",
        "count-distinct-devices", "too-much", "unknown-capacity", "whole-device",
        "whole-device-too-small"])
def test_allocate_shares_devices(claims: list[dict], allocated: tuple[dict, ...],
                                 want: list[list[tuple]] | None) -> None:
    assert shares(run(claims, SHARED, allocated=allocated)) == want


def test_a_share_of_a_device_without_capacity_records_none() -> None:
    got = shares(run([claim(req("gpu"))], [dev("s", allowMultipleAllocations=True)]))
    assert got == [[("gpu", "s", "s0", None)]]


def test_consumed_capacity_keeps_the_asks_text() -> None:
    got = shares(run([claim(mem("10G"))], SHARED))
    assert got == [[("gpu", "s0", "s0", {"memory": "10G"})]]


# -- allocate: partitionable devices' counters ---------------------------------------------------



def part(name: str, model: str, memory: str, **extra: Any) -> dict[str, Any]:
    return dev(name, model, consumesCounters=[{"counterSet": "gpu0", "counters": {
        "mem": {"value": memory}}}], **extra)


# one GPU's 80Gi counter: the whole GPU, two halves, and a shareable (MPS-like) device
PARTS = [
    rslice("c", [], node=None, count=2, counters={"gpu0": {"mem": "80Gi"}}),
    rslice("d", [part("whole", "w", "80Gi"), part("half-a", "h", "40Gi"),
                 part("half-b", "h", "40Gi"),
                 part("mps", "m", "80Gi", allowMultipleAllocations=True,
                      capacity={"memory": {"value": "80Gi"}})], count=2),
]
MPS = {"device": "mps", "shareID": "x", "consumedCapacity": {"memory": "10Gi"}}


@pytest.mark.parametrize(("claims", "allocated", "want"), [
    ([claim(req("gpu"))], (), [["gpu:whole"]]),
    # whole + a half is 120Gi: the two halves
    ([claim(req("gpu", count=2))], (), [["gpu:half-a", "gpu:half-b"]]),
    ([claim(req("gpu", count=3))], (), None),
    # what allocated devices consume
    ([claim(req("gpu"))], (held({"device": "whole"}),), None),
    ([claim(req("gpu"))], (held({"device": "half-a"}),), [["gpu:half-b"]]),
    ([claim(req("gpu"))], (held(MPS),), None),
    # a shared device in use has its counters consumed already: another share fits
    ([claim(mem("20Gi", sel=(is_model("m"),)))], (held(MPS),), [["gpu:mps"]]),
    # and two new shares consume them once
    ([claim(mem("20Gi", sel=(is_model("m"),))), claim(mem("20Gi", sel=(is_model("m"),)),
                                                       name="c2")], (), [["gpu:mps"], ["gpu:mps"]]),
    ([claim(mem("20Gi", sel=(is_model("m"),))), claim(req("gpu"), name="c2")], (), None),
], ids=["whole", "two-halves", "too-many", "allocated-whole", "allocated-half",
        "allocated-share", "share-of-shared", "two-shares-count-once", "share-then-whole"])
def test_allocate_counts_shared_counters(claims: list[dict], allocated: tuple[dict, ...],
                                         want: list[list[str]] | None) -> None:
    assert picks(run(claims, slices=PARTS, allocated=allocated)) == want


# -- allocate: taints, admin access, binding conditions ------------------------------------------


@pytest.mark.parametrize(("effect", "tolerations", "want"), [
    ("NoSchedule", [], "d1"),
    ("NoExecute", [], "d1"),
    ("None", [], "d0"),  # not an effect that keeps a device from a request
    ("NoSchedule", [{"key": "k", "operator": "Exists"}], "d0"),
    ("NoExecute", [{"operator": "Exists"}], "d0"),  # no key: every taint
    ("NoSchedule", [{"key": "k", "operator": "Equal", "value": "v"}], "d0"),
    ("NoSchedule", [{"key": "k", "value": "v"}], "d0"),  # Equal by default
    ("NoSchedule", [{"key": "k", "operator": "Equal", "value": "w"}], "d1"),
    ("NoSchedule", [{"key": "other", "operator": "Exists"}], "d1"),
    ("NoSchedule", [{"key": "k", "operator": "Exists", "effect": "NoExecute"}], "d1"),
    ("NoExecute", [{"key": "other", "operator": "Exists"},
                   {"key": "k", "operator": "Exists", "effect": "NoExecute"}], "d0"),
], ids=["no-schedule", "no-execute", "none-effect", "exists", "exists-any-key", "equal",
        "equal-default", "equal-other-value", "other-key", "other-effect", "second-tolerates"])
def test_allocate_keeps_tainted_devices_from_untolerating_requests(
        effect: str, tolerations: list[dict], want: str) -> None:
    devices = [dev("d0", taints=[{"key": "k", "value": "v", "effect": effect}]), dev("d1")]
    extra: dict[str, Any] = {"tolerations": tolerations} if tolerations else {}
    got = run([claim(req("gpu", **extra))], devices)
    assert got is not None
    (result,) = got[0]["devices"]["results"]
    assert result["device"] == want
    assert result.get("tolerations") == (tolerations or None)


@pytest.mark.parametrize(("claims", "want"), [
    ([claim(req("adm", adminAccess=True))], [["adm:d0"]]),
    # a device an admin request takes is taken for the claim's other requests, and back
    ([claim(req("adm", adminAccess=True), req("n"))], [["adm:d0", "n:d1"]]),
    ([claim(req("n"), req("adm", adminAccess=True))], [["n:d1", "adm:d0"]]),
    ([claim(req("adm", adminAccess=True, count=2))], [["adm:d0", "adm:d1"]]),
    # two claims' admin requests may both take it
    ([claim(req("adm", adminAccess=True)), claim(req("adm", adminAccess=True), name="c2")],
     [["adm:d0"], ["adm:d0"]]),
    ([claim(req("n", count=2))], None),
], ids=["admin-in-use", "admin-then-other", "other-then-admin", "admin-count",
        "admin-two-claims", "in-use-without-admin"])
def test_allocate_admin_access_takes_devices_in_use(claims: list[dict],
                                                    want: list[list[str]] | None) -> None:
    got = run(claims, [dev("d0"), dev("d1")], allocated=(held({"device": "d0"}),))
    assert picks(got) == want
    for a in got or ():
        for r in a["devices"]["results"]:
            assert r.get("adminAccess") is (True if r["request"] == "adm" else None)


def test_allocate_skips_devices_with_binding_conditions() -> None:
    devices = [dev("d0", bindingConditions=["attached"], bindingFailureConditions=["failed"]),
               dev("d1")]
    assert picks(run([claim(req("gpu"))], devices)) == [["gpu:d1"]]
    assert run([claim(req("gpu", count=2))], devices) is None


# -- allocate: config copying --------------------------------------------------------------------

CONFIGURED = {"gpu": dclass(config=("g1", "g2")), "only-b": dclass("only-b", (is_model("b"),),
                                                                   ("b1",))}


def cfg(c: str, *requests: str) -> dict[str, Any]:
    return {"requests": list(requests), "opaque": {"driver": DRV, "parameters": {"c": c}}}


@pytest.mark.parametrize(("c", "want"), [
    # each class's configs once, naming every request of the class; the claim's with no
    # requests always, the others once per allocated request they name
    (claim(req("a"), req("b"), req("c", cls="only-b"), config=(
        cfg("all"), cfg("ca", "a"), cfg("cz", "zz"), cfg("cab", "a", "b"))),
     [("FromClass", ["a", "b"], "g1"), ("FromClass", ["a", "b"], "g2"),
      ("FromClass", ["c"], "b1"), ("FromClaim", [], "all"), ("FromClaim", ["a"], "ca"),
      ("FromClaim", ["a", "b"], "cab"), ("FromClaim", ["a", "b"], "cab")]),
    # firstAvailable: the class of the subrequest taken, a config naming it or its request
    (claim(first("a", x=ex("only-b", count=5), y=ex()), config=(
        cfg("cx", "a/x"), cfg("cy", "a/y"), cfg("ca", "a"))),
     [("FromClass", ["a/y"], "g1"), ("FromClass", ["a/y"], "g2"), ("FromClaim", ["a/y"], "cy"),
      ("FromClaim", ["a"], "ca")]),
    (claim(first("a", x=ex("only-b"), y=ex()), req("b", cls="only-b"), config=(
        cfg("cx", "a/x"),)),
     [("FromClass", ["a/x", "b"], "b1"), ("FromClaim", ["a/x"], "cx")]),
], ids=["exactly", "first-available-second", "first-available-shares-class"])
def test_allocate_copies_config(c: dict, want: list[tuple]) -> None:
    got = run([c], FOUR, classes=CONFIGURED)
    assert got is not None
    assert [(x["source"], x["requests"], x["opaque"]["parameters"]["c"])
            for x in got[0]["devices"].get("config", ())] == want


def test_allocate_without_config_writes_none_and_selects_the_node() -> None:
    got = run([claim(req("gpu"))], FOUR)
    assert got == [{"devices": {"results": [
        {"request": "gpu", "driver": DRV, "pool": "p", "device": "d0"}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}]


# -- allocate: errors and the result limit -------------------------------------------------------

BAD = {**CLASSES, "bad": dclass("bad", ("device.driver ==",)),
       "oops": dclass("oops", ("true", f"{ATTR}.nope == 1"))}


@pytest.mark.parametrize(("c", "error"), [
    (claim(req("gpu", cls="nope")), "claim ns/c, request gpu: could not retrieve device class "
                                    "nope: deviceclass.resource.k8s.io \"nope\" not found"),
    (claim(first("gpu", x=ex(), y=ex(cls="nope"))),
     "claim ns/c, request gpu/y: could not retrieve device class nope"),
    (claim(req("gpu", sel=(f"{ATTR}.nope == 1",))),
     "claim ns/c: selector #0: CEL runtime error: "),
    (claim(req("gpu", sel=("true", f"{ATTR}.nope == 1"))),
     "claim ns/c: selector #1: CEL runtime error: "),
    (claim(req("gpu", sel=("device.driver ==",))), "claim ns/c: selector #0: CEL compile error: "),
    (claim(req("gpu", cls="bad")), "class bad: selector #0: CEL compile error: "),
    (claim(req("gpu", cls="oops")), "class oops: selector #1: CEL runtime error: "),
    (claim(req("gpu", cls="oops", allocationMode="All")),
     "class oops: selector #1: CEL runtime error: "),
], ids=["missing-class", "missing-subrequest-class", "claim-runtime", "claim-second-selector",
        "claim-compile", "class-compile", "class-runtime", "all-class-runtime"])
def test_allocate_errors_as_kube_words_them(c: dict, error: str) -> None:
    with pytest.raises(AllocationError) as e:
        run([c], FOUR, classes=BAD)
    assert str(e.value).startswith(error)


def test_allocate_evaluates_no_selector_when_no_device_is_free() -> None:
    assert run([claim(req("gpu", sel=(f"{ATTR}.nope == 1",)))], [dev("d0")],
               allocated=(held({"device": "d0"}),)) is None


MANY = [dev(f"d{i:02}") for i in range(34)]
# 13 + 20 = 33 devices, each request choosing among its own model's only
LIMIT = [dev(f"x{i:02}", "x") for i in range(13)] + [dev(f"y{i:02}", "y") for i in range(20)]


def test_allocate_up_to_32_results_per_claim() -> None:
    got = picks(run([claim(req("gpu", count=32))], MANY))
    assert got is not None and len(got[0]) == 32
    # a subrequest that would go over the limit gives way to the next
    assert picks(run([claim(first("gpu", big=ex(count=33), small=ex()))], MANY)) == [
        ["gpu/small:d00"]]
    assert picks(run([claim(first("a", big=ex(count=13, sel=(is_model("x"),)),
                                  small=ex(sel=(is_model("x"),))),
                            req("b", count=20, sel=(is_model("y"),)))], LIMIT)) == [
        ["a/small:x00", *(f"b:y{i:02}" for i in range(20))]]


@contextlib.contextmanager
def give_up_after(seconds: float) -> Iterator[None]:
    """TimeoutError in this thread after ``seconds``; the SIGALRM handler and timer in place
    before (pytest-timeout's) are put back."""
    def stop(*_: object) -> None:
        raise TimeoutError(f"no answer within {seconds}s")
    handler = signal.signal(signal.SIGALRM, stop)
    start = time.monotonic()
    left, _ = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, handler)
        if left:
            signal.setitimer(signal.ITIMER_REAL, max(left - (time.monotonic() - start), 0.001))


def test_allocate_over_the_limit_does_not_search_every_combination() -> None:
    with give_up_after(2.0):
        got = run([claim(first("a", big=ex(count=20), small=ex()), req("b", count=20))], MANY)
    assert picks(got) == [["a/small:d00", *(f"b:d{i:02}" for i in range(1, 21))]]


@pytest.mark.parametrize("c", [
    claim(req("gpu", count=33)),
    claim(req("a", count=13, sel=(is_model("x"),)), req("b", count=20, sel=(is_model("y"),))),
    claim(req("gpu", allocationMode="All")),  # 34 devices match
], ids=["count", "two-requests", "all"])
def test_allocate_fails_a_claim_over_32_devices(c: dict) -> None:
    with pytest.raises(AllocationError, match="exceeds the claim limit of 32"):
        run([c], LIMIT if len(c["spec"]["devices"]["requests"]) > 1 else MANY)


def test_allocate_all_breaking_a_constraint_is_an_error() -> None:
    with pytest.raises(AllocationError, match="claim ns/c, request gpu: cannot add device "
                       f"{DRV}/p/d1 because a claim constraint would not be satisfied"):
        run([claim(req("gpu", allocationMode="All"), constraints=(match(),))], NUMA)


def test_allocate_all_with_a_pool_being_updated_is_an_error() -> None:
    slices = [rslice("a", [dev("d0")], pool="whole"),
              rslice("b", [dev("d1")], pool="half", count=2)]
    with pytest.raises(AllocationError, match=f"asks for all devices, but resource pool "
                       f"{DRV}/half is currently being updated"):
        run([claim(req("gpu", allocationMode="All"))], slices=slices)
