"""What scale-up and disruption see: pending pods per replica, movable pods, node room."""

from __future__ import annotations

import pytest

from gpufleet.control.admission import SPOT_TAINT, request_now, spot_ok_now, tolerates_spot
from gpufleet.control.deadline import GuardConfig
from gpufleet.control.views import may_move, may_swap, node_view, pending_pods, pod_view
from gpufleet.provisioning import NodeShape
from gpufleet.state import FleetState, ResourceRequest
from gpufleet.traces.jobs import JobSpec

CFG = GuardConfig(autoscaling=True, checkpointing=True, provisioning_delay_s=120.0,
                  max_pending_wait_s=60.0)
REQ = ResourceRequest(cpu_milli=1000, memory_mib=1024, num_gpu=1,
                      tolerations=frozenset({SPOT_TAINT}))


def spec(**kw: object) -> JobSpec:
    return JobSpec(**{"job_id": "j", "submit_s": 0.0, "duration_s": 3600.0, "request": REQ,
                      **kw})  # type: ignore[arg-type]


def test_one_distinct_pod_per_replica_as_the_job_asks_now() -> None:
    pods = pending_pods(spec(replicas=3), REQ, False, 30.0, 0.0, False, 30.0, CFG)
    assert len(pods) == 3 and len({id(p) for p in pods}) == 3  # scale-up tells them apart
    assert all(p.spot_ok and p.gang_size == 3 and p.waited_s == 30.0 for p in pods)
    (pinned,) = pending_pods(spec(), REQ, True, 0.0, 0.0, False, 0.0, CFG)
    assert not pinned.spot_ok and SPOT_TAINT not in pinned.request.tolerations


def test_urgent_when_the_deadline_cannot_wait_for_the_trigger_and_a_boot() -> None:
    tight = spec(deadline_s=3600.0 + 100.0)
    assert pending_pods(tight, REQ, False, 0.0, 0.0, False, 0.0, CFG)[0].urgent
    loose = spec(deadline_s=3 * 3600.0)
    assert not pending_pods(loose, REQ, False, 0.0, 0.0, False, 0.0, CFG)[0].urgent


def test_only_single_checkpointing_pods_move() -> None:
    assert pod_view(spec(), REQ, False, 0.0, 30.0, 0.0, CFG).movable
    assert not pod_view(spec(replicas=2), REQ, False, 0.0, 30.0, 0.0, CFG).movable
    assert not pod_view(spec(checkpointable=False), REQ, False, 0.0, 30.0, 0.0, CFG).movable
    off = GuardConfig(True, False, 120.0, 60.0)
    assert not pod_view(spec(), REQ, False, 0.0, 30.0, 0.0, off).movable
    # a deadline the move would cost (checkpoint + restart + boot) keeps the pod where it is
    assert not pod_view(spec(deadline_s=3700.0), REQ, False, 0.0, 30.0, 0.0, CFG).movable


def test_work_done_is_asked_only_for_a_deadline_job() -> None:
    """``done_s`` may be what works it out: a job without a deadline never asks it; a deadline
    job asks once, and its answer decides (3,600 s of work, deadline 3,700 s: with 3,500 s done
    the 100 s left + the move's 30 + restart + 120 s boot fit before 3,700 s from now = 0)."""
    asked: list[int] = []

    def done(value: float) -> float:
        asked.append(1)
        return value

    assert pod_view(spec(), REQ, False, lambda: done(0.0), 30.0, 0.0, CFG).movable
    assert asked == []
    tight = spec(deadline_s=3700.0)
    assert not pod_view(tight, REQ, False, lambda: done(0.0), 30.0, 0.0, CFG).movable
    assert pod_view(tight, REQ, False, lambda: done(3500.0), 30.0, 0.0, CFG).movable
    assert asked == [1, 1]


NO_SPOT = ResourceRequest(cpu_milli=1000, memory_mib=1024, num_gpu=1)
TIGHT = 3700.0  # 3,600 s of work, none done: 100 s of slack, less than a move costs


