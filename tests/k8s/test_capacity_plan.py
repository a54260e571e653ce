"""The capacity controller's pure translation (k8s.capacity.inputs) and its launch records, on
hand-written Node/Pod JSON (no API server)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gpufleet.catalog.instances import default_instance_catalog
from gpufleet.cloud.provider import TAG_MANAGED, TAG_TOKEN, Offering
from gpufleet.config import Scenario
from gpufleet.control.admission import SPOT_TAINT
from gpufleet.control.node_clocks import SinceClock
from gpufleet.control.value_of_time import Delay
from gpufleet.decisions import CapacityType
from gpufleet.errors import InputError
from gpufleet.k8s.capacity.inputs import (
    arrivals,
    inflight,
    markets_from,
    node_caps,
    node_views,
    offers_from,
    pending_pods,
    running_pods,
    swap_node,
)
from gpufleet.k8s.capacity.launch_records import LaunchRecord, new_token
from gpufleet.k8s.settings import LiveDelays, apply_levers, load_config
from gpufleet.k8s.translate.node_objects import node_object, spec_from_instance
from gpufleet.k8s.translate.pods import pod_info, spot_ok, tolerated_now
from gpufleet.k8s.translate.snapshot import build_snapshot
from gpufleet.provisioning import NodeShape, NodeView, PodView, ScaleUpPolicy
from gpufleet.queueing.teams.settings import QueueSettings

SPOT_TOL = {"key": "karpenter.sh/capacity-type", "operator": "Equal", "value": "spot",
            "effect": "NoSchedule"}
CAT = default_instance_catalog()
TYPES = {n: CAT[n] for n in ("p3.2xlarge", "p3.8xlarge")}


def pod(name: str, gpus: int = 1, node: str = "", tolerations: list | None = None,
        labels: dict | None = None, ann: dict | None = None) -> dict:
    return {"metadata": {"name": name, "namespace": "ns", "labels": labels or {},
                         "annotations": ann or {},
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"schedulerName": "gpufleet", "nodeName": node,
                     "tolerations": tolerations or [],
                     "containers": [{"name": "c", "resources": {"limits": {
                         "nvidia.com/gpu": str(gpus), "cpu": "1", "memory": "1Gi"}}}]},
            "status": {"phase": "Running" if node else "Pending"}}


def test_spot_only_for_pods_that_tolerate_the_spot_taint() -> None:
    assert spot_ok(pod_info(pod("a", tolerations=[SPOT_TOL])))
    assert spot_ok(pod_info(pod("b", tolerations=[{"operator": "Exists"}])))
    assert not spot_ok(pod_info(pod("c")))
    other = {"key": "karpenter.sh/capacity-type", "value": "on-demand", "effect": "NoSchedule"}
    assert not spot_ok(pod_info(pod("d", tolerations=[other])))


def test_pending_pods_keep_only_refused_readable_pods_and_their_gangs() -> None:
    gang = {"scheduling.x-k8s.io/pod-group": "g"}
    snap = build_snapshot([], [pod("a", tolerations=[SPOT_TOL]), pod("b"),
                               pod("g-0", labels=gang), pod("g-1", labels=gang)])
    got = pending_pods(snap, ["ns/a", "ns/g-0", "ns/g-1"], now=1767225600.0 + 30)
    by = {p.job_id: p for p in got}
    assert set(by) == {"ns/a", "ns/g"}
    assert by["ns/a"].spot_ok and by["ns/a"].waited_s == 30.0
    assert by["ns/a"].request.tolerations == frozenset()
    assert [p.gang_size for p in got if p.job_id == "ns/g"] == [2, 2]


P3 = [CAT[n] for n in ("p3.2xlarge", "p3.8xlarge", "p3.16xlarge")]  # 1, 4, 8 V100


@pytest.mark.parametrize(("gpus", "ann", "labels", "movable", "want"), [
    # cannot move (not in consolidation's movable set), 2 h > 600 s: max(2 × 1, 1) = 2 GPUs
    (1, {"gpufleet.io/duration": "7200"}, {}, set(), 2),
    # the same pod where consolidation may move it: no cap
    (1, {"gpufleet.io/duration": "7200"}, {}, {"ns/x"}, None),
    # no more work than the scale-down horizon: no cap
    (1, {"gpufleet.io/duration": "600"}, {}, set(), None),
    # states no duration: not capped (its work left is unknown)
    (1, {}, {}, set(), None),
    # a 2-GPU pod: max(4, 1) = 4
    (2, {"gpufleet.io/duration": "7200"}, {}, set(), 4),
    # a pod group's replica cannot move even where its pod could: 8-GPU replicas → 16, the
    # smallest fitting type is 8, so max(16, 8) = 16 (any p3)
    (8, {"gpufleet.io/duration": "7200", "scheduling.x-k8s.io/min-available": "2"},
     {"scheduling.x-k8s.io/pod-group": "g"}, {"ns/x"}, 16),
])
def test_node_caps_right_size_pods_that_cannot_move(
        gpus: int, ann: dict, labels: dict, movable: set[str], want: int | None) -> None:
    snap = build_snapshot([], [pod("x", gpus, ann=ann, labels=labels)])
    got = node_caps(snap, P3, 600.0, True, movable, None, 0.0)
    job = "ns/g" if labels else "ns/x"
    assert got.get(job) == want
    pending = pending_pods(snap, ["ns/x"], 0.0, caps=got)
    assert [p.max_node_gpus for p in pending] == [want]


def test_node_caps_without_checkpointing_every_long_pod_pins_its_node() -> None:
    snap = build_snapshot([], [pod("x", 1, ann={"gpufleet.io/duration": "7200"})])
    assert node_caps(snap, P3, 600.0, False, {"ns/x"}, None, 0.0) == {"ns/x": 2}


def test_offers_take_the_cheapest_available_spot_zone_and_one_on_demand_zone() -> None:
    od = TYPES["p3.2xlarge"].usd_per_hour
    zones = TYPES["p3.2xlarge"].zones
    offerings = [Offering("p3.2xlarge", z, CapacityType.ON_DEMAND, od) for z in zones]
    offerings += [Offering("p3.2xlarge", zones[0], CapacityType.SPOT, Decimal("0.5"), False),
                  Offering("p3.2xlarge", zones[1], CapacityType.SPOT, Decimal("0.9")),
                  Offering("unknown.type", zones[0], CapacityType.SPOT, Decimal("0.1"))]
    offers = offers_from(offerings, TYPES, {("p3.2xlarge", zones[0]): 3})
    assert [(o.instance_type, o.capacity_type) for o in offers] == [
        ("p3.2xlarge", CapacityType.ON_DEMAND), ("p3.2xlarge", CapacityType.SPOT)]
    assert offers[0].zone != zones[0]  # fewest on-demand nodes at the same price
    assert offers[1].usd_per_hour == 0.9  # the cheaper zone has no capacity now
    markets = markets_from(offerings, TYPES)
    assert [m.zone for m in markets["p3.2xlarge"]] == [zones[1]]


def test_scale_up_from_the_translation_launches_spot_only_for_tolerating_pods() -> None:
    snap = build_snapshot([], [pod(f"s{i}", tolerations=[SPOT_TOL]) for i in range(3)]
                          + [pod(f"o{i}") for i in range(2)])
    pods = pending_pods(snap, list(snap.pods), now=0.0)
    it = TYPES["p3.2xlarge"]
    offerings = [Offering("p3.2xlarge", z, CapacityType.ON_DEMAND, it.usd_per_hour)
                 for z in it.zones]
    offerings += [Offering("p3.2xlarge", z, CapacityType.SPOT, Decimal("0.9")) for z in it.zones]
    from gpufleet.market.bidding import get_spot_strategy

    launches = ScaleUpPolicy(gpu_threshold=1).decide(
        pods, offers_from(offerings, TYPES, {}), (), markets_from(offerings, TYPES),
        get_spot_strategy("diversified"))
    by_ct: dict[CapacityType, int] = {}
    for x in launches:
        by_ct[x.capacity_type] = by_ct.get(x.capacity_type, 0) + x.count
    assert by_ct == {CapacityType.SPOT: 3, CapacityType.ON_DEMAND: 2}
    # the same pods with those five nodes booting: nothing more
    coming = [(x.instance_type, x.capacity_type, x.zone, False) for x in launches
              for _ in range(x.count)]
    again = ScaleUpPolicy(gpu_threshold=1).decide(
        pods, offers_from(offerings, TYPES, {}), inflight(coming, TYPES),
        markets_from(offerings, TYPES), get_spot_strategy("diversified"))
    assert again == []


def test_node_views_cover_managed_nodes_with_their_pods() -> None:
    it = TYPES["p3.8xlarge"]
    n = node_object(spec_from_instance(it, "kwok-gf-1"))
    n["metadata"]["labels"] |= {TAG_MANAGED: "true", TAG_TOKEN: "gf-1"}
    other = node_object(spec_from_instance(it, "static-0"))
    raw = [pod("r", 2, node="kwok-gf-1")]
    snap = build_snapshot([n, other], raw)
    empty, under = SinceClock(), SinceClock()
    views = node_views(snap, {"kwok-gf-1": (it, False)}, raw, empty, under, 0.5, 100.0)
    assert [v.name for v in views] == ["kwok-gf-1"]
    assert [p.job_id for p in views[0].pods] == ["ns/r"]
    assert sorted(views[0].free_milli) == [0, 0, 1000, 1000]
    # 2,000 of 4,000 milli-GPU is not below the 0.5 threshold: busy, no clock runs
    assert (views[0].empty_since, views[0].underused_since) == (None, None)
    views = node_views(snap, {"kwok-gf-1": (it, False)}, raw, empty, under, 0.75, 110.0)
    assert (views[0].empty_since, views[0].underused_since) == (None, 110.0)  # 2,000 < 3,000
    views = node_views(snap, {"kwok-gf-1": (it, False)}, [], empty, under, 0.75, 120.0)
    assert (views[0].empty_since, views[0].underused_since) == (120.0, None)  # no pod: empty


def test_launch_record_round_trips_and_always_asks_with_its_token() -> None:
    tok = new_token()
    rec = LaunchRecord(tok, "p3.2xlarge", "us-east-1a", CapacityType.SPOT, 5.0,
                       Decimal("3.06"), None)
    back = LaunchRecord.from_data(rec.to_data())
    assert back == rec
    req = back.request()
    assert req.client_token == tok and req.instance_types == ("p3.2xlarge",)
    assert req.tags[TAG_MANAGED] == "true" and req.tags[TAG_TOKEN] == tok
    assert len({new_token() for _ in range(100)}) == 100


def test_cloud_settings_are_validated_with_the_field_named(tmp_path) -> None:
    good = tmp_path / "ok.yaml"
    good.write_text("name: lab\ncloud: {name: kwok, registration_timeout_s: 60,"
                    " kwok: {speedup: 10, notice_s: 5}}\n")
    sc = load_config(good)
    assert sc.cloud is not None and sc.cloud.kwok.speedup == 10
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: lab\ncloud: {name: gce}\n")
    with pytest.raises(InputError, match="cloud"):
        load_config(bad)


def test_only_pods_still_running_on_the_node_are_evicted() -> None:
    from gpufleet.k8s.capacity.inputs import pods_to_evict

    def p(name: str, node: str, phase: str = "Running", **meta: object) -> dict:
        return {"metadata": {"name": name, "namespace": "ns", **meta},
                "spec": {"nodeName": node}, "status": {"phase": phase}}

    pods = [p("run", "n1"), p("done", "n1", "Succeeded"), p("other", "n2"),
            p("going", "n1", deletionTimestamp="2026-01-01T00:00:00Z"),
            p("ds", "n1", ownerReferences=[{"kind": "DaemonSet", "name": "agent",
                                         "controller": True}]),
            p("job", "n1", ownerReferences=[{"kind": "Job", "name": "j"}])]
    assert pods_to_evict("n1", pods) == [("ns", "run"), ("ns", "job")]


def test_a_pending_mig_pod_gets_a_mig_launch_and_its_booting_node_absorbs_it() -> None:
    mig_pod = pod("m")
    mig_pod["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/mig-1g.5gb": "1"}
    snap = build_snapshot([], [mig_pod])
    pods = pending_pods(snap, list(snap.pods), now=0.0)
    types = {**TYPES, "p4d.24xlarge": CAT["p4d.24xlarge"]}
    offerings = [Offering(n, it.zones[0], CapacityType.ON_DEMAND, it.usd_per_hour)
                 for n, it in types.items()]
    policy = ScaleUpPolicy(gpu_threshold=0, max_wait_s=0)
    assert not any(o.shape.mig for o in offers_from(offerings, types, {}))  # no MIG pod: none
    offers = offers_from(offerings, types, {}, mig=True)
    assert [o.instance_type for o in offers if o.shape.mig] == ["p4d.24xlarge"]
    (launch,) = policy.decide(pods, offers, (), {}, None)
    assert (launch.instance_type, launch.mig_config) == ("p4d.24xlarge", "all-enabled")
    # the booting MIG node absorbs the pod; a booting whole-GPU node of that type would not
    assert policy.decide(pods, offers, inflight(
        [("p4d.24xlarge", CapacityType.ON_DEMAND, launch.zone, True)], types), {}, None) == []
    assert policy.decide(pods, offers, inflight(
        [("p4d.24xlarge", CapacityType.ON_DEMAND, launch.zone, False)], types), {}, None) != []


def test_a_node_launched_for_mig_pods_advertises_every_profile_under_mixed_strategy() -> None:
    body = node_object(spec_from_instance(CAT["p4d.24xlarge"], "n", zone="us-east-1a",
                                          mig_config="all-enabled"))
    labels, cap = body["metadata"]["labels"], body["status"]["capacity"]
    assert labels["nvidia.com/mig.config"] == "all-enabled"
    assert labels["nvidia.com/mig.strategy"] == "mixed"
    assert cap["nvidia.com/gpu"] == "0"
    assert cap["nvidia.com/mig-1g.5gb"] == str(7 * 8)  # seven 1g.5gb per A100, eight GPUs
    with pytest.raises(InputError, match="all-enabled"):
        node_object(spec_from_instance(CAT["p4d.24xlarge"], "n", mig_config="all-bogus"))


def test_arrivals_count_each_pod_once_in_creation_order() -> None:
    """``inputs.arrivals``, the headroom's live input: new pods only, oldest first; a requeued
    pod (the replacement of an evicted one) is no arrival; a pod that left is forgotten."""
    def at(name: str, t: int, gpus: int = 1, **kw: object) -> dict:
        body = pod(name, gpus, **kw)  # type: ignore[arg-type]
        body["metadata"]["creationTimestamp"] = f"2026-01-01T00:00:{t:02d}Z"
        return body

    t0 = 1767225600.0  # 2026-01-01T00:00:00Z
    evicted = at("old", 1)
    evicted["metadata"]["ownerReferences"] = [{"kind": "Job", "name": "j", "uid": "u",
                                               "controller": True}]
    evicted["status"] = {"phase": "Failed", "conditions": [
        {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}]}
    again = at("new", 9)
    again["metadata"]["ownerReferences"] = evicted["metadata"]["ownerReferences"]
    first = build_snapshot([], [at("b", 5, 2), at("a", 3), evicted, again])
    got, seen = arrivals(first, set())
    # "old" has ended (evicted): no pod of the snapshot; "new" replaces it: not counted
    assert got == [(t0 + 3, 1.0), (t0 + 5, 2.0)]
    assert seen == {"ns/a", "ns/b", "ns/new"}
    assert arrivals(first, seen)[0] == []  # the next cycle: nothing new
    later = build_snapshot([], [at("b", 5, 2), at("c", 20, 4)])
    got, seen = arrivals(later, seen)
    assert got == [(t0 + 20, 4.0)] and seen == {"ns/b", "ns/c"}


def test_running_pods_and_swap_node_read_the_pods_as_the_simulator_reads_jobs() -> None:
    """The swap's live inputs (``inputs.running_pods``, ``inputs.swap_node``): work done since
    the pod's start; the move's cost from JobSpec's defaults (30 s checkpoint, 120 s restart)
    + the provisioning delay; a pod stating its work gets its reclaim risk."""
    t0 = 1767225600.0  # 2026-01-01T00:00:00Z
    a = pod("a", 2, node="n", tolerations=[SPOT_TOL])
    a["status"]["startTime"] = "2026-01-01T00:00:00Z"
    b = pod("b", 1, node="n", tolerations=[SPOT_TOL], ann={"gpufleet.io/duration": "7200"})
    b["status"]["startTime"] = "2026-01-01T00:30:00Z"
    snap = build_snapshot([], [a, b])
    infos = [snap.pods["ns/a"], snap.pods["ns/b"]]
    now = t0 + 3600
    got = running_pods(infos, now, checkpointing=True)
    assert [(p.job_id, p.request.num_gpu, p.spot_ok, p.waited_s) for p in got] == [
        ("ns/a", 2, True, 0.0), ("ns/b", 1, True, 0.0)]
    assert got[0].risk is None  # no stated work: spot judged on price alone
    assert got[1].risk is not None and got[1].risk.remaining_s == 7200 - 1800
    ra, rb = infos[0].request, infos[1].request
    assert ra is not None and rb is not None
    view = NodeView("n", NodeShape.of(TYPES["p3.8xlarge"], False), False, (0, 0, 0, 1000),
                    0, 0, (PodView("ns/a", ra, True, True), PodView("ns/b", rb, True, True)),
                    None, None, usd_per_hour=12.24)
    sw = swap_node(view, infos, TYPES["p3.8xlarge"], now, provisioning_delay_s=180.0)
    assert (sw.name, sw.usd_per_hour, sw.gpus, sw.job_ids, sw.pod_gpus) == \
        ("n", 12.24, 4, ("ns/a", "ns/b"), 3.0)
    assert sw.attained_s == 1800.0  # the least work done: b started 30 min after a
    assert sw.move_s == 30.0 + 120.0 + 180.0


def test_the_swap_prices_the_live_pods_delay_as_the_simulator_does() -> None:
    """``inputs.swap_node`` / ``running_pods`` with the pods' price of delay
    (``k8s.settings.LiveDelays``: annotation, else the namespace's queue, else the scenario):
    ``delay_usd_h`` = Σ GPUs × v, the risk carries v and the mark; a latency-sensitive pod is
    no move for consolidation or the swap (``LiveDelays.movable``)."""
    t0 = 1767225600.0  # 2026-01-01T00:00:00Z
    a = pod("a", 2, node="n", tolerations=[SPOT_TOL],
            ann={"gpufleet.io/value-of-time": "10", "gpufleet.io/duration": "7200"})
    b = pod("b", 1, node="n", tolerations=[SPOT_TOL],
            ann={"gpufleet.io/latency-sensitive": "true", "gpufleet.io/duration": "7200"})
    for p in (a, b):
        p["status"]["startTime"] = "2026-01-01T00:00:00Z"
    snap = build_snapshot([], [a, b])
    infos = [snap.pods["ns/a"], snap.pods["ns/b"]]
    sc = Scenario(name="s", value_of_time_usd_per_gpu_hour=3.0)
    delays = LiveDelays.of(sc)
    # a states 10; b states nothing: the scenario's 3 → 2 × 10 + 1 × 3 = 23 $ per hour of delay
    ra, rb = infos[0].request, infos[1].request
    assert ra is not None and rb is not None
    view = NodeView("n", NodeShape.of(TYPES["p3.8xlarge"], False), False, (0, 0, 0, 1000),
                    0, 0, (PodView("ns/a", ra, True, True), PodView("ns/b", rb, True, True)),
                    None, None, usd_per_hour=12.24)
    sw = swap_node(view, infos, TYPES["p3.8xlarge"], t0 + 3600, 180.0, delays.of_pod)
    assert sw.delay_usd_h == 23.0
    # without the live settings only the annotations count: 2 × 10
    assert swap_node(view, infos, TYPES["p3.8xlarge"], t0 + 3600, 180.0).delay_usd_h == 20.0
    got = running_pods(infos, t0 + 3600, True, delays.of_pod)
    assert [(p.risk.value_of_time, p.risk.latency_sensitive) for p in got if p.risk] == [
        (10.0, False), (3.0, True)]
    assert delays.movable({"ns/a", "ns/b", "ns/gone"}, snap.pods) == {"ns/a", "ns/gone"}
    # the namespace's queue sets the team's: v 40 and latency-sensitive for ns
    delays.observe(sc, {"ns": "vision"}, {"vision": QueueSettings(
        name="vision", value_of_time_usd_per_gpu_hour=40.0, latency_sensitive=True)})
    assert delays.of_pod(infos[0]) == Delay(10.0, True)  # its own v, the team's mark
    assert delays.of_pod(infos[1]) == Delay(40.0, True)
    assert delays.movable({"ns/a", "ns/b"}, snap.pods) == set()


@pytest.mark.parametrize(("ann", "off_spot"), [
    ({}, False),
    ({"gpufleet.io/latency-sensitive": "true"}, True),  # no value of time: off spot
    ({"gpufleet.io/latency-sensitive": "true", "gpufleet.io/value-of-time": "10"},
     True),  # a value of time but no stated work: the spot rule cannot weigh it
    ({"gpufleet.io/latency-sensitive": "true", "gpufleet.io/value-of-time": "10",
      "gpufleet.io/duration": "3600"}, False),  # the spot rule decides, with its v
])
def test_a_latency_sensitive_pending_pod_stays_off_spot_unless_the_rule_can_weigh_it(
        ann: dict, off_spot: bool) -> None:
    """Off spot as the simulator's admission keeps such a job off it: no spot toleration for
    placement (``tolerated_now``), no spot launch (``pending_pods``) — and not a deadline
    guard's pin (``on_demand_only`` stays False: the queue does not read it as urgent)."""
    snap = build_snapshot([], [pod("p", 1, tolerations=[SPOT_TOL], ann=ann)])
    sc = Scenario(name="s", value_of_time_usd_per_gpu_hour=0.0)  # "no value of time" is 0
    apply_levers(snap, sc, now=0.0, delays=LiveDelays.of(sc))
    (p,) = snap.pending
    assert not p.on_demand_only
    assert (SPOT_TAINT not in tolerated_now(p, [SPOT_TAINT])) is off_spot
    (pp,) = pending_pods(snap, ["ns/p"], 0.0)
    assert pp.spot_ok is not off_spot
    # resolved into the pending pod: its own values, else the defaults (0, not sensitive;
    # None reads as those)
    assert (p.value_of_time or 0.0) == float(ann.get("gpufleet.io/value-of-time", 0.0))
    assert bool(p.latency_sensitive) is ("gpufleet.io/latency-sensitive" in ann)
