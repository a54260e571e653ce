"""The cloud provider contract: what the live capacity controller needs from a cloud.

Karpenter's CloudProvider shape, cut to what gpufleet uses: create / delete / list instances,
the offerings (type × zone × capacity type, with a price and whether capacity is there now), and
the interruption events the cloud announces. Three implementations: ``kwok`` (the lab: a launch
becomes a KWOK Node after the provisioning delay, reclaims replay the spot traces), ``aws``
(boto3: EC2 Fleet + the SQS queue EventBridge feeds) and ``aliyun`` (the ECS SDK).

Rules every implementation keeps, because the controller relies on them:

* ``create`` is idempotent on ``LaunchRequest.client_token``: the same token never launches a
  second instance (EC2 and ECS ``ClientToken``; kwok keys its Node by the token). A controller
  that crashed between "asked the cloud" and "recorded the answer" asks again with the same token
  and gets the same instance back.
* Every instance gpufleet launches carries ``TAG_MANAGED`` and ``TAG_TOKEN``; ``list`` returns
  only those, so a shared account's other machines are never touched.
* An expected "no" (no capacity in any offered pool, a price over the limit) is data —
  ``CapacityShortage`` — not an exception; exceptions are for bugs and infrastructure faults.
  A missing or invalid credential raises ``CredentialsError`` (one line, exit 2; never logged).
* ``delete`` of an instance that is already gone or going is not an error.
* ``provider_id`` is what the Node's ``spec.providerID`` carries: ``aws:///<zone>/<id>``,
  ``alicloud://<region>.<id>``, ``kwok://<node-name>``; Node ↔ instance are joined on it.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum
from typing import Protocol, runtime_checkable

from gpufleet.decisions import CapacityType
from gpufleet.errors import InputError

TAG_MANAGED = "gpufleet.io/managed"  # value "true"
TAG_TOKEN = "gpufleet.io/client-token"
TAG_NODEPOOL = "gpufleet.io/nodepool"
# the mig-manager config a launch boots with (``Launch.mig_config``): how a booting instance is
# known to be a MIG node before its Node registers
TAG_MIG_CONFIG = "gpufleet.io/mig-config"


class CredentialsError(InputError):
    """No usable credential in the provider's standard chain (env, profile, instance role).

    The message names the chain that was searched and never contains a secret."""


class InstanceState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    TERMINATING = "terminating"
    TERMINATED = "terminated"


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    """One instance to launch. ``instance_types`` and ``zones`` are the acceptable pools, best
    first (EC2 Fleet takes them all as overrides and chooses; a provider without that loops);
    ``max_price`` is the spot price limit where the strategy sets one (None: capped at
    on-demand)."""

    client_token: str
    instance_types: tuple[str, ...]
    zones: tuple[str, ...]
    capacity_type: CapacityType
    max_price: Decimal | None = None
    tags: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Instance:
    instance_id: str
    provider_id: str
    instance_type: str
    zone: str
    capacity_type: CapacityType
    state: InstanceState
    launched_at: float  # epoch seconds
    client_token: str = ""
    tags: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CapacityShortage:
    """No pool of the request could launch now; ``pools`` are the (type, zone) pairs tried."""

    request: LaunchRequest
    reason: str
    pools: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Offering:
    instance_type: str
    zone: str
    capacity_type: CapacityType
    price_per_hour: Decimal
    available: bool = True


class InterruptionKind(StrEnum):
    SPOT_INTERRUPTION = "spot-interruption"  # the instance goes at ``deadline``
    REBALANCE = "rebalance-recommendation"  # elevated risk: replace before it is reclaimed
    STATE_CHANGE = "state-change"  # stopped / terminated outside gpufleet
    SCHEDULED = "scheduled-change"  # maintenance


@dataclass(frozen=True, slots=True)
class Interruption:
    """An announced loss of an instance. ``receipt`` lets the provider acknowledge the message
    (SQS receipt handle) once the controller has recorded it on the Node — not before, so a
    crash in between re-delivers it."""

    instance_id: str
    kind: InterruptionKind
    deadline: float | None = None  # epoch seconds when the instance goes, if known
    receipt: str | None = None


@runtime_checkable
class CloudProvider(Protocol):
    name: str

    def create(self, request: LaunchRequest) -> Instance | CapacityShortage: ...

    def delete(self, instance_id: str) -> None: ...

    def list(self) -> list[Instance]: ...

    # From here on ``list`` in this class body is the method above: the type is builtins.list
    # (so in every provider class).

    def offerings(self) -> builtins.list[Offering]: ...

    def interruptions(self) -> builtins.list[Interruption]: ...

    def acknowledge(self, event: Interruption) -> None: ...