@pytest.mark.parametrize(
    ("kw", "req", "pinned", "swap"),
    [
        ({}, REQ, False, True),                      # one checkpointing replica, tolerates spot
        ({}, REQ, True, False),                      # pinned to on-demand: no spot any more
        ({}, NO_SPOT, False, False),                 # its request never tolerated spot
        ({"replicas": 2}, REQ, False, False),        # a gang does not move
        ({"checkpointable": False}, REQ, False, False),
        ({"deadline_s": TIGHT}, REQ, False, False),  # the move would cost the deadline
        ({"deadline_s": 3 * 3600.0}, REQ, False, True),
        # latency-sensitive: never swapped nor consolidated, whatever its value of time
        ({"latency_sensitive": True}, REQ, False, False),
        ({"latency_sensitive": True, "value_of_time_usd_per_gpu_hour": 50.0}, REQ, False,
         False),
        ({"latency_sensitive": False, "value_of_time_usd_per_gpu_hour": 50.0}, REQ, False,
         True),  # a value of time alone does not pin it: the swap's payback prices it
    ],
)
def test_may_swap_is_the_views_movable_and_spot_ok(
    kw: dict[str, object], req: ResourceRequest, pinned: bool, swap: bool
) -> None:
    """The spot swap's per-pod test, asked without building a view, is ``pod_view``'s
    ``movable and spot_ok`` case by case; ``spot_ok_now`` is the pinned request's
    toleration without building it."""
    job = spec(**kw)
    view = pod_view(job, req, pinned, 0.0, 30.0, 0.0, CFG)
    assert may_swap(job, req, pinned, 0.0, 30.0, 0.0, CFG) is swap
    assert (view.movable and view.spot_ok) is swap
    assert spot_ok_now(req, pinned) == tolerates_spot(request_now(req, pinned)) == view.spot_ok


def test_may_swap_asks_the_work_done_only_when_the_pod_could_go() -> None:
    """A pod that cannot go to spot is refused before its deadline test works out the work
    done (the simulator asks this of every candidate node on every scan)."""
    asked: list[int] = []

    def done() -> float:
        asked.append(1)
        return 0.0

    assert not may_swap(spec(deadline_s=TIGHT), REQ, True, done, 30.0, 0.0, CFG)
    assert asked == []
    assert not may_swap(spec(deadline_s=TIGHT), REQ, False, done, 30.0, 0.0, CFG)
    assert asked == [1]


def test_node_view_reads_the_room_from_the_snapshot() -> None:
    state = FleetState()
    state.add_node("n", gpu_model="V100-16GB", num_gpus=2, cpu_milli=16000, memory_mib=65536,
                   gpu_memory_mib=16384)
    shape = NodeShape("V100-16GB", 2, 16000, 65536, 16384)
    pod = pod_view(spec(), REQ, False, 0.0, 30.0, 0.0, CFG)
    v = node_view(state, "n", shape, True, 6.12, (pod,), None, 5.0)
    assert v.free_milli == (1000, 1000) and v.cpu_free == 16000 and v.pods == (pod,)
    assert v.underused_since == 5.0 and v.usd_per_hour == 6.12 and v.allocation == 0.0
    room = node_view(state, "n", shape, True, 6.12, None, 1.0, 5.0)
    assert room.pods == () and room.empty_since is None and room.underused_since is None


def test_the_spot_risk_carries_the_jobs_price_of_delay() -> None:
    (plain,) = pending_pods(spec(), REQ, False, 0.0, 0.0, False, 0.0, CFG)
    assert plain.risk is not None
    assert (plain.risk.value_of_time, plain.risk.latency_sensitive) == (0.0, False)
    job = spec(value_of_time_usd_per_gpu_hour=12.5, latency_sensitive=True)
    (dear,) = pending_pods(job, REQ, False, 0.0, 0.0, False, 0.0, CFG)
    assert dear.risk is not None
    assert (dear.risk.value_of_time, dear.risk.latency_sensitive) == (12.5, True)


def test_a_latency_sensitive_pod_is_never_moved() -> None:
    """``may_move`` is what consolidation, the swap and a gang's eviction ask."""
    assert may_move(spec(), 0.0, 30.0, 0.0, CFG)
    assert not may_move(spec(latency_sensitive=True), 0.0, 30.0, 0.0, CFG)
    assert not pod_view(spec(latency_sensitive=True), REQ, False, 0.0, 30.0, 0.0, CFG).movable
