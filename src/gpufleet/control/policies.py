"""The control layer as a scenario configures it: the policies, strategies and clocks a run uses,
built from the scenario's knobs — once, for both drivers.

A scenario (``gpufleet.config.Scenario``) is the simulator's configuration and the live
controller's ``--config``; the same file must give the same policies in both, so each policy is
built here and nowhere else (the simulator takes :func:`controls_for`; the live scheduler
:func:`placement_policy` and :func:`backfill_pass`, its capacity loop :func:`scale_up_policy`,
:func:`disruption_policy`, :func:`spot_strategy` and :func:`guard_config`). Nothing here decides
anything: it only maps names and numbers to the constructors (unknown names fail in their
registries, listing the valid ones).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpufleet.config import Scenario
from gpufleet.control.deadline import DeadlineGuards, GuardConfig
from gpufleet.control.gang_room import GangRoomSettings
from gpufleet.control.headroom import Headroom, HeadroomSettings
from gpufleet.control.scan import ScanClock, ScanConfig
from gpufleet.control.spot_swap import SwapSettings
from gpufleet.market.bidding import SpotStrategy, get_spot_strategy
from gpufleet.market.deadline import DEFAULT_DEADLINE_POLICY, DeadlinePolicy, get_deadline_policy
from gpufleet.placement import DEFAULT_POLICY, get_policy
from gpufleet.placement.policy import Policy
from gpufleet.placement.typical import TypicalLearner
from gpufleet.provisioning import DisruptionPolicy, ScaleUpPolicy
from gpufleet.queueing import BackfillPass
from gpufleet.recovery import IntervalPolicy, get_recovery_strategy
from gpufleet.recovery.strategies import RecoveryStrategy
from gpufleet.traces.jobs import JobSpec


def placement_name(sc: Scenario) -> str:
    """``placement`` when set, else the packing policy, or ``spread`` with ``packing: false``."""
    return sc.placement or (DEFAULT_POLICY if sc.packing else "spread")


def placement_policy(sc: Scenario, tie_seed: int | None = None) -> Policy:
    """``tie_seed``: a fixed seeded node order for score ties (the live scheduler's; the
    simulator draws ties from its run's RNG)."""
    return get_policy(placement_name(sc), tie_seed=tie_seed)


def backfill_pass(sc: Scenario) -> BackfillPass:
    return BackfillPass(sc.starvation_s)


def scale_up_policy(sc: Scenario) -> ScaleUpPolicy:
    return ScaleUpPolicy(sc.pending_gpu_threshold, sc.max_pending_wait_s,
                         provisioning_delay_s=sc.provisioning_delay_s)


def disruption_policy(sc: Scenario, *, consolidation: bool | None = None) -> DisruptionPolicy:
    """The scenario's disruption methods; ``consolidation=False``: emptiness alone (what the
    live loop runs between consolidation looks, where nothing needs to be moved)."""
    on = sc.consolidation if consolidation is None else consolidation and sc.consolidation
    return DisruptionPolicy(sc.scale_down_unneeded_s, sc.utilization_threshold, on,
                            multi_node=sc.multi_node_consolidation)


def spot_strategy(sc: Scenario) -> SpotStrategy | None:
    """The spot zone strategy, on a fleet that uses spot (None: on-demand only)."""
    return get_spot_strategy(sc.spot_strategy) if sc.spot else None


def gang_room_settings(sc: Scenario) -> GangRoomSettings | None:
    """What pricing a pending gang's room reads from the scenario; None: not priced."""
    if not sc.gang_room:
        return None
    return GangRoomSettings(sc.autoscaling, sc.provisioning_delay_s, sc.scale_down_unneeded_s)


def spot_swap_settings(sc: Scenario) -> SwapSettings | None:
    """The on-demand → spot swap, where the scenario asks for it, can launch spot and
    checkpoints: a swap moves only pods that checkpoint (``control.views.pod_view``), so
    without checkpointing it would walk every on-demand node each look and move nothing."""
    if not (sc.spot_swap and sc.spot and sc.autoscaling and sc.checkpointing):
        return None
    return SwapSettings()


def headroom_on(sc: Scenario) -> bool:
    """Whether the scenario keeps a spare-GPU buffer: asked for, on an autoscaled fleet."""
    return sc.headroom and sc.autoscaling


def headroom(sc: Scenario) -> Headroom | None:
    """The spare-GPU buffer where ``headroom_on``; its horizon is the time a new node takes to
    be asked for and to boot."""
    if not headroom_on(sc):
        return None
    return Headroom(HeadroomSettings(sc.provisioning_delay_s + sc.scan_interval_s))


def guard_config(sc: Scenario) -> GuardConfig:
    return GuardConfig(sc.autoscaling, sc.checkpointing, sc.provisioning_delay_s,
                       sc.max_pending_wait_s)


def scan_config(sc: Scenario) -> ScanConfig:
    return ScanConfig(sc.autoscaling, sc.scan_interval_s, sc.scale_down_unneeded_s,
                      sc.max_pending_wait_s, sc.consolidation, sc.consolidation_recheck_s)


def deadline_guards_on(sc: Scenario) -> bool:
    """Whether deadline jobs are guarded: a spot fleet with a ``deadline_policy``."""
    return bool(sc.spot and sc.deadline_policy)


def deadline_policy(sc: Scenario) -> DeadlinePolicy | None:
    """The deadline controller's policy where the scenario asks for one on a spot fleet."""
    if not deadline_guards_on(sc) or sc.deadline_policy is None:
        return None
    name = sc.deadline_policy
    return get_deadline_policy(DEFAULT_DEADLINE_POLICY if name == "default" else name)


@dataclass(slots=True)
class Controls:
    """One simulated run's control layer (``typical``: FGD's typical tasks, learned from
    arrivals only, never the trace)."""

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
    gang_room: GangRoomSettings | None = None
    spot_swap: SwapSettings | None = None
    headroom: Headroom | None = None


def controls_for(sc: Scenario) -> Controls:
    """The control layer ``sc`` switches on."""
    return Controls(
        placement=placement_policy(sc),
        typical=TypicalLearner(),
        recovery=get_recovery_strategy(sc.recovery),
        interval=IntervalPolicy(),
        scale_up=scale_up_policy(sc),
        disruption=disruption_policy(sc),
        spot_strategy=spot_strategy(sc),
        backfill=backfill_pass(sc),
        scan=ScanClock(scan_config(sc)),
        guards=guard_config(sc),
        gang_room=gang_room_settings(sc),
        spot_swap=spot_swap_settings(sc),
        headroom=headroom(sc),
    )


def deadline_guards(
    sc: Scenario, jobs: Iterable[JobSpec], has_market: bool, gap_s: float, cfg: GuardConfig,
) -> DeadlineGuards | None:
    """The deadline controller, where the scenario asks for one on a spot market and some job
    is interruptible with a deadline; ``gap_s``: its tick."""
    policy = deadline_policy(sc)
    if policy is None or not has_market:
        return None
    if not any(s.deadline_s is not None and s.interruptible for s in jobs):
        return None
    return DeadlineGuards(policy, gap_s, cfg)
