"""DeadlineGuards' decisions, hand-worked.

Settings throughout: provisioning 180 s, scale-up wait trigger 60 s, availability gap 100 s, a
1,000 s job with 120 s restart overhead submitted at t = 0.
"""

from __future__ import annotations

from gpufleet.control.deadline import (
    MOVE_REASON,
    DeadlineGuards,
    DeadlineView,
    GuardConfig,
    movable,
    spot_reference_type,
    urgent,
)
from gpufleet.decisions import CapacityType, Pin, Preempt
from gpufleet.market.deadline import get_deadline_policy
from gpufleet.state import ResourceRequest
from gpufleet.traces.jobs import JobSpec

CFG = GuardConfig(autoscaling=True, checkpointing=True, provisioning_delay_s=180.0,
                  max_pending_wait_s=60.0)


def _spec(deadline: float, checkpointable: bool = True) -> JobSpec:
    return JobSpec("j", 0.0, 1000.0, ResourceRequest(num_gpu=1), deadline_s=deadline,
                   checkpointable=checkpointable, restart_overhead_s=120.0)


def _pending(spec: JobSpec, on_demand_only: bool = False) -> DeadlineView:
    return DeadlineView(spec, pending=True, running=False, on_demand_only=on_demand_only,
                        on_spot=False, done_s=0.0)


def _guards(policy: str = "greedy", cfg: GuardConfig = CFG) -> DeadlineGuards:
    return DeadlineGuards(get_deadline_policy(policy), 100.0, cfg)


def test_job_without_checkpoints_is_pinned_at_arrival_once_a_rerun_would_not_fit() -> None:
    # rerun fits while deadline - now >= 2*1000 + 120 + 180 = 2300
    g = _guards()
    assert g.on_arrival(0, _pending(_spec(2300.0, False)), 0.0) == []
    tight = _spec(2299.0, checkpointable=False)
    assert g.on_arrival(1, _pending(tight), 0.0) == [
        Pin("j", CapacityType.ON_DEMAND, "deadline: rerun would not fit")]
    # hopeless (1000 + 180 > 1100): only freed capacity can save it, so it is not narrowed
    assert g.on_arrival(2, _pending(_spec(1100.0, False)), 0.0) == []
    assert g.live == {0, 1, 2} and g.arrivals_to_check() == []


def test_a_fixed_fleet_never_pins() -> None:
    fixed = GuardConfig(False, True, 180.0, 60.0)
    g = _guards(cfg=fixed)
    assert g.on_arrival(0, _pending(_spec(1300.0, False)), 0.0) == []
    running = DeadlineView(_spec(1300.0), False, True, False, True, 0.0)
    assert _guards("on_demand", fixed).tick({0: running}, 0.0, True, 1.0, 3.0) == []


def test_safety_net_at_arrival_pins_a_job_whose_slack_is_one_overhead() -> None:
    # R = 1300; T2 = ceil((1000 + 240) / 100) * 100 = 1300 >= R: on-demand. At D = 1500: wait.
    g = _guards()
    loose, tight = _spec(1500.0), _spec(1300.0)
    assert g.on_arrival(0, _pending(loose), 0.0) == []
    assert g.on_arrival(1, _pending(tight), 0.0) == []
    assert g.arrivals_to_check() == [0, 1]
    views = {0: _pending(loose), 1: _pending(tight)}
    net = Pin("j", CapacityType.ON_DEMAND, "deadline: safety net")
    assert g.check_arrivals(views, 0.0) == [net]
    assert g.arrivals_to_check() == []


def test_controller_pin_of_a_job_running_on_spot_also_moves_it() -> None:
    g = _guards("on_demand")
    running = DeadlineView(_spec(5000.0), False, True, False, True, 200.0)
    out = g.tick({0: running}, 300.0, True, 1.0, 3.0)
    assert out == [Pin("j", CapacityType.ON_DEMAND, "deadline: controller"),
                   Preempt("j", MOVE_REASON)]
    assert g.controlled(0)
    # already pinned: nothing more to say
    pinned = DeadlineView(_spec(5000.0), True, False, True, False, 200.0)
    assert g.tick({0: pinned}, 400.0, True, 1.0, 3.0) == []


