"""What the provisioning policies see: pending pods for scale-up, nodes and pods for disruption.

A ``PendingPod`` is a queued job's replica as it asks now (a job pinned to on-demand no longer
tolerates spot) and whether its deadline cannot wait for scale-up's trigger (``urgent``).

A ``NodeView`` reads the node's free room from ``FleetState`` (the snapshot every driver keeps)
and takes from the driver only what the snapshot does not hold: the node's shape, price and
since when it has been empty or underused, and its pods. Whether a pod may be moved is a rule,
so it is decided here (``pod_view``), not in a driver.
"""

from __future__ import annotations

from collections.abc import Callable

from gpufleet.control.admission import (
    request_now,
    request_on_spot,
    spot_ok_now,
    tolerates_spot,
)
from gpufleet.control.deadline import GuardConfig, movable, urgent
from gpufleet.control.value_of_time import latency_sensitive, value_of_time
from gpufleet.market.spot_cost import SpotRisk
from gpufleet.provisioning import NodeShape, NodeView, PendingPod, PodView
from gpufleet.state import FleetState, ResourceRequest
from gpufleet.traces.jobs import JobSpec


def pending_pods(
    spec: JobSpec, req: ResourceRequest, on_demand_only: bool, waited_s: float, work_s: float,
    interrupted: bool, now: float, cfg: GuardConfig, spot_only: bool = False,
    max_node_gpus: int | None = None,
) -> list[PendingPod]:
    """One ``PendingPod`` per replica of a queued job (``work_s``: work already done), with
    what a reclaim would cost it (``spot_risk``) where it may go to spot.
    ``spot_only``: its team's budget says so (``control.teams.Gate.SPOT``): it asks for spot
    and only spot is launched for it, whatever pin it had. ``max_node_gpus``: the largest
    node it may use (``control.right_size``)."""
    ask = request_on_spot(req) if spot_only else request_now(req, on_demand_only)
    hurry = urgent(spec, work_s, interrupted, now, cfg)
    ok = tolerates_spot(ask)
    risk = spot_risk(spec, work_s, interrupted, now, cfg.checkpointing) if ok else None
    # distinct objects: scale-up tells replicas apart by identity
    return [PendingPod(spec.job_id, ask, ok, waited_s, hurry, spec.replicas,
                       spot_only=spot_only, risk=risk, max_node_gpus=max_node_gpus)
            for _ in range(spec.replicas)]


def spot_risk(
    spec: JobSpec, work_s: float, interrupted: bool, now: float, checkpointing: bool
) -> SpotRisk:
    """The job's side of the spot cost rule (``market.spot_cost``): work left, whether it can
    checkpoint on this fleet, its checkpoint and restart costs and its deadline slack (deadline
    − now − work left − the restart overhead it already owes after an interruption), and its
    price of delay (``control.value_of_time``)."""
    left = max(0.0, spec.duration_s - work_s)
    slack = None
    if spec.deadline_s is not None:
        slack = spec.deadline_s - now - left - (spec.restart_overhead_s if interrupted else 0.0)
    return SpotRisk(left, spec.checkpoint_cost_s, spec.restart_overhead_s,
                    spec.checkpointable and checkpointing, slack, value_of_time(spec),
                    latency_sensitive(spec))


def pod_view(
    spec: JobSpec, req: ResourceRequest, on_demand_only: bool,
    done_s: float | Callable[[], float], checkpoint_cost_s: float, now: float, cfg: GuardConfig,
) -> PodView:
    """A running job as consolidation sees it: movable only if it is a single checkpointing
    pod whose move cannot cost its deadline (``deadline.movable``); spot-tolerant as it asks
    now (a job pinned to on-demand is not). ``done_s``: its work done, or what works it out
    (asked only for a deadline job: the simulator's views are many and most jobs have none)."""
    return PodView(spec.job_id, req, may_move(spec, done_s, checkpoint_cost_s, now, cfg),
                   spot_ok_now(req, on_demand_only))


def may_move(
    spec: JobSpec, done_s: float | Callable[[], float], checkpoint_cost_s: float, now: float,
    cfg: GuardConfig,
) -> bool:
    """``pod_view``'s ``movable``: a single checkpointing pod, not latency-sensitive
    (``control.value_of_time``: never moved for the fleet's sake — by consolidation, the spot
    swap or a gang's eviction, which all ask this), whose move cannot cost its deadline."""
    return (spec.checkpointable and spec.replicas == 1 and cfg.checkpointing
            and not spec.latency_sensitive
            and movable(spec, done_s, checkpoint_cost_s, now, cfg))


def may_swap(
    spec: JobSpec, req: ResourceRequest, on_demand_only: bool,
    done_s: float | Callable[[], float], checkpoint_cost_s: float, now: float, cfg: GuardConfig,
) -> bool:
    """What the spot swap asks of each pod of a candidate (``control.spot_swap``, step 1):
    ``pod_view``'s ``movable and spot_ok``, without building the view — the simulator asks
    it of every candidate node on every scan, and most candidates fail on their first pod.
    The cheap spot test comes first; the deadline test (which may work out ``done_s``)
    last."""
    return spot_ok_now(req, on_demand_only) and may_move(spec, done_s, checkpoint_cost_s,
                                                         now, cfg)


def node_view(
    state: FleetState, name: str, shape: NodeShape, spot: bool, usd_per_hour: float,
    pods: tuple[PodView, ...] | None, empty_since: float | None = None,
    underused_since: float | None = None,
) -> NodeView:
    """The node ``name`` as of ``state``. ``pods`` None: a node that can only receive pods (not
    a candidate), so its pods are not listed and it counts as neither empty nor underused — a
    shortcut that keeps consolidation cheap on large fleets."""
    row = state.index[name]
    g = shape.gpus
    mig_kw: dict[str, tuple[int, ...]] = {}
    if shape.mig:
        mig_kw = dict(mig_used=tuple(state.mig_used[row, :g].tolist()),
                      mig_compute_used=tuple(state.mig_compute_used[row, :g].tolist()))
    if pods is None:
        return NodeView(name, shape, spot, tuple(state.free_milli[row, :g].tolist()),
                        int(state.cpu_free[row]), int(state.mem_free[row]), (), None, None,
                        **mig_kw, usd_per_hour=usd_per_hour)
    return NodeView(name, shape, spot, tuple(state.free_milli[row, :g].tolist()),
                    int(state.cpu_free[row]), int(state.mem_free[row]), pods, empty_since,
                    underused_since, **mig_kw, usd_per_hour=usd_per_hour)
