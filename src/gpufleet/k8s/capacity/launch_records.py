"""Launch records: a launch is written to the API *before* the cloud is asked for it.

One ConfigMap ``gpufleet-launch-<token>`` per instance launched, in the controller's namespace,
labelled ``gpufleet.io/launch-record=true``; its name carries the client token the provider is
called with. A controller killed between writing the record and hearing the cloud's answer (or
before asking at all) finds the record on restart and asks again *with the same token*: the
provider returns the instance it already made, so nothing is launched twice and nothing is lost.
A record is deleted once its Node registered, the instance was deleted, or the launch gave up.

ConfigMaps rather than a CRD: the lab and any cluster have them, RBAC is one rule, and the record
is a handful of strings (Karpenter's NodeClaim plays this part there).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpufleet.cloud.provider import TAG_MANAGED, TAG_MIG_CONFIG, TAG_TOKEN, LaunchRequest
from gpufleet.decisions import CapacityType
from gpufleet.k8s.translate import names

PREFIX = "gpufleet-launch-"
LABEL = names.LAUNCH_RECORD_LABEL


def new_token() -> str:
    """A client token: DNS-label safe, unique per launched instance."""
    return f"gf-{uuid.uuid4().hex[:16]}"


@dataclass(frozen=True, slots=True)
class LaunchRecord:
    token: str
    instance_type: str
    zone: str
    capacity_type: CapacityType
    created_at: float  # epoch seconds the record was written
    max_price: Decimal | None = None
    mig_config: str | None = None

    def request(self) -> LaunchRequest:
        """The provider call this record stands for (always the same for one record)."""
        tags = {TAG_MANAGED: "true", TAG_TOKEN: self.token}
        if self.mig_config:
            tags[TAG_MIG_CONFIG] = self.mig_config
        return LaunchRequest(self.token, (self.instance_type,), (self.zone,),
                             self.capacity_type, self.max_price, tags)

    def to_data(self) -> dict[str, str]:
        d = {"token": self.token, "instance_type": self.instance_type, "zone": self.zone,
             "capacity_type": str(self.capacity_type), "created_at": repr(self.created_at)}
        if self.max_price is not None:
            d["max_price"] = str(self.max_price)
        if self.mig_config:
            d["mig_config"] = self.mig_config
        return d

    @classmethod
    def from_data(cls, d: dict[str, str]) -> LaunchRecord:
        return cls(d["token"], d["instance_type"], d["zone"], CapacityType(d["capacity_type"]),
                   float(d["created_at"]),
                   Decimal(d["max_price"]) if d.get("max_price") else None,
                   d.get("mig_config") or None)


class LaunchRecords:
    """The records in one namespace (module doc)."""

    def __init__(self, core: client.CoreV1Api, namespace: str) -> None:
        self.core = core
        self.namespace = namespace

    def write(self, rec: LaunchRecord) -> None:
        body = client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=PREFIX + rec.token,
                                         labels={LABEL: "true", TAG_TOKEN: rec.token}),
            data=rec.to_data())
        try:
            self.core.create_namespaced_config_map(self.namespace, body)
        except ApiException as exc:
            if exc.status != 409:  # already written (a retried write): same token, same launch
                raise

    def list(self) -> list[LaunchRecord]:
        items: list[Any] = self.core.list_namespaced_config_map(
            self.namespace, label_selector=f"{LABEL}=true").items
        out = []
        for cm in items:
            try:
                out.append(LaunchRecord.from_data(dict(cm.data or {})))
            except (KeyError, ValueError):
                continue  # not ours / hand-edited: ignored, never guessed at
        return sorted(out, key=lambda r: (r.created_at, r.token))

    def delete(self, token: str) -> None:
        try:
            self.core.delete_namespaced_config_map(PREFIX + token, self.namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
