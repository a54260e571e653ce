"""The capacity loop's ``gpufleet_*`` metrics, and what one reconcile did (tests and logs read
it)."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRATION_BUCKETS = (1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 900)


class CapacityMetrics:
    """``gpufleet_*`` capacity metrics, on the controller's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.launches = Counter("gpufleet_launches", "Instances launched",
                                ["capacity_type", "instance_type"], registry=r)
        self.launch_failures = Counter("gpufleet_launch_failures",
                                       "Launches the cloud refused or that were given up",
                                       ["reason"], registry=r)
        self.terminations = Counter("gpufleet_terminations", "Instances gpufleet deleted",
                                    ["reason"], registry=r)
        self.interruptions = Counter("gpufleet_interruption_notices",
                                     "Interruption notices that marked a Node", ["kind"],
                                     registry=r)
        self.registration = Histogram("gpufleet_node_registration_duration_seconds",
                                      "Launch to Node registered", buckets=REGISTRATION_BUCKETS,
                                      registry=r)
        self.in_flight = Gauge("gpufleet_launches_in_flight",
                               "Launched instances whose Node has not registered", registry=r)
        self.consolidations = Counter(
            "gpufleet_consolidations",
            "Consolidation commands by method and outcome (proposed, started, invalid, "
            "replacement-failed, abandoned)", ["method", "outcome"], registry=r)


@dataclass
class ReconcileReport:
    """What one reconcile did."""

    launched: list[str] = field(default_factory=list)  # tokens
    resumed: list[str] = field(default_factory=list)  # records created again after a restart
    registered: list[str] = field(default_factory=list)
    timed_out: list[str] = field(default_factory=list)  # instance ids
    leaked: list[str] = field(default_factory=list)
    terminated: list[str] = field(default_factory=list)  # node names (emptiness)
    interrupted: list[str] = field(default_factory=list)  # node names this loop marked
    consolidating: list[str] = field(default_factory=list)  # node names marked for the drain
    abandoned: list[str] = field(default_factory=list)  # consolidations undone (uncordoned)
