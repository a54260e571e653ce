"""Team budgets in the simulator (``control.cycle`` step 6 and ``control.teams`` through
``sim.jobs``), worked by hand.

Autoscaled g4dn.xlarge fleet (1 T4, on-demand $0.526/h; 180 s to boot, scans every 10 s, the
first at 60 s when the 60-s wait trigger fires), spot from the price process. Team ``a`` has a
budget of $0.50 a day (look-ahead one hour). Two non-interruptible 1-GPU jobs: j1 (t = 0, 2 h)
and j2 (t = 600, 1 h) — without a budget both run on on-demand nodes, j1 from 240, j2 from 840.

j1's node is launched at 60 and j1 bound at 240: from then a pays $0.526/h (alone on the node).
At 600 a has spent 0.526 × 360 / 3600 = $0.0526, and 0.0526 + 0.526 × 1 h ≥ 0.50: the budget is
*low* when j2 arrives, so a's action applies to j2:

* ``spot-only``: j2 tolerates spot and may use only spot; scale-up launches a spot node for it
  (at 660, ready 840) and j2 runs there — j1 stays on on-demand (running work is untouched);
* ``hold``: j2 waits; no node is launched for it; at midnight (86,400 s) the day's budget
  renews with nothing running (rate 0: ok), a scan launches a node, j2 binds at 86,580. Day 1:
  j1's 2 h × $0.526 = $1.052 (the peak period), so the overspend is $0.552 = 1.049 h of the
  $0.526/h rate at which the hold applied.
* ``hold-and-drain`` (j1 and j2 checkpoint in 30 s): j2 is held as under ``hold``; j1 keeps
  running until the day's budget is spent: $0.50 at $0.526/h from 240 is 3,422.05 s, so the
  pass the simulator schedules at the next whole second (``exhaustion_s``), 3,663, evicts it;
  it writes its checkpoint and leaves at 3,693 (day 1: $0.526 × 3,453 s = $0.5045). At
  midnight both bind (86,580, two nodes: $1.052/h), spend $0.50 by 86,580 + ⌈1,711.03⌉ =
  88,292 and are drained again, leaving at 88,322 (day 2: $1.052 × 1,742 s = $0.5090, the
  peak); the same on day 3; j2 (1 h of work, 1,712 s a day) and j1 finish on day 4. Nothing
  is lost (every eviction saves first) and no day overspends by more than a checkpoint write.

``spot-only`` where there is no spot (a fixed fleet of one on-demand g4dn.xlarge, spot off; a's
budget $0.05 a day, 342 s of the node): j0 (0, 1 h) runs; j1 (400, 60 s) may use only spot, of
which there is none. It waits for the period to renew, as a held job does: at midnight the
budget is fresh, and j1 runs from 86,400 to 86,460 — without a pass at the renewal it would wait
for ever and the run would end without it.
"""

from __future__ import annotations

import pytest

from gpufleet.config import default_scenario
from gpufleet.queueing.teams.settings import TeamsSettings
from gpufleet.sim.runner import Simulation
from gpufleet.state import ResourceRequest
from gpufleet.traces.jobs import JobSpec

ONE_T4 = ResourceRequest(cpu_milli=1000, memory_mib=1024, num_gpu=1,
                         gpu_models=frozenset({"T4"}))


def run(action: str | None, ckpt_s: float = 0.0) -> tuple[dict, dict, list]:
    teams = None if action is None else TeamsSettings.model_validate({"queues": [
        {"name": "a", "budget": {"usd": 0.5, "period": "day", "action": action}}]})
    sc = default_scenario().model_copy(update={
        "spot_market": "price", "gpu_mtbf_hours": None, "deadline_policy": None,
        "instance_types": ("g4dn.xlarge",), "teams": teams,
        # the budget's worked timeline alone: no headroom node, no swap
        "headroom": False, "spot_swap": False})
    jobs = [JobSpec("j1", 0.0, 7200.0, ONE_T4, tenant="a", interruptible=False,
                    checkpoint_cost_s=ckpt_s),
            JobSpec("j2", 600.0, 3600.0, ONE_T4, tenant="a", interruptible=False,
                    checkpoint_cost_s=ckpt_s)]
    sim = Simulation(sc, 0, jobs)
    s = sim.run()
    assert s["jobs_lost"] == 0
    by = {j.spec.job_id: j for j in sim.sim.jobs}
    return s, by, list(sim.sim.cloud.nodes.values())


