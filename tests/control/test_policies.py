"""One builder of policies from settings (``control.policies``): what each scenario knob
becomes, for the simulator and the live controller alike."""

from __future__ import annotations

import pytest

from gpufleet.config import Scenario
from gpufleet.control import policies


@pytest.mark.parametrize(("knobs", "placement"), [
    ({}, "fgd-strand"),  # DEFAULT_POLICY, the packing policy
    ({"packing": False}, "spread"),
    ({"placement": "bestfit"}, "bestfit"),
    ({"placement": "bestfit", "packing": False}, "bestfit"),  # an explicit name wins
])
def test_placement_name(knobs: dict, placement: str) -> None:
    sc = Scenario(name="t", **knobs)
    assert policies.placement_name(sc) == placement
    assert policies.placement_policy(sc).name == placement


def test_each_policy_carries_the_scenario_numbers() -> None:
    sc = Scenario(name="t", pending_gpu_threshold=3.0, max_pending_wait_s=45.0,
                  scale_down_unneeded_s=120.0, utilization_threshold=0.4,
                  multi_node_consolidation=False, starvation_s=77.0, spot=True,
                  provisioning_delay_s=30.0, checkpointing=False)
    up = policies.scale_up_policy(sc)
    assert (up.gpu_threshold, up.max_wait_s) == (3.0, 45.0)
    down = policies.disruption_policy(sc)
    assert (down.unneeded_s, down.utilization_threshold, down.consolidation,
            down.multi_node) == (120.0, 0.4, True, False)
    assert not policies.disruption_policy(sc, consolidation=False).consolidation
    off = sc.model_copy(update={"consolidation": False})
    assert not policies.disruption_policy(off).consolidation  # the scenario's off stays off
    assert policies.backfill_pass(sc).starvation_s == 77.0
    g = policies.guard_config(sc)
    assert (g.autoscaling, g.checkpointing, g.provisioning_delay_s,
            g.max_pending_wait_s) == (True, False, 30.0, 45.0)
    assert policies.spot_strategy(sc) is not None
    assert policies.spot_strategy(sc.model_copy(update={"spot": False})) is None


@pytest.mark.parametrize(("spot", "deadline_policy", "on"), [
    (True, "default", True), (True, None, False), (False, "default", False),
])
def test_deadline_guards_switch(spot: bool, deadline_policy: str | None, on: bool) -> None:
    sc = Scenario(name="t", spot=spot, deadline_policy=deadline_policy)
    assert policies.deadline_guards_on(sc) is on
    assert (policies.deadline_policy(sc) is not None) is on


def test_the_simulator_controls_are_built_from_the_same_functions() -> None:
    sc = Scenario(name="t", placement="bestfit", max_pending_wait_s=45.0)
    ctl = policies.controls_for(sc)
    assert ctl.placement.name == "bestfit"
    assert ctl.scale_up == policies.scale_up_policy(sc)
    assert ctl.disruption == policies.disruption_policy(sc)
    assert ctl.guards == policies.guard_config(sc)
    assert ctl.scan.cfg == policies.scan_config(sc)
