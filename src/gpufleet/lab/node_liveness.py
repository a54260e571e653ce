"""How the lab's fake nodes stay alive, sized to the fleet so that 1,213 nodes become Ready.

A kubelet proves its node alive by renewing the node's Lease every quarter of the lease
duration (40 s → every 10 s); KWOK does the same for each node it manages. At 1,213 nodes that
is 121 Lease writes a second, forever — on a 2-core machine with kine/SQLite as storage that
saturates the API server, and the first Leases (each node needs one before KWOK will manage it,
then a status write to mark it Ready) queue behind the renewals: the openb fleet was half Ready
after 300 s. So the lab stretches the lease with the fleet: renewals stay at most
``MAX_RENEWALS_PER_S`` a second, and kube-controller-manager's ``--node-monitor-grace-period``
(how long without a renewal before a node turns Unknown) keeps kubelet's ratio to the lease
(50 s for 40 s), and so does ``--node-startup-grace-period`` (60 s): a node KWOK has not reached
yet would otherwise be marked Unknown and tainted unreachable by the controller-manager — three
more Node writes each, for KWOK to undo — which is how a slow start became a slower one. Small
labs — the tests' — keep the defaults. (The lab also turns off the controller-manager's TTL
controller, which re-annotates every Node as the fleet grows: ``gpufleet.lab.cluster``.)

KWOK's worker pools (lease, node-stage and pod-stage parallelism, 4 each by default) are
raised too: with a few thousand objects to bring up at once the API server, not KWOK, should
be what they wait for. KWOK has no client rate limit of its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

KUBELET_LEASE_S = 40  # kubelet's default --node-lease-duration-seconds
KUBELET_GRACE_RATIO = 50 / 40  # kube-controller-manager's --node-monitor-grace-period / lease
STARTUP_GRACE_RATIO = 60 / 40  # its --node-startup-grace-period / lease
MAX_RENEWALS_PER_S = 10.0
KWOK_PARALLELISM = 16


@dataclass(frozen=True, slots=True)
class Liveness:
    lease_s: int  # KWOK's --node-lease-duration-seconds (renewed every quarter of it)
    grace_s: int  # kube-controller-manager's --node-monitor-grace-period
    startup_grace_s: int  # kube-controller-manager's --node-startup-grace-period


def liveness_for(nodes: int) -> Liveness:
    """Lease duration and grace period for ``nodes`` KWOK nodes (kubelet's for small fleets)."""
    lease = max(KUBELET_LEASE_S, math.ceil(4 * nodes / MAX_RENEWALS_PER_S))
    return Liveness(lease_s=lease, grace_s=math.ceil(lease * KUBELET_GRACE_RATIO),
                    startup_grace_s=math.ceil(lease * STARTUP_GRACE_RATIO))


def renewals_per_s(nodes: int, liveness: Liveness) -> float:
    """Lease writes a second KWOK makes to keep ``nodes`` nodes alive."""
    return nodes / (liveness.lease_s / 4)


def kwok_configuration() -> dict[str, Any]:
    """The ``KwokConfiguration`` document for KWOK's ``--config`` (next to the Stages)."""
    return {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokConfiguration",
        "options": {
            "nodeLeaseParallelism": KWOK_PARALLELISM,
            "nodePlayStageParallelism": KWOK_PARALLELISM,
            "podPlayStageParallelism": KWOK_PARALLELISM,
        },
    }
