"""gpufleet_* fleet and cost metrics, against values worked out by hand from conftest's fleet."""

from __future__ import annotations

import dataclasses

import pytest
from prometheus_client.registry import CollectorRegistry

from gpufleet.metrics.fleet import RECOVERY_BUCKETS_S, FleetMetrics
from gpufleet.metrics.snapshot import FleetSnapshot

from .conftest import fleet_snapshot


@pytest.fixture
def published(snapshot: FleetSnapshot) -> CollectorRegistry:
    registry = CollectorRegistry()
    FleetMetrics(registry).update(snapshot)
    return registry


# (metric, labels, expected) — node-a/node-b: 2 A100 each on-demand in us-east-1a, allocated
# 1500 + 2000 milli; node-c: 4 V100 spot, provisioning, nothing allocated.
CASES = [
    ("gpufleet_jobs_pending", {"tenant": "alice", "gpu_shape": "1"}, 2),
    ("gpufleet_jobs_pending", {"tenant": "bob", "gpu_shape": "mig-1g.5gb"}, 1),
    ("gpufleet_jobs_running", {"tenant": "alice", "gpu_shape": "0.5"}, 3),
    ("gpufleet_jobs_running", {"tenant": "bob", "gpu_shape": "1"}, 1),
    # a (tenant, shape) with jobs in only one of the two states reads 0 in the other
    ("gpufleet_jobs_pending", {"tenant": "alice", "gpu_shape": "0.5"}, 0),
    ("gpufleet_jobs_running", {"tenant": "bob", "gpu_shape": "mig-1g.5gb"}, 0),
    ("gpufleet_gpus_provisioned", {"gpu_model": "A100", "capacity_type": "on-demand"}, 4),
    ("gpufleet_gpus_provisioned", {"gpu_model": "V100", "capacity_type": "spot"}, 4),
    ("gpufleet_gpus_allocated", {"gpu_model": "A100", "capacity_type": "on-demand"}, 3.5),
    ("gpufleet_gpus_allocated", {"gpu_model": "V100", "capacity_type": "spot"}, 0),
    ("gpufleet_gpu_allocation_ratio", {}, 3.5 / 8),
    # whole GPUs reporting utilisation: 80, 40, 100 (MIG parent has none) -> 220 / 300
    ("gpufleet_gpu_utilization_ratio", {}, 220 / 300),
    ("gpufleet_fragmentation_ratio", {}, 0.25),
    ("gpufleet_nodes", {"capacity_type": "on-demand", "zone": "us-east-1a", "state": "ready"}, 2),
    ("gpufleet_nodes", {"capacity_type": "spot", "zone": "us-east-1b", "state": "provisioning"}, 1),
    ("gpufleet_spot_interruptions_total", {}, 5),
    ("gpufleet_cost_dollars_per_second", {"tenant": "alice"}, 36.0 / 3600),
    ("gpufleet_cost_dollars_per_second", {"tenant": "bob"}, 7.2 / 3600),
    ("gpufleet_cost_dollars_total", {"tenant": "alice"}, 12.5),
    ("gpufleet_cost_dollars_total", {"tenant": "bob"}, 3.25),
    ("gpufleet_sim_time_seconds", {}, 3600),
]


@pytest.mark.parametrize(("name", "labels", "expected"), CASES)
def test_fleet_metric(
    published: CollectorRegistry, name: str, labels: dict[str, str], expected: float
) -> None:
    assert published.get_sample_value(name, labels) == pytest.approx(expected)


def test_series_sets_are_exactly_those_of_the_snapshot(published: CollectorRegistry) -> None:
    nodes = [s for m in published.collect() if m.name == "gpufleet_nodes" for s in m.samples]
    assert len(nodes) == 2  # one series per (capacity_type, zone, state) present


def test_gpus_are_exported_under_dcgm_names_too(published: CollectorRegistry) -> None:
    assert (
        published.get_sample_value(
            "DCGM_FI_DEV_FB_USED",
            {
                "gpu": "1",
                "UUID": "GPU-node-b-1",
                "device": "nvidia1",
                "modelName": "NVIDIA A100-SXM4-40GB",
                "Hostname": "node-b",
                "GPU_I_PROFILE": "3g.20gb",
                "GPU_I_ID": "1",
            },
        )
        == 9000
    )


def test_recovery_histogram_accumulates_each_snapshot_once() -> None:
    registry = CollectorRegistry()
    metrics = FleetMetrics(registry)
    metrics.update(fleet_snapshot(recoveries=(45.0, 90.0, 600.0)))
    metrics.update(fleet_snapshot(recoveries=(7200.0, 20000.0)))
    metrics.update(fleet_snapshot())  # nothing new completed
    expected_cumulative = {
        30.0: 0,
        60.0: 1,
        120.0: 2,
        300.0: 2,
        600.0: 3,
        1200.0: 3,
        1800.0: 3,
        3600.0: 3,
        7200.0: 4,
        14400.0: 4,
    }
    assert tuple(expected_cumulative) == RECOVERY_BUCKETS_S
    for bound, count in expected_cumulative.items():
        le = repr(bound)
        assert registry.get_sample_value("gpufleet_recovery_seconds_bucket", {"le": le}) == count
    assert registry.get_sample_value("gpufleet_recovery_seconds_bucket", {"le": "+Inf"}) == 5
    assert registry.get_sample_value("gpufleet_recovery_seconds_count") == 5
    assert registry.get_sample_value("gpufleet_recovery_seconds_sum") == 27935.0


def test_tenant_that_leaves_vanishes(snapshot: FleetSnapshot) -> None:
    registry = CollectorRegistry()
    metrics = FleetMetrics(registry)
    metrics.update(snapshot)
    metrics.update(
        dataclasses.replace(
            snapshot,
            jobs_pending={("alice", "1"): 1},
            cost_usd_per_hour_by_tenant={"alice": 36.0},
        )
    )
    alice = {"tenant": "alice", "gpu_shape": "1"}
    assert registry.get_sample_value("gpufleet_jobs_pending", alice) == 1
    assert (
        registry.get_sample_value(
            "gpufleet_jobs_pending", {"tenant": "bob", "gpu_shape": "mig-1g.5gb"}
        )
        is None
    )
    # bob still runs one 1-GPU job: his queue reads 0, not "no data"
    assert (
        registry.get_sample_value("gpufleet_jobs_pending", {"tenant": "bob", "gpu_shape": "1"}) == 0
    )
    assert registry.get_sample_value("gpufleet_cost_dollars_per_second", {"tenant": "bob"}) is None


def test_nothing_published_before_the_first_snapshot() -> None:
    registry = CollectorRegistry()
    FleetMetrics(registry)
    assert [m for m in registry.collect() if m.samples] == []


def test_empty_fleet_ratios_are_zero(snapshot: FleetSnapshot) -> None:
    registry = CollectorRegistry()
    FleetMetrics(registry).update(dataclasses.replace(snapshot, nodes=(), gpus=()))
    assert registry.get_sample_value("gpufleet_gpu_allocation_ratio") == 0
    assert registry.get_sample_value("gpufleet_gpu_utilization_ratio") == 0
