"""The drain's driver: plan (:func:`gpufleet.k8s.drain.plan_drain`), apply, time recoveries.

Nodes marked for consolidation (:mod:`gpufleet.k8s.consolidation`) go through the same cycle:
the plan cordons, evicts and hands them to ``terminate`` once empty.

Called once per leader cycle by the controller with the informers' objects; it keeps no state
about nodes (the plan is re-derived from the API each time), only the recovery clock's owners.
Evictions go through the controller's :class:`~gpufleet.k8s.apply.Applier` (the same Eviction
call, grace period and event as preemption); ``Terminate`` goes to ``terminate`` — the capacity
controller's applier when there is one, else deleting the Node object.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpufleet.decisions import Terminate
from gpufleet.k8s.apply import ApiErrors, Applier
from gpufleet.k8s.drain import DEFAULT_DRAIN_S, apply_cordon, delete_node, plan_drain, pod_key
from gpufleet.k8s.recovery_clock import RecoveryClock
from gpufleet.k8s.telemetry import ControllerMetrics

log = logging.getLogger(__name__)

# what a provider raises for an infrastructure fault (cloud.aws.AwsApiError and
# cloud.aliyun.AliyunError are RuntimeErrors; urllib3/socket faults are OSErrors): logged, and the
# marked Node — still marked — is terminated again on a later cycle
PROVIDER_FAULTS = (RuntimeError, OSError)


class Drainer:
    def __init__(self, core: Any, applier: Applier, metrics: ControllerMetrics, *,
                 default_drain_s: float = DEFAULT_DRAIN_S,
                 terminate: Callable[[Terminate], Any] | None = None,
                 on_recovery: Callable[[list[float]], Any] | None = None) -> None:
        self.core = core
        self.applier = applier
        self.metrics = metrics
        self.default_drain_s = default_drain_s
        self.terminate = terminate or (lambda t: delete_node(core, t))
        self.on_recovery = on_recovery
        self.clock = RecoveryClock()

    def cycle(self, nodes: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]],
              now: float) -> list[str]:
        """One pass over the marked Nodes; returns the keys of the pods evicted now."""
        plan = plan_drain(nodes, pods, now, self.default_drain_s)
        self.clock.note(plan.marked, pods)
        recovered = self.clock.observe(pods, now)
        for seconds in recovered:
            self.metrics.recovery.observe(seconds)
        if recovered and self.on_recovery is not None:
            self.on_recovery(recovered)
        for c in plan.cordon:
            try:
                apply_cordon(self.core, c)
            except ApiErrors as exc:  # the next cycle tries again
                log.warning("cordon %s: %s", c.node, exc)
        evicted: list[str] = []
        if plan.evict:
            by_key = {pod_key(p): p for p in pods}
            evicted = self.applier.apply(list(plan.evict), by_key).evicted
        for t in plan.terminate:
            try:
                self.terminate(t)
            except (*ApiErrors, *PROVIDER_FAULTS) as exc:
                log.warning("terminate %s: %s", t.node, exc)
                continue
            if t.node in plan.marked:  # an interrupted node (a consolidated one is not)
                self.metrics.drained.inc()
        return evicted
