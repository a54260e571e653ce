"""The control layer as a scenario configures it: the policies, strategies and controllers a run
uses, built from the scenario's knobs.

A scenario is the simulator's configuration; a live controller reads the same knobs from its own
and builds the same objects. Nothing here decides anything: it only maps names and numbers to
the control layer's and the policies' constructors (unknown names fail in their registries,
listing the valid ones).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpufleet.config import Scenario
from gpufleet.control.deadline import DeadlineGuards, GuardConfig
from gpufleet.control.scan import ScanClock, ScanConfig
from gpufleet.market.bidding import SpotStrategy, get_spot_strategy
from gpufleet.placement import DEFAULT_POLICY, get_policy
from gpufleet.placement.policy import Policy
from gpufleet.placement.typical import TypicalLearner
from gpufleet.provisioning import DisruptionPolicy, ScaleUpPolicy
from gpufleet.queueing import BackfillPass
from gpufleet.recovery import IntervalPolicy, get_recovery_strategy
from gpufleet.recovery.strategies import RecoveryStrategy
from gpufleet.traces.jobs import JobSpec


@dataclass(slots=True)
class Controls:
    """One run's control layer (``typical``: FGD's typical tasks, learned from arrivals only,
    never the trace)."""

    placement: Policy
    typical: TypicalLearner
    recovery: RecoveryStrategy
    interval: IntervalPolicy
    scale_up: ScaleUpPolicy
    disruption: DisruptionPolicy
    spot_strategy: SpotStrategy | None
    backfill: BackfillPass
    scan: ScanClock
    guards: GuardConfig


def controls_for(sc: Scenario) -> Controls:
    """The control layer ``sc`` switches on."""
    return Controls(
        placement=get_policy(sc.placement or (DEFAULT_POLICY if sc.packing else "spread")),
        typical=TypicalLearner(),
        recovery=get_recovery_strategy(sc.recovery),
        interval=IntervalPolicy(),
        scale_up=ScaleUpPolicy(sc.pending_gpu_threshold, sc.max_pending_wait_s),
        disruption=DisruptionPolicy(sc.scale_down_unneeded_s, sc.utilization_threshold,
                                    sc.consolidation, multi_node=sc.multi_node_consolidation),
        spot_strategy=get_spot_strategy(sc.spot_strategy) if sc.spot else None,
        backfill=BackfillPass(sc.starvation_s),
        scan=ScanClock(ScanConfig(sc.autoscaling, sc.scan_interval_s, sc.scale_down_unneeded_s,
                                  sc.max_pending_wait_s, sc.consolidation,
                                  sc.consolidation_recheck_s)),
        guards=GuardConfig(sc.autoscaling, sc.checkpointing, sc.provisioning_delay_s,
                           sc.max_pending_wait_s),
    )


def deadline_guards(
    sc: Scenario, jobs: Iterable[JobSpec], has_market: bool, gap_s: float, cfg: GuardConfig,
) -> DeadlineGuards | None:
    """The deadline controller, where the scenario asks for one on a spot market and some job
    is interruptible with a deadline; ``gap_s``: its tick."""
    if not (sc.spot and sc.deadline_policy and has_market):
        return None
    if not any(s.deadline_s is not None and s.interruptible for s in jobs):
        return None
    from gpufleet.market.deadline import DEFAULT_DEADLINE_POLICY, get_deadline_policy

    name = sc.deadline_policy
    policy = get_deadline_policy(DEFAULT_DEADLINE_POLICY if name == "default" else name)
    return DeadlineGuards(policy, gap_s, cfg)