def test_spot_choice_unpins_a_pending_job() -> None:
    g = _guards("greedy")  # spot while available, and far from the deadline
    pinned = DeadlineView(_spec(50_000.0), True, False, True, False, 0.0)
    assert g.tick({0: pinned}, 0.0, True, 1.0, 3.0) == [Pin("j", None, "deadline: spot again")]


def test_urgent_movable_and_reference_type() -> None:
    # urgent: deadline - now < remaining + overhead + 180 + 60
    assert urgent(_spec(1239.0), 0.0, False, 0.0, CFG)
    assert not urgent(_spec(1240.0), 0.0, False, 0.0, CFG)
    assert urgent(_spec(1300.0), 0.0, True, 0.0, CFG)  # + 120 s restart after an interruption
    spec = JobSpec("x", 0.0, 1000.0, ResourceRequest(num_gpu=1))
    assert not urgent(spec, 0.0, True, 0.0, CFG) and movable(spec, 0.0, 30.0, 0.0, CFG)
    # move: 30 + 180 + 120 + (1000 - 400) = 930
    assert movable(_spec(1330.0), 400.0, 30.0, 400.0, CFG)
    assert not movable(_spec(1329.0), 400.0, 30.0, 400.0, CFG)
    assert spot_reference_type({"p3.8xlarge": 4, "p3.2xlarge": 1, "g4dn": 1}) == "g4dn"
    assert spot_reference_type({}) is None


def test_pending_pin_level_triggered_case_table() -> None:
    """``pending_pin`` at t = 0 for the module's 1,000 s job (restart 120 s, provisioning 180 s,
    gap 100 s). Rerun rule (no checkpoints): spot while deadline ≥ 2·1,000 + 120 + 180 = 2,300;
    hopeless below 180 + 1,000 = 1,180 (never pinned). Checkpointing jobs: the safety net."""
    from gpufleet.control.deadline import pending_pin

    fixed = GuardConfig(autoscaling=False, checkpointing=True, provisioning_delay_s=180.0,
                        max_pending_wait_s=60.0)
    rows = [
        # (name, deadline, checkpointable, on_demand_only, pending, cfg, pinned?)
        ("rerun fits exactly: 2,300", 2300.0, False, False, True, CFG, False),
        ("rerun does not fit: 2,299", 2299.0, False, False, True, CFG, True),
        ("not hopeless at 1,180", 1180.0, False, False, True, CFG, True),
        ("hopeless at 1,179: left alone", 1179.0, False, False, True, CFG, False),
        ("already pinned", 2000.0, False, True, True, CFG, False),
        ("running: not a pending question", 2000.0, False, False, False, CFG, False),
        ("fixed fleet: no pin", 2000.0, False, False, True, fixed, False),
        ("checkpointing, loose deadline: net waits", 100_000.0, True, False, True, CFG, False),
        ("checkpointing, hopeless", 1000.0, True, False, True, CFG, False),
    ]
    for name, deadline, ckpt, pinned, pending, cfg, want in rows:
        v = DeadlineView(_spec(deadline, checkpointable=ckpt), pending=pending,
                         running=not pending, on_demand_only=pinned, on_spot=False, done_s=0.0)
        got = pending_pin(v, 0.0, cfg, 100.0)
        assert (got is not None) is want, name
        if got is not None:
            assert got == Pin("j", CapacityType.ON_DEMAND, "deadline: rerun would not fit")


def test_pending_pin_checkpointing_job_agrees_with_check_arrivals() -> None:
    """The level-triggered question gives the simulator's arrival answer for a checkpointing
    job, deadline by deadline (the safety net at its first tick)."""
    from gpufleet.control.deadline import pending_pin

    for deadline in (1200.0, 1300.0, 1400.0, 1500.0, 1700.0, 2000.0, 5000.0):
        v = _pending(_spec(deadline))
        g = _guards()
        g.on_arrival(0, v, 0.0)
        sim = g.check_arrivals({0: v}, 0.0)
        live = pending_pin(v, 0.0, CFG, 100.0)
        assert sim == ([live] if live is not None else []), deadline
