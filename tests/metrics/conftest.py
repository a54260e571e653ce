"""Hand-built fleet snapshots with values small enough to work the expected metrics out by hand."""

from __future__ import annotations

import pytest

from gpufleet.metrics.snapshot import FleetSnapshot, GpuSample, NodeSample


def gpu(
    host: str,
    index: int,
    util: float,
    used: float,
    free: float,
    *,
    xid: int = 0,
    mig_profile: str | None = None,
    mig_id: int | None = None,
) -> GpuSample:
    return GpuSample(
        hostname=host,
        gpu=index,
        uuid=f"GPU-{host}-{index}",
        model_name="NVIDIA A100-SXM4-40GB",
        util_pct=util,
        mem_copy_util_pct=util / 2,
        fb_used_mib=used,
        fb_free_mib=free,
        temp_c=40.0 + index,
        power_w=100.0 + index,
        sm_clock_mhz=1410.0,
        xid_errors=xid,
        mig_profile=mig_profile,
        mig_id=mig_id,
    )


def fleet_snapshot(time_s: float = 3600.0, recoveries: tuple[float, ...] = ()) -> FleetSnapshot:
    """Two on-demand A100 nodes in zone a (one with a MIG GPU), one spot V100 node provisioning."""
    gpus = (
        gpu("node-a", 0, 80.0, 30000.0, 10960.0),
        gpu("node-a", 1, 40.0, 10000.0, 30960.0),
        gpu("node-b", 0, 100.0, 40000.0, 960.0, xid=79),
        # node-b GPU 1 is MIG-enabled: the parent (no memory) and two instances
        gpu("node-b", 1, float("nan"), float("nan"), float("nan")),
        gpu("node-b", 1, float("nan"), 4000.0, 864.0, mig_profile="1g.5gb", mig_id=7),
        gpu("node-b", 1, float("nan"), 9000.0, 10456.0, mig_profile="3g.20gb", mig_id=1),
    )
    nodes = (
        NodeSample("node-a", "p4d.24xlarge", "us-east-1a", "on-demand", "ready", "A100", 2, 1500),
        NodeSample("node-b", "p4d.24xlarge", "us-east-1a", "on-demand", "ready", "A100", 2, 2000),
        NodeSample("node-c", "p3.8xlarge", "us-east-1b", "spot", "provisioning", "V100", 4, 0),
    )
    return FleetSnapshot(
        time_s=time_s,
        gpus=gpus,
        nodes=nodes,
        jobs_pending={("alice", "1"): 2, ("bob", "mig-1g.5gb"): 1},
        jobs_running={("alice", "0.5"): 3, ("bob", "1"): 1},
        spot_interruptions_total=5,
        recovery_seconds=recoveries,
        cost_usd_total_by_tenant={"alice": 12.5, "bob": 3.25},
        cost_usd_per_hour_by_tenant={"alice": 36.0, "bob": 7.2},
        fragmentation_ratio=0.25,
    )


@pytest.fixture
def snapshot() -> FleetSnapshot:
    return fleet_snapshot()


def queue_views() -> list:
    """Two team queues as the live controller sees them (``k8s.queues``): one borrowing with a
    budget running low, one without a budget; for the dashboard's queue row."""
    from gpufleet.k8s.queues.ledger import Spend
    from gpufleet.k8s.queues.spec import parse_queue
    from gpufleet.k8s.queues.status import view_of
    from gpufleet.queueing.teams.quota import QuotaBook

    def obj(name: str, spec: dict) -> dict:
        return {"metadata": {"name": name, "uid": name, "generation": 1}, "spec": spec}

    a = parse_queue(obj("vision", {"gpus": 4, "cohort": "research",
                                   "budget": {"usd": 100, "period": "day"}}))
    b = parse_queue(obj("speech", {"gpus": 4, "cohort": "research"}))
    assert a.settings is not None and b.settings is not None
    book = QuotaBook([a.settings.quota(), b.settings.quota()], {"vision": 6000, "speech": 1500})
    day = 1_796_342_400.0  # 2026-12-04T00:00Z
    spend = Spend(day, day + 86400, 95_000_000, 2000.0)
    return [view_of(a, a.settings, book, 3, spend, day + 3600),
            view_of(b, b.settings, book, 0, Spend(day, day + 2678400, 1_000_000, 10.0),
                    day + 3600)]
