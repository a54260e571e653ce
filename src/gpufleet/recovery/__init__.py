"""Recovery: what an interrupted job does next, and how often it checkpoints."""

from gpufleet.recovery.exposure import SpotExposure, checkpoint_interval
from gpufleet.recovery.interval import IntervalPolicy, young_daly
from gpufleet.recovery.strategies import (
    DEFAULT_RECOVERY,
    NoticeView,
    get_recovery_strategy,
    list_recovery_strategies,
)

__all__ = [
    "DEFAULT_RECOVERY",
    "IntervalPolicy",
    "NoticeView",
    "SpotExposure",
    "checkpoint_interval",
    "get_recovery_strategy",
    "list_recovery_strategies",
    "young_daly",
]
