"""The one path that terminates a node: every termination the capacity loop makes goes through
:meth:`Terminator.terminate`.

Who asks, and with what reason (the ``gpufleet_terminations_total{reason}`` label):

* **emptiness** (scale-down): a gpufleet Node with no pod left for ``scale_down_unneeded_s`` —
  cordoned first, so nothing lands on it between the decision and the delete (the
  ``Terminate``'s reason, e.g. ``empty``);
* **drained** (the drain's ``Terminate``, after an interruption or a consolidation emptied the
  Node): ``interruption`` or ``consolidation`` (read from the Node's mark);
* **failed launch**: an instance whose Node did not register within ``registration_timeout_s``
  (``registration-timeout``) or a gpufleet instance with neither record nor Node (``leak``) —
  an instance and no Node;
* **instance gone**: a gpufleet Node whose instance was reclaimed or deleted outside gpufleet —
  a Node and no instance (nothing to count: gpufleet deleted no instance).

The order is the same for all: cordon (if asked), delete the instances through the provider
(deleting one already going is no error), forget the Node's idle clocks (a new Node may reuse
the name), delete the Node. Each step is idempotent, so a retry after a crash is harmless.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from kubernetes.client.exceptions import ApiException

from gpufleet.cloud.provider import CloudProvider, Instance, InstanceState
from gpufleet.decisions import Cordon, Terminate
from gpufleet.k8s.capacity.metrics import CapacityMetrics
from gpufleet.k8s.disruption.drain import apply_cordon, delete_node
from gpufleet.k8s.translate import names

log = logging.getLogger(__name__)

GONE = (InstanceState.TERMINATING, InstanceState.TERMINATED)


class Terminator:
    def __init__(self, core: Any, provider: CloudProvider, metrics: CapacityMetrics,
                 forget: Callable[[str], None]) -> None:
        self.core = core
        self.provider = provider
        self.metrics = metrics
        self.forget = forget  # the idle clocks of a Node that goes

    def terminate(self, reason: str, *, node: str | None = None,
                  instances: Sequence[Instance] = (), cordon: bool = False) -> None:
        """Terminate ``node`` (its Node object, if any) and ``instances`` (its instances, if
        any): the module docstring's order."""
        if cordon and node is not None:
            apply_cordon(self.core, Cordon(node, reason))
        for inst in instances:
            self.provider.delete(inst.instance_id)
            self.metrics.terminations.labels(reason=reason).inc()
            log.info("deleted instance %s%s (%s)", inst.instance_id,
                     f" of node {node}" if node else "", reason)
        if node is not None:
            self.forget(node)
            delete_node(self.core, Terminate(node, reason))

    def terminate_drained(self, t: Terminate) -> None:
        """The drain's ``Terminate`` for a drained Node: its instance (only one of gpufleet's:
        ``list`` returns no other) found by the Node's provider id, or by name for a provider
        whose instance id is the Node's name; the reason ``consolidation`` for a Node the
        consolidation marked, else ``interruption``."""
        pid = None
        reason = "interruption"
        try:
            obj = self.core.read_node(t.node)
            pid = obj.spec.provider_id if obj.spec is not None else None
            if names.ANN_CONSOLIDATION in (obj.metadata.annotations or {}):
                reason = "consolidation"
        except ApiException as exc:
            if exc.status != 404:
                raise
        mine = [i for i in self.provider.list() if i.state not in GONE
                and ((pid and i.provider_id == pid) or i.instance_id == t.node)]
        self.terminate(reason, node=t.node, instances=mine)
