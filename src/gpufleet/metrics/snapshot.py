"""The one value the simulator (and later the live controller) hands to the metrics layer.

A snapshot is a plain, immutable record of "what the fleet looks like now" so that producers
never import prometheus_client and exporters never reach into simulator internals. GPU samples
use dcgm-exporter's vocabulary (MiB, percent, MHz, watts) because they are exported verbatim
under DCGM_FI_* names; fleet-level fields are in dollars and seconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One physical GPU, or one MIG instance of it when ``mig_profile`` is set."""

    hostname: str
    gpu: int
    uuid: str
    model_name: str
    util_pct: float
    mem_copy_util_pct: float
    fb_used_mib: float
    fb_free_mib: float
    temp_c: float
    power_w: float
    sm_clock_mhz: float
    xid_errors: int
    mig_profile: str | None = None
    mig_id: int | None = None


@dataclass(frozen=True, slots=True)
class NodeSample:
    """One node (instance) of the fleet, whatever its lifecycle state."""

    name: str
    instance_type: str
    zone: str
    capacity_type: str  # "spot" | "on-demand"
    state: str  # "provisioning" | "ready" | "draining"
    gpu_model: str
    gpus: int
    allocated_milli: int


@dataclass(frozen=True)
class FleetSnapshot:
    """Fleet state at ``time_s`` (simulated seconds from trace start).

    ``recovery_seconds`` holds only the recoveries completed since the previous snapshot, so a
    consumer can feed them into a histogram exactly once; every other field is a level or a
    monotonically growing total.
    """

    time_s: float
    gpus: tuple[GpuSample, ...]
    nodes: tuple[NodeSample, ...]
    jobs_pending: Mapping[tuple[str, str], int]  # (tenant, gpu_shape) -> count
    jobs_running: Mapping[tuple[str, str], int]
    spot_interruptions_total: int
    recovery_seconds: tuple[float, ...]
    cost_usd_total_by_tenant: Mapping[str, float]
    cost_usd_per_hour_by_tenant: Mapping[str, float]
    fragmentation_ratio: float  # 0..1
