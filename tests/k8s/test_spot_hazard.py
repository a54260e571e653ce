"""The live capacity loop learns the reclaim hazard from its own spot instances
(``k8s.capacity.scale_up.ScaleUp.observe``), as the simulator does from its nodes."""

from __future__ import annotations

import pytest

from gpufleet.catalog.instances import default_instance_catalog
from gpufleet.cloud.provider import Instance, InstanceState
from gpufleet.config import default_scenario
from gpufleet.decisions import CapacityType
from gpufleet.k8s.capacity.scale_up import ScaleUp


def spot(iid: str, zone: str, at: float) -> Instance:
    return Instance(iid, f"kwok://{iid}", "p3.2xlarge", zone, CapacityType.SPOT,
                    InstanceState.RUNNING, at)


def test_exposure_from_launch_and_a_reclaim_only_where_a_notice_named_the_instance() -> None:
    types = {t.name: t for t in default_instance_catalog() if t.name == "p3.2xlarge"}
    up = ScaleUp(provider=None, scenario=default_scenario(), types=types)  # type: ignore[arg-type]
    a, b = spot("i-a", "us-east-1a", 0.0), spot("i-b", "us-east-1a", 0.0)
    od = Instance("i-c", "kwok://i-c", "p3.2xlarge", "us-east-1a", CapacityType.ON_DEMAND,
                  InstanceState.RUNNING, 0.0)
    up.observe([a, b, od], 0.0)
    up.reclaim_notice("i-a")
    up.observe([b, od], 7200.0)  # i-a reclaimed after 2 h; i-b still up
    h = up.hazard
    assert h.reclaims("p3.2xlarge", "us-east-1a") == 1
    # 2 + 2 node-hours, prior 1 in 6: (1 + 1) / (6 + 4)
    assert h.rate_per_h("p3.2xlarge", "us-east-1a", 7200.0) == pytest.approx(0.2)
    up.observe([od], 10_800.0)  # i-b leaves with no notice (scaled down): exposure only
    assert h.reclaims("p3.2xlarge", "us-east-1a") == 1
    assert h.rate_per_h("p3.2xlarge", "us-east-1a", 10_800.0) == pytest.approx(2 / 11)