def test_without_a_budget_both_run_on_demand() -> None:
    _, by, nodes = run(None)
    assert (by["j1"].first_start_s, by["j2"].first_start_s) == (240.0, 840.0)
    assert not by["j2"].on_spot and not any(n.spot for n in nodes)


def test_spot_only_flips_new_work_to_spot() -> None:
    s, by, nodes = run("spot-only")
    assert not by["j1"].on_spot  # running work untouched
    assert by["j2"].on_spot and by["j2"].first_start_s == 840.0
    assert [(n.spot, n.launched_s) for n in nodes] == [(False, 60.0), (True, 660.0)]
    a = s["teams"]["per_team"]["a"]
    assert a["budget_action"] == "spot-only" and a["overspend_usd"] > 0  # spot-only is no cap


def test_notify_changes_nothing_but_reports() -> None:
    s, by, nodes = run("notify")
    assert (by["j1"].first_start_s, by["j2"].first_start_s) == (240.0, 840.0)
    assert not any(n.spot for n in nodes)
    a = s["teams"]["per_team"]["a"]
    # j1 2 h + j2 1 h on their own nodes at $0.526/h, all on day 1
    assert a["spend_usd"] == pytest.approx(3 * 0.526)
    assert a["budget_peak_spend_usd"] == pytest.approx(3 * 0.526)


def test_hold_keeps_new_work_pending_until_the_period_renews() -> None:
    s, by, nodes = run("hold")
    assert by["j1"].first_start_s == 240.0 and by["j1"].finish_s == 7440.0
    assert by["j2"].first_start_s == 86580.0 and not by["j2"].on_spot
    # no node was bought for the held job before midnight
    assert [n.launched_s for n in nodes] == [60.0, 86400.0]
    a = s["teams"]["per_team"]["a"]
    assert a["budget_peak_spend_usd"] == pytest.approx(2 * 0.526)
    assert a["spend_usd"] == pytest.approx(3 * 0.526)
    assert a["overspend_usd"] == pytest.approx(2 * 0.526 - 0.5)
    assert a["overspend_hours"] == pytest.approx((2 * 0.526 - 0.5) / 0.526)
    assert a["queue_mean_s"] == pytest.approx((240 + 86580 - 600) / 2)


def test_hold_and_drain_evicts_running_work_once_the_budget_is_spent() -> None:
    s, by, nodes = run("hold-and-drain", ckpt_s=30.0)
    day = 86400.0
    assert by["j1"].first_start_s == 240.0 and by["j2"].first_start_s == day + 180
    assert (by["j1"].interruptions, by["j2"].interruptions) == (3, 2)  # days 1–3 / 2–3
    assert all(3 * day < (by[j].finish_s or 0) < 4 * day for j in ("j1", "j2"))
    # j2 was held on day 1 and no node was bought for it then; two a day from day 2 on
    assert [n.launched_s for n in nodes] == [60.0, day, day, 2 * day, 2 * day, 3 * day,
                                             3 * day]
    assert s["jobs_lost"] == 0 and s["lost_gpu_hours"] == 0.0
    a = s["teams"]["per_team"]["a"]
    peak = 2 * 0.526 * 1742 / 3600  # day 2 (and 3): both, 86,580 → 88,322
    assert a["budget_peak_spend_usd"] == pytest.approx(peak)
    assert a["overspend_usd"] == pytest.approx(peak - 0.5)
    # one checkpoint write's spend, against hold's 1.049 h: the overspend is bounded
    assert a["overspend_hours"] is not None and a["overspend_hours"] < 0.02


def test_spot_only_without_spot_waits_for_the_period_to_renew() -> None:
    teams = TeamsSettings.model_validate({"queues": [{"name": "a", "budget": {
        "usd": 0.05, "period": "day", "action": "spot-only"}}]})
    sc = default_scenario().model_copy(update={
        "autoscaling": False, "spot": False, "fixed_nodes": 1, "gpu_mtbf_hours": None,
        "instance_types": ("g4dn.xlarge",), "teams": teams})
    jobs = [JobSpec("j0", 0.0, 3600.0, ONE_T4, tenant="a"),
            JobSpec("j1", 400.0, 60.0, ONE_T4, tenant="a")]
    sim = Simulation(sc, 0, jobs)
    s = sim.run()
    assert s["jobs_finished"] == 2 and s["jobs_lost"] == 0
    j0, j1 = sim.sim.jobs
    assert (j0.first_start_s, j0.finish_s) == (0.0, 3600.0)
    assert (j1.first_start_s, j1.finish_s) == (86400.0, 86460.0)
