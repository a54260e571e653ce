"""Scale-down: disruption methods behind one Protocol, tried in an ordered list (Karpenter).

``policy`` holds the ordered, commented list and :class:`DisruptionPolicy` (what the driver
calls); one module per method (``emptiness``, ``single_node``, ``multi_node``); ``method`` the
:class:`DisruptionMethod` Protocol; ``command`` the :class:`Command` and its re-validation;
``views`` what the methods read; ``room`` where moved pods can go.
"""

from gpufleet.provisioning.disruption.command import Command
from gpufleet.provisioning.disruption.emptiness import Emptiness
from gpufleet.provisioning.disruption.method import DisruptionMethod
from gpufleet.provisioning.disruption.multi_node import MultiNodeConsolidation
from gpufleet.provisioning.disruption.policy import DisruptionPolicy
from gpufleet.provisioning.disruption.single_node import SingleNodeConsolidation
from gpufleet.provisioning.disruption.views import DisruptionSnapshot, NodeView, PodView

__all__ = [
    "Command",
    "DisruptionMethod",
    "DisruptionPolicy",
    "DisruptionSnapshot",
    "Emptiness",
    "MultiNodeConsolidation",
    "NodeView",
    "PodView",
    "SingleNodeConsolidation",
]
