"""The scan clock: grid alignment, de-duplication, and when scale-up and disruption are due."""

from __future__ import annotations

from gpufleet.control.scan import Disrupt, ScanClock, ScanConfig


def clock(autoscaling: bool = True, consolidation: bool = True) -> ScanClock:
    return ScanClock(ScanConfig(autoscaling=autoscaling, interval_s=10.0, unneeded_s=600.0,
                                max_pending_wait_s=60.0, consolidation=consolidation,
                                recheck_s=300.0))


def test_scans_land_on_the_grid_once() -> None:
    c = clock()
    assert c.demand(3.0) == 10.0
    assert c.demand(4.0) is None  # already scheduled at 10
    assert c.node_empty(50.0, fallback=False) == 650.0
    c.fired(10.0)
    assert c.want(10.0, 10.0) == 10.0  # fired: may be asked for again


def test_a_fixed_fleet_scans_only_for_an_empty_fallback_node() -> None:
    c = clock(autoscaling=False)
    assert c.demand(3.0) is None
    assert c.node_ready(3.0) is None
    assert c.node_gone(3.0) is None
    assert c.node_underused(3.0) is None
    assert c.node_empty(25.0, fallback=False) is None
    assert c.node_empty(25.0, fallback=True) == 30.0


def test_a_deferred_swap_look_comes_one_interval_later() -> None:
    """``swap_deferred``: a scan at 650 whose disruption acted scans again at 660, as the live
    loop's next cycle would; a fixed fleet (no swap there) schedules nothing."""
    c = clock()
    c.fired(650.0)
    assert c.swap_deferred(650.0) == 660.0
    assert c.swap_deferred(650.0) is None  # 660 already scheduled
    assert c.swap_deferred(651.0) == 670.0  # 661 lands on the grid at 670
    assert clock(autoscaling=False).swap_deferred(650.0) is None


def test_scale_up_runs_on_new_demand_or_when_the_wait_trigger_may_fire() -> None:
    c = clock()
    assert c.scale_up_due(10.0, pending=True)
    assert not c.scale_up_due(20.0, pending=True)  # nothing changed since
    assert c.scale_up_due(70.0, pending=True)  # a pod may have crossed the 60 s trigger
    c.demand(75.0)
    assert not c.scale_up_due(80.0, pending=False)
    assert c.scale_up_due(80.0, pending=True)


def test_consolidation_waits_for_something_new_and_the_recheck_interval() -> None:
    c = clock()
    assert c.disruption_due(100.0, [], [0.0]) == (Disrupt.NONE, None)  # not unneeded long
    assert c.disruption_due(600.0, [], [0.0]) == (Disrupt.UNDERUSED, None)
    # same candidates, no pod moved: nothing new to try; look again a recheck from now
    assert c.disruption_due(610.0, [], [0.0]) == (Disrupt.NONE, 910.0)
    assert c.disruption_due(610.0, [], [0.0]) == (Disrupt.NONE, None)  # already scheduled
    c.pod_moved()
    kind, rescan = c.disruption_due(620.0, [], [0.0])
    assert kind is Disrupt.NONE and rescan == 920.0  # new, but tried at 600: too soon
    assert c.disruption_due(900.0, [], [0.0]) == (Disrupt.UNDERUSED, None)
    assert c.disruption_due(620.0, [0.0], [0.0])[0] is Disrupt.EMPTY


def test_consolidation_off_only_empties() -> None:
    c = clock(consolidation=False)
    assert c.disruption_due(700.0, [], [0.0]) == (Disrupt.NONE, None)
    assert c.disruption_due(700.0, [0.0], [])[0] is Disrupt.EMPTY


def test_after_a_scan_a_stranded_pod_is_looked_at_when_the_trigger_fires() -> None:
    c = clock()
    assert c.after_scan(100.0, pending=False, more_work=True, queued_s=lambda: [0.0]) is None
    assert c.after_scan(100.0, pending=True, more_work=True, queued_s=lambda: [0.0]) == 110.0
    c.scale_up_due(100.0, pending=True)
    # below the threshold, nothing under way: when the oldest pod (queued at 90) waited 60 s
    assert c.after_scan(100.0, True, False, lambda: [90.0]) == 160.0
    assert c.after_scan(200.0, True, False, lambda: [90.0]) is None  # trigger long past
    # an older pod whose trigger fired long ago (scale-up does not launch for it: its team's
    # quota holds it) does not strand a younger one: the younger's trigger, 7,143 + 60
    assert c.after_scan(7150.0, True, False, lambda: [231.0, 7143.0]) == 7210.0  # the grid


def test_consolidation_look_needs_something_new_and_the_recheck_interval() -> None:
    """``ConsolidationLook`` (recheck 300 s): each row is one question, in order, to one look
    clock — (now, nodes due, a pod left a node just before) → looks? Worked by hand: a look
    needs due > 0, something new since the last look (a pod moved, or more nodes due than
    then) and ≥ 300 s since the last look; a look resets "pod moved" and remembers the count."""
    from gpufleet.control.scan import ConsolidationLook

    look = ConsolidationLook(300.0)
    rows = [
        (0.0, 0, False, False),  # nothing due
        (10.0, 1, False, True),  # first look (pods_moved starts True)
        (20.0, 1, False, False),  # nothing new, too soon
        (400.0, 1, False, False),  # interval passed but nothing new (the old live rule looked)
        (410.0, 1, True, True),  # a pod left, 400 s since the look at 10
        (420.0, 2, False, False),  # more due, but 10 s since the last look (old live: looked)
        (710.0, 2, False, True),  # more due than at 410 (2 > 1), 300 s since: look
        (1100.0, 1, True, True),  # fewer due, but a pod left: look
        (1200.0, 0, True, False),  # a pod left but nothing is due
        (1400.0, 1, False, True),  # pod_moved was kept from 1200 (no look consumed it)
    ]
    for now, due_n, moved, want in rows:
        if moved:
            look.pod_moved()
        assert look.due(now, due_n) is want, now
    # the simulator rescans a recheck after now (not after the last look): 1450 + 300
    assert look.next_at(1450.0) == 1750.0 and look.next_at(1300.0) == 1700.0
