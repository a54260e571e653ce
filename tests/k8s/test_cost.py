"""Live cost and fleet metrics from Node/Pod objects: prices, the node timeline, tenant shares,
and the dashboard's names."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from prometheus_client.registry import CollectorRegistry

from gpufleet.catalog.instances import default_instance_catalog
from gpufleet.catalog.spot_prices import SpotPrice
from gpufleet.cloud.provider import Offering
from gpufleet.decisions import CapacityType
from gpufleet.k8s.capacity.cost import LiveFleet, LiveFleetCollector, PriceBook
from gpufleet.k8s.translate.node_objects import node_object, spec_from_instance
from gpufleet.k8s.translate.snapshot import build_snapshot

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
CAT = default_instance_catalog()


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node(name: str, itype: str, ct: str, created: float, zone: str = "us-east-1a") -> dict:
    obj = node_object(spec_from_instance(CAT[itype], name, zone=zone, capacity_type=ct))
    obj["metadata"]["creationTimestamp"] = iso(created)
    obj["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return obj


def pod(name: str, ns: str, on: str | None, gpus: str, started: float | None,
        phase: str = "Running") -> dict:
    status: dict[str, Any] = {"phase": phase}
    if started is not None:
        status["containerStatuses"] = [{"state": {"running": {"startedAt": iso(started)}}}]
    return {"metadata": {"name": name, "namespace": ns, "uid": f"u-{ns}-{name}",
                         "creationTimestamp": iso(T0)},
            "spec": {"schedulerName": "gpufleet", **({"nodeName": on} if on else {}),
                     "containers": [{"name": "m", "resources": {"limits": {
                         "cpu": "1", "memory": "1Gi", "nvidia.com/gpu": gpus}}}]},
            "status": status}


def test_price_book_prefers_offerings_then_the_spot_snapshot_then_on_demand() -> None:
    od = float(CAT["g4dn.12xlarge"].usd_per_hour)
    ts = datetime(2026, 1, 1, tzinfo=UTC)
    book = PriceBook(CAT, offerings=[Offering("g4dn.12xlarge", "us-east-1a", CapacityType.SPOT,
                                              Decimal("1.5"))],
                     spot_prices=[SpotPrice("us-east-1b", "g4dn.12xlarge", "Linux/UNIX",
                                            Decimal("1.2"), ts),
                                  SpotPrice("us-east-1b", "g4dn.12xlarge", "Linux/UNIX",
                                            Decimal("1.3"), ts.replace(hour=5))])
    assert book.price("g4dn.12xlarge", "us-east-1a", "on-demand") == od
    assert book.price("g4dn.12xlarge", "us-east-1a", "spot") == 1.5
    assert book.price("g4dn.12xlarge", "us-east-1b", "spot") == 1.3  # the latest row
    assert book.price("g4dn.12xlarge", "us-east-1c", "spot") == 1.3  # cheapest known zone
    assert book.price("p3.8xlarge", "us-east-1a", "spot") == float(CAT["p3.8xlarge"].usd_per_hour)
    assert book.price("no-such-type", "z", "on-demand") == 0.0 and not book.known("no-such-type")


def test_node_hours_and_tenant_shares_are_integrals_of_the_timeline() -> None:
    spot_price = 1.5
    book = PriceBook(CAT, offerings=[Offering("g4dn.12xlarge", "us-east-1a", CapacityType.SPOT,
                                              Decimal(str(spot_price)))])
    od = float(CAT["p3.8xlarge"].usd_per_hour)
    nodes = [node("s1", "g4dn.12xlarge", "spot", T0), node("o1", "p3.8xlarge", "on-demand",
                                                           T0 + 1800)]
    pods = [pod("a", "team-a", "s1", "2", T0 + 600),  # half of the spot node
            pod("b", "team-b", "o1", "1", T0 + 1800),  # a quarter of the on-demand node
            pod("q", "team-b", None, "4", None, phase="Pending")]
    fleet = LiveFleet(book)
    snap = fleet.snapshot(nodes, pods, T0 + 3600)
    assert fleet.node_totals == {("spot", "us-east-1a", "g4dn.12xlarge"): spot_price * 1.0,
                                 ("on-demand", "us-east-1a", "p3.8xlarge"): od * 0.5}
    assert fleet.node_rates[("spot", "us-east-1a", "g4dn.12xlarge")] == spot_price / 3600
    assert snap.cost_usd_total_by_tenant == {
        "team-a": spot_price * 0.5 * (3000 / 3600), "team-b": od * 0.25 * 0.5}
    assert snap.cost_usd_per_hour_by_tenant == {"team-a": spot_price * 0.5, "team-b": od * 0.25}
    assert snap.jobs_running == {("team-a", "2"): 1, ("team-b", "1"): 1}
    assert snap.jobs_pending == {("team-b", "4"): 1}
    assert {n.name: (n.allocated_milli, n.state) for n in snap.nodes} == {
        "s1": (2000, "ready"), "o1": (1000, "ready")}
    fleet.observe_state(build_snapshot(nodes, pods).state)
    assert fleet.snapshot(nodes, pods, T0 + 3600).fragmentation_ratio == 0.0  # whole GPUs

    half = pod("h", "team-b", "s1", "0", T0 + 1800)
    half["spec"]["containers"][0]["resources"]["limits"].pop("nvidia.com/gpu")
    half["metadata"]["annotations"] = {"gpu-fraction": "0.5"}
    fleet.observe_state(build_snapshot(nodes, [*pods, half]).state)
    frac = fleet.snapshot(nodes, [*pods, half], T0 + 3600)
    # free milli-GPU: s1 has 1000 + 500 (2 GPUs taken, one half), o1 3 x 1000
    assert frac.fragmentation_ratio == 500 / 4500
    assert frac.cost_usd_per_hour_by_tenant["team-b"] == od * 0.25 + spot_price * 0.5 / 4

    fleet = LiveFleet(book)
    fleet.snapshot(nodes, pods, T0 + 3600)
    # pod "a" finishes at T0 + 5400 (seen at the next scrape, T0 + 7200): charged to its end
    done = pod("a", "team-a", "s1", "2", None, phase="Succeeded")
    done["status"]["containerStatuses"] = [{"state": {"terminated": {
        "startedAt": iso(T0 + 600), "finishedAt": iso(T0 + 5400)}}}]
    fleet.snapshot(nodes, [done, pods[1]], T0 + 7200)
    team_a_total = spot_price * 0.5 * (4800 / 3600)
    assert fleet.snapshot(nodes, [pods[1]], T0 + 7300).cost_usd_total_by_tenant[
        "team-a"] == team_a_total

    fleet = LiveFleet(book)
    fleet.snapshot(nodes, pods, T0 + 3600)
    # an hour later pod "a" is gone without a trace (deleted) and node "o1" too: what they cost
    # up to the last scrape that saw them stays counted
    later = fleet.snapshot([nodes[0]], [pods[1]], T0 + 7200)
    assert fleet.node_totals == {("spot", "us-east-1a", "g4dn.12xlarge"): spot_price * 2.0,
                                 ("on-demand", "us-east-1a", "p3.8xlarge"): od * 0.5}
    assert later.cost_usd_total_by_tenant == {
        "team-a": spot_price * 0.5 * (3000 / 3600), "team-b": od * 0.25 * 0.5}
    assert ("on-demand", "us-east-1a", "p3.8xlarge") not in fleet.node_rates


def test_the_collector_exports_only_while_leading() -> None:
    leading = [True]
    nodes = [node("s1", "g4dn.12xlarge", "spot", T0)]
    pods = [pod("a", "team-a", "s1", "2", T0 + 600)]
    fleet = LiveFleet(PriceBook(CAT))
    fleet.add_recoveries([42.0])
    reg = CollectorRegistry()
    reg.register(LiveFleetCollector(fleet, lambda: nodes, lambda: pods, lambda: leading[0],
                                    lambda: T0 + 3600))
    assert reg.get_sample_value("gpufleet_recovery_seconds_count") == 1
    assert reg.get_sample_value(
        "gpufleet_node_cost_dollars_total",
        {"capacity_type": "spot", "zone": "us-east-1a", "instance_type": "g4dn.12xlarge"},
    ) == pytest.approx(float(CAT["g4dn.12xlarge"].usd_per_hour))
    leading[0] = False
    assert not list(reg.collect())


def test_the_parses_of_pods_and_nodes_no_longer_listed_are_dropped() -> None:
    """The collector keeps each listed object's parse for the next scrape, and only those: a
    controller that runs for months sees every pod the cluster ever ran."""
    fleet = LiveFleet(PriceBook(CAT))
    nodes = [node("n1", "p4d.24xlarge", "on-demand", T0), node("n2", "g5.xlarge", "spot", T0)]
    pods = [pod(f"p{i}", "team", "n1", "1", T0) for i in range(3)]
    for i, o in enumerate([*nodes, *pods]):
        o["metadata"]["resourceVersion"] = str(i + 1)
    fleet.snapshot(nodes, pods, T0 + 60)
    assert len(fleet._cache.pods) == 3 and len(fleet._cache.nodes) == 2
    fleet.snapshot(nodes[:1], pods[1:], T0 + 120)
    assert set(fleet._cache.pods) == {"team/p1", "team/p2"} and set(fleet._cache.nodes) == {"n1"}
