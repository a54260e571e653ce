"""dashboards/gpufleet.json without a server: provisionable shape, and every metric it names is
one we export (or, for the GPU panels, one dcgm-exporter exports by default)."""

from __future__ import annotations

import re

from prometheus_client.registry import CollectorRegistry

from gpufleet.metrics.dcgm import FIELDS
from gpufleet.metrics.fleet import FleetMetrics

from .conftest import fleet_snapshot, queue_views
from .test_prometheus import dashboard, panel_queries, panels, variable_queries

IDENT = re.compile(r"\b([A-Za-z_:][A-Za-z0-9_:]*)\b")
PROMQL_WORDS = {
    "sum",
    "avg",
    "max",
    "min",
    "count",
    "by",
    "on",
    "or",
    "and",
    "unless",
    "rate",
    "increase",
    "histogram_quantile",
    "vector",
    "le",
    "count_over_time",
    "without",
    "ignoring",
}


def exported_names() -> set[str]:
    registry = CollectorRegistry()
    FleetMetrics(registry).update(fleet_snapshot(recoveries=(60.0,)))
    return {s.name for m in registry.collect() for s in m.samples} | queue_names()


def queue_names() -> set[str]:
    """The live controller's per-queue families (the dashboard's team-queue row)."""
    from gpufleet.k8s.queues.metrics import queue_families

    return {s.name for m in queue_families(queue_views()) for s in m.samples}


def metric_names(expr: str) -> set[str]:
    no_strings = re.sub(r'"[^"]*"', '""', expr)
    no_labels = re.sub(r"\{[^}]*\}", "", no_strings)
    no_groupings = re.sub(r"\b(by|on|without|ignoring)\s*\([^)]*\)", "", no_labels)
    no_ranges = re.sub(r"\[[^\]]*\]", "", no_groupings)
    return {
        word
        for word in IDENT.findall(no_ranges)
        if word not in PROMQL_WORDS and not word.replace(".", "").isdigit()
    }


def test_provisionable_shape() -> None:
    dash = dashboard()
    assert dash["uid"] == "gpufleet" and dash["schemaVersion"] >= 36
    names = [v["name"] for v in dash["templating"]["list"]]
    assert names[0] == "datasource"
    assert dash["templating"]["list"][0] == {
        **dash["templating"]["list"][0],
        "type": "datasource",
        "query": "prometheus",
    }
    ids = [p["id"] for p in panels(dash)]
    assert len(ids) == len(set(ids))
    for panel in panels(dash):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"]
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, panel["title"]


def test_every_metric_in_the_dashboard_is_exported() -> None:
    exported = exported_names()
    queries = panel_queries() + [(v, sel, "") for v, sel, _ in variable_queries()]
    unknown = {
        (title, name)
        for title, expr, *_ in queries
        for name in metric_names(expr)
        if name not in exported
    }
    assert not unknown


def test_every_dcgm_field_and_fleet_family_is_on_the_dashboard() -> None:
    used = set().union(*(metric_names(expr) for _, expr in panel_queries()))
    assert {f.name for f in FIELDS} <= used
    fleet = {n for n in exported_names() if n.startswith("gpufleet_")}
    fleet.discard("gpufleet_sim_time_seconds")  # a debugging aid, not a dashboard quantity
    assert fleet <= used, fleet - used


def live_exported_names() -> set[str]:
    """What the live controller's fleet collector exports for a small running fleet."""
    from gpufleet.catalog.instances import default_instance_catalog
    from gpufleet.k8s.capacity.cost import LiveFleet, LiveFleetCollector
    from gpufleet.k8s.translate.node_objects import node_object, spec_from_instance

    node = node_object(spec_from_instance(default_instance_catalog()["g4dn.12xlarge"], "n1",
                                          capacity_type="spot"))
    node["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    pod = {"metadata": {"name": "p", "namespace": "team", "uid": "u1"},
           "spec": {"schedulerName": "gpufleet", "nodeName": "n1", "containers": [
               {"name": "m", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
           "status": {"phase": "Running", "startTime": "2026-01-01T00:01:00Z"}}
    fleet = LiveFleet()
    fleet.add_recoveries([60.0])
    registry = CollectorRegistry()
    registry.register(LiveFleetCollector(fleet, lambda: [node], lambda: [pod], lambda: True,
                                         lambda: 1_767_229_200.0))
    return {s.name for m in registry.collect() for s in m.samples} | queue_names()


def test_every_queue_family_is_on_the_dashboard() -> None:
    used = set().union(*(metric_names(expr) for _, expr in panel_queries()))
    assert queue_names() <= used, queue_names() - used


def test_every_fleet_metric_in_the_dashboard_is_exported_by_the_live_controller() -> None:
    """A live fleet has no simulated GPUs (dcgm-exporter serves DCGM_FI_* there), but every
    gpufleet_* panel must work on it unchanged."""
    exported = live_exported_names()
    used = set().union(*(metric_names(expr) for _, expr in panel_queries()))
    missing = {n for n in used if n.startswith("gpufleet_")} - exported
    assert not missing


def test_metric_name_extraction() -> None:
    expr = (
        "histogram_quantile(0.95, sum by (le) (rate(gpufleet_recovery_seconds_bucket[1m])))"
        ' / on (Hostname) DCGM_FI_DEV_FB_USED{Hostname=~".*", gpu="1"} or vector(0)'
    )
    assert metric_names(expr) == {"gpufleet_recovery_seconds_bucket", "DCGM_FI_DEV_FB_USED"}
