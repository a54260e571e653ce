"""The controller's /metrics on the real API server: cost by node pool and by namespace.

Two priced nodes (a spot g4dn.12xlarge at an offered $1.50/h, an on-demand p3.8xlarge at the
catalog price) and GPU pods in two namespaces. The expected dollars are computed here from the
API's own timeline (node creationTimestamp, container startedAt) and the scrape's time bounds.
"""

from __future__ import annotations

import json
import time
import urllib.request
from datetime import datetime
from decimal import Decimal
from typing import Any

import pytest
from live_objects import gpu_pod
from live_wait import wait_for
from prometheus_client.parser import text_string_to_metric_families

from gpufleet.catalog.instances import default_instance_catalog
from gpufleet.cloud.provider import Offering
from gpufleet.config import default_scenario
from gpufleet.decisions import CapacityType
from gpufleet.k8s.capacity.cost import PriceBook
from gpufleet.k8s.schedule.controller import Controller

pytestmark = pytest.mark.live
ZONE = "topology.kubernetes.io/zone"
SPOT_PRICE = 1.5



def epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_controller_exports_node_and_namespace_cost_from_the_node_timeline(lab: Any) -> None:
    core = lab.core
    team_a, team_b = lab.namespace("cost-a"), lab.namespace("cost-b")
    zone = team_a
    (spot,) = lab.add_instance_nodes("g4dn.12xlarge", 1, zone=zone, prefix=zone,
                                     capacity_type="spot")
    (ondemand,) = lab.add_instance_nodes("p3.8xlarge", 1, zone=zone, prefix=zone)
    od_price = float(default_instance_catalog()["p3.8xlarge"].usd_per_hour)
    prices = PriceBook(offerings=[Offering("g4dn.12xlarge", zone, CapacityType.SPOT,
                                           Decimal(str(SPOT_PRICE)))])
    ctl = Controller(lab.api, default_scenario(), leader_elect=False, resync_s=0.5,
                     prices=prices)
    port = ctl.serve_http("127.0.0.1", 0)
    ctl.start()
    try:
        wait_for("informers", ctl.ready)
        core.create_namespaced_pod(team_a, gpu_pod("a", 2, {"kubernetes.io/hostname": spot}))
        core.create_namespaced_pod(team_b, gpu_pod("b", 1, {"kubernetes.io/hostname": ondemand}))

        def running(ns: str, name: str) -> dict | None:
            p = json.loads(core.read_namespaced_pod(name, ns, _preload_content=False).data)
            return p if p["status"].get("phase") == "Running" else None

        pa = wait_for("pod a to run", lambda: running(team_a, "a"))
        pb = wait_for("pod b to run", lambda: running(team_b, "b"))

        def started(p: dict) -> float:
            cs = p["status"].get("containerStatuses") or []
            at = [c["state"]["running"]["startedAt"] for c in cs
                  if (c.get("state") or {}).get("running", {}).get("startedAt")]
            return max(epoch(t) for t in at) if at else epoch(p["status"]["startTime"])

        created = {n: epoch(core.read_node(n).metadata.creation_timestamp.isoformat())
                   for n in (spot, ondemand)}
        before = time.time()
        got = scrape(port)
        after = time.time()

        def between(value: float, rate_per_h: float, since: float) -> None:
            lo = rate_per_h * (before - since) / 3600 - 1e-9
            hi = rate_per_h * (after - since) / 3600 + 1e-9
            assert lo <= value <= hi, (value, lo, hi)

        def node_key(ct: str, it: str) -> tuple[tuple[str, str], ...]:
            return (("capacity_type", ct), ("instance_type", it), ("zone", zone))

        between(got[("gpufleet_node_cost_dollars_total", node_key("spot", "g4dn.12xlarge"))],
                SPOT_PRICE, created[spot])
        between(got[("gpufleet_node_cost_dollars_total", node_key("on-demand", "p3.8xlarge"))],
                od_price, created[ondemand])
        assert got[("gpufleet_node_cost_dollars_per_second",
                    node_key("spot", "g4dn.12xlarge"))] == pytest.approx(SPOT_PRICE / 3600)
        # namespaces pay their pods' GPU share of the node: 2 of 4 T4s, 1 of 4 V100s
        between(got[("gpufleet_cost_dollars_total", (("tenant", team_a),))],
                SPOT_PRICE * 2 / 4, started(pa))
        between(got[("gpufleet_cost_dollars_total", (("tenant", team_b),))],
                od_price * 1 / 4, started(pb))
        assert got[("gpufleet_cost_dollars_per_second", (("tenant", team_a),))] == (
            pytest.approx(SPOT_PRICE * 2 / 4 / 3600))
        assert got[("gpufleet_cost_dollars_per_second", (("tenant", team_b),))] == (
            pytest.approx(od_price / 4 / 3600))
        assert got[("gpufleet_jobs_running", (("gpu_shape", "2"), ("tenant", team_a)))] == 1
        # and the totals keep growing with the node-hours
        wait_for("a later scrape", lambda: time.time() > after + 1.0, 5)
        again = scrape(port)
        key = ("gpufleet_node_cost_dollars_total", node_key("spot", "g4dn.12xlarge"))
        assert again[key] > got[key]
    finally:
        ctl.stop()
        for ns in (team_a, team_b):
            core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
        for n in (spot, ondemand):
            core.delete_node(n)
        for ns in (team_a, team_b):
            core.delete_namespace(ns)
