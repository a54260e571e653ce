"""The lab's cloud: a launch becomes a KWOK Node after the provisioning delay; spot capacity and
reclaims replay the spot availability traces through the simulator's market model.

Everything this provider knows lives in the API server, never only in memory, so a controller
killed at any point (and the provider with it) finds the same instances after a restart:

* a **pending launch** is a ConfigMap ``kwok-pending-<token>`` (labels ``gpufleet.io/kwok-pending``,
  ``TAG_TOKEN``) holding the instance's type, zone, capacity type and when it becomes a Node;
  any later call turns due ones into Nodes (create, 409 tolerated) and deletes the ConfigMap;
* a **running instance** is a Node named ``kwok-<token>`` (so ``create`` is idempotent on the
  token: the name is the token), built by :func:`gpufleet.k8s.translate.node_objects.node_object` —
  the device plugin's capacity, GFD's labels, ``karpenter.sh/capacity-type``, zone, instance type,
  the KWOK annotation, ``spec.providerID: kwok://<node-name>`` — plus ``TAG_*`` labels; a spot
  Node carries the ``karpenter.sh/capacity-type=spot:NoSchedule`` taint so only pods that
  tolerate spot (``control.admission``'s rule) land on it; where the cluster's GPUs are DRA
  devices (NVIDIA's DeviceClass installed) the Node also gets its ResourceSlices, owned by it,
  as NVIDIA's kubelet plugin publishes them when the node starts — so pending pods with
  ResourceClaims can land on launched nodes;
* the **market clock** is a ConfigMap ``gpufleet-kwok-clock`` (``origin``: epoch seconds of
  market time ``market_start_s``; ``offset_s``: seconds added, for a lab user or a test to jump
  the market forward). Market time = ``market_start_s + (now - origin) × speedup + offset_s``.

A spot Node is reclaimed when its zone's trace drops (``SpotMarket.reclaim_time`` from the market
time it launched at, the simulator's rule): the provider stamps the Node with the reclaim
deadline (annotation ``gpufleet.io/kwok-reclaim-deadline`` = now + ``notice_s``), reports an
``Interruption`` until acknowledged, and deletes the Node at the deadline.
"""

from __future__ import annotations

import builtins
import json
import logging
import time
from collections.abc import Callable, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpufleet.catalog.instances import InstanceType
from gpufleet.cloud.provider import (
    TAG_MANAGED,
    TAG_MIG_CONFIG,
    TAG_TOKEN,
    CapacityShortage,
    Instance,
    InstanceState,
    Interruption,
    InterruptionKind,
    LaunchRequest,
    Offering,
)
from gpufleet.control.admission import spot_taint_object
from gpufleet.decisions import CapacityType
from gpufleet.k8s.dra.slices import GPU_CLASS, nvlink_domains_for, resource_slices
from gpufleet.k8s.translate.node_objects import (
    LABEL_CAPACITY_TYPE,
    LABEL_MIG_CONFIG,
    GpuNodeSpec,
    node_object,
    spec_from_instance,
)
from gpufleet.k8s.watch.connections import release
from gpufleet.market.bidding import ZoneMarket
from gpufleet.market.spot_model import SpotMarket

log = logging.getLogger(__name__)

NODE_PREFIX = "kwok-"
PENDING_PREFIX = "kwok-pending-"
PENDING_LABEL = "gpufleet.io/kwok-pending"
CLOCK_NAME = "gpufleet-kwok-clock"
ANN_LAUNCHED = "gpufleet.io/launched-at"  # epoch seconds
ANN_MARKET_LAUNCHED = "gpufleet.io/kwok-market-launched-at"  # market seconds
ANN_RECLAIM = "gpufleet.io/kwok-reclaim-deadline"  # epoch seconds
ANN_RECLAIM_ACK = "gpufleet.io/kwok-reclaim-acknowledged"
_CONFLICT_RETRIES = 5  # optimistic-concurrency retries on one Node write


def node_name(token: str) -> str:
    """The Node (= instance id) a token becomes: the name *is* the idempotency key."""
    return f"{NODE_PREFIX}{token}"


def _gone(exc: ApiException) -> bool:
    return exc.status == 404


class KwokProvider:
    """``CloudProvider`` for the lab (module doc). ``clock``: epoch seconds (tests pass a fake)."""

    name = "kwok"

    def __init__(
        self,
        core: client.CoreV1Api,
        types: Mapping[str, InstanceType],
        market: SpotMarket | None,
        *,
        namespace: str = "kube-system",
        provisioning_delay_s: float = 0.0,
        notice_s: float = 120.0,
        speedup: float = 1.0,
        market_start_s: float = 0.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.core = core
        self.types = dict(types)
        self.market = market
        self.namespace = namespace
        self.delay_s = provisioning_delay_s
        self.notice_s = notice_s
        self.speedup = speedup
        self.market_start_s = market_start_s
        self.clock = clock
        self._dra_on: bool | None = None  # see _dra

    # -- the market clock ---------------------------------------------------------------------
    def _clock_map(self) -> dict[str, str]:
        try:
            cm = self.core.read_namespaced_config_map(CLOCK_NAME, self.namespace)
            return dict(cm.data or {})
        except ApiException as exc:
            if not _gone(exc):
                raise
        data = {"origin": repr(self.clock()), "offset_s": "0"}
        body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name=CLOCK_NAME), data=data)
        try:
            self.core.create_namespaced_config_map(self.namespace, body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            return dict(self.core.read_namespaced_config_map(CLOCK_NAME, self.namespace).data)
        return data

    def market_now(self) -> float:
        """Seconds into the availability traces now (module doc)."""
        c = self._clock_map()
        elapsed = self.clock() - float(c.get("origin", self.clock()))
        return self.market_start_s + elapsed * self.speedup + float(c.get("offset_s", 0))

    def advance_market(self, seconds: float) -> float:
        """Jump the market clock forward (a lab user's or a test's lever); the new market time."""
        c = self._clock_map()
        c["offset_s"] = repr(float(c.get("offset_s", 0)) + seconds)
        self.core.patch_namespaced_config_map(CLOCK_NAME, self.namespace, {"data": c})
        return self.market_now()

    # -- instances ----------------------------------------------------------------------------
    def _pending(self) -> list[Any]:
        return self.core.list_namespaced_config_map(
            self.namespace, label_selector=f"{PENDING_LABEL}=true").items

    def _nodes(self) -> list[Any]:
        return self.core.list_node(label_selector=f"{TAG_MANAGED}=true").items

    def _materialize(self, pending: list[Any]) -> list[Any]:
        """Turn due pending launches into Nodes; returns the launches still pending."""
        now = self.clock()
        left = []
        for cm in pending:
            d = cm.data or {}
            if float(d["ready_at"]) > now:
                left.append(cm)
                continue
            body = self._node_body(d)
            try:
                self.core.create_node(body=body)
            except ApiException as exc:
                if exc.status != 409:
                    raise
            self._publish_slices(d)
            try:
                self.core.delete_namespaced_config_map(cm.metadata.name, self.namespace)
            except ApiException as exc:
                if not _gone(exc):
                    raise
        return left

    def _spec(self, d: Mapping[str, str]) -> GpuNodeSpec:
        tags: dict[str, str] = json.loads(d.get("tags", "{}"))
        return spec_from_instance(self.types[d["instance_type"]], d["name"], zone=d["zone"],
                                  capacity_type=d["capacity_type"],
                                  mig_config=tags.get(TAG_MIG_CONFIG))

    def _dra(self) -> bool:
        """Whether the cluster's GPUs are DRA devices: NVIDIA's ``gpu.nvidia.com`` DeviceClass
        is installed (``gpufleet lab up`` without ``--classic``). Asked once."""
        if self._dra_on is None:
            try:
                client.ResourceV1Api(self.core.api_client).read_device_class(
                    GPU_CLASS, _preload_content=False)
                self._dra_on = True
            except ApiException as exc:
                if exc.status not in (403, 404):
                    raise
                self._dra_on = False
        return self._dra_on

    def _publish_slices(self, d: Mapping[str, str]) -> None:
        """A new Node's ResourceSlices as NVIDIA's kubelet plugin would publish them when it
        starts (owned by the Node, so they go with it); 409 tolerated, like the Node's."""
        if not self._dra():
            return
        spec = self._spec(d)
        uid = self.core.read_node(d["name"]).metadata.uid
        resource = client.ResourceV1Api(self.core.api_client)
        for body in resource_slices(spec, node_uid=uid,
                                    nvlink_domains=nvlink_domains_for(spec)):
            try:
                release(resource.create_resource_slice(body, _preload_content=False))
            except ApiException as exc:
                if exc.status != 409:
                    raise

    def _node_body(self, d: Mapping[str, str]) -> dict[str, Any]:
        tags: dict[str, str] = json.loads(d.get("tags", "{}"))
        body = node_object(self._spec(d))
        labels = body["metadata"]["labels"]
        labels.update({k: v for k, v in tags.items() if k != TAG_MIG_CONFIG})
        labels[TAG_MANAGED] = "true"
        labels[TAG_TOKEN] = d["token"]
        body["metadata"]["annotations"].update({
            ANN_LAUNCHED: d["launched_at"], ANN_MARKET_LAUNCHED: d["market_launched_at"]})
        if d["capacity_type"] == CapacityType.SPOT:
            body["spec"]["taints"] = [spot_taint_object()]
        return body

    def _instance_of_node(self, node: Any) -> Instance:
        m = node.metadata
        labels = m.labels or {}
        ann = m.annotations or {}
        state = InstanceState.TERMINATING if m.deletion_timestamp else InstanceState.RUNNING
        tags = {k: v for k, v in labels.items() if k.startswith("gpufleet.io/")}
        mig = labels.get(LABEL_MIG_CONFIG, "")
        if mig and mig != "all-disabled":  # the launch's tag, as the Node carries it
            tags[TAG_MIG_CONFIG] = mig
        return Instance(
            instance_id=m.name, provider_id=node.spec.provider_id or f"kwok://{m.name}",
            instance_type=labels.get("node.kubernetes.io/instance-type", ""),
            zone=labels.get("topology.kubernetes.io/zone", ""),
            capacity_type=CapacityType(labels.get(LABEL_CAPACITY_TYPE, "on-demand")),
            state=state, launched_at=float(ann.get(ANN_LAUNCHED, 0.0)),
            client_token=labels.get(TAG_TOKEN, ""),
            tags=tags,
        )

    @staticmethod
    def _instance_of_pending(cm: Any) -> Instance:
        d = cm.data or {}
        return Instance(
            instance_id=d["name"], provider_id=f"kwok://{d['name']}",
            instance_type=d["instance_type"], zone=d["zone"],
            capacity_type=CapacityType(d["capacity_type"]), state=InstanceState.PENDING,
            launched_at=float(d["launched_at"]), client_token=d["token"],
            tags=json.loads(d.get("tags", "{}")),
        )

    def list(self) -> list[Instance]:
        pending = self._materialize(self._pending())
        out = [self._instance_of_node(n) for n in self._nodes()]
        out += [self._instance_of_pending(cm) for cm in pending]
        return sorted(out, key=lambda i: i.instance_id)

    def _find(self, token: str) -> Instance | None:
        name = node_name(token)
        try:
            return self._instance_of_node(self.core.read_node(name))
        except ApiException as exc:
            if not _gone(exc):
                raise
        try:
            cm = self.core.read_namespaced_config_map(PENDING_PREFIX + token, self.namespace)
            return self._instance_of_pending(cm)
        except ApiException as exc:
            if not _gone(exc):
                raise
        return None

    def _pools(self, req: LaunchRequest, mt: float) -> tuple[builtins.list[tuple[str, str]],
                                                          tuple[str, str] | None]:
        tried: list[tuple[str, str]] = []
        for name in req.instance_types:
            it = self.types.get(name)
            if it is None:
                continue
            for zone in req.zones or tuple(it.zones):
                if zone not in it.zones:
                    continue
                tried.append((name, zone))
                if req.capacity_type == CapacityType.ON_DEMAND:
                    return tried, (name, zone)
                m = self.market
                if m is None or zone not in m.zones(name) or not m.available(name, zone, mt):
                    continue
                if req.max_price is not None and m.price(name, zone, mt) > float(req.max_price):
                    continue
                return tried, (name, zone)
        return tried, None

    def create(self, request: LaunchRequest) -> Instance | CapacityShortage:
        self._materialize(self._pending())
        found = self._find(request.client_token)
        if found is not None:
            return found
        mt = self.market_now()
        tried, pool = self._pools(request, mt)
        if pool is None:
            why = ("insufficient spot capacity" if request.capacity_type == CapacityType.SPOT
                   else "no such instance type or zone")
            return CapacityShortage(request, why, tuple(tried))
        now = self.clock()
        name = node_name(request.client_token)
        data = {
            "name": name, "token": request.client_token, "instance_type": pool[0],
            "zone": pool[1], "capacity_type": str(request.capacity_type),
            "launched_at": repr(now), "ready_at": repr(now + self.delay_s),
            "market_launched_at": repr(mt), "tags": json.dumps(dict(request.tags)),
        }
        body = client.V1ConfigMap(
            metadata=client.V1ObjectMeta(
                name=PENDING_PREFIX + request.client_token,
                labels={PENDING_LABEL: "true", TAG_TOKEN: request.client_token}),
            data=data)
        try:
            self.core.create_namespaced_config_map(self.namespace, body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            found = self._find(request.client_token)  # a concurrent create with this token
            if found is not None:
                return found
        self._materialize(self._pending())
        return self._find(request.client_token) or self._instance_of_pending(body)

    def delete(self, instance_id: str) -> None:
        token = instance_id.removeprefix(NODE_PREFIX)
        try:
            self.core.delete_namespaced_config_map(PENDING_PREFIX + token, self.namespace)
        except ApiException as exc:
            if not _gone(exc):
                raise
        try:
            self.core.delete_node(instance_id)
        except ApiException as exc:
            if not _gone(exc):
                raise

    # -- market -------------------------------------------------------------------------------
    def offerings(self) -> builtins.list[Offering]:
        mt = self.market_now()
        out = [Offering(it.name, z, CapacityType.ON_DEMAND, it.usd_per_hour)
               for it in self.types.values() for z in it.zones]
        m = self.market
        if m is not None:
            for name in self.types:
                for z in m.zones(name):
                    out.append(Offering(name, z, CapacityType.SPOT,
                                        Decimal(f"{m.price(name, z, mt):.4f}"),
                                        m.available(name, z, mt)))
        return out

    def markets(self, instance_type: str) -> builtins.list[ZoneMarket]:
        """The simulator's per-zone view (prices, availability history) for the spot strategy:
        the live driver feeds the strategy exactly what the simulator does."""
        if self.market is None or not self.market.zones(instance_type):
            return []
        return self.market.markets(instance_type, self.market_now())

    def reclaim(self, instance_id: str) -> float:
        """Announce a reclaim of ``instance_id`` now (the trace's drop, or a lab user's
        injection): the Node goes at now + ``notice_s``. A second call keeps the first deadline.

        The patch carries the read's resourceVersion, so two announcers cannot both set a
        deadline; a conflict (KWOK's heartbeat or the node lifecycle controller wrote the Node
        in between) re-reads and tries again, a bounded number of times. Returns the deadline
        the Node carries."""
        for _ in range(_CONFLICT_RETRIES):
            node = self.core.read_node(instance_id)
            held = (node.metadata.annotations or {}).get(ANN_RECLAIM)
            if held:
                return float(held)
            deadline = self.clock() + self.notice_s
            patch = {"metadata": {"annotations": {ANN_RECLAIM: repr(deadline)},
                                  "resourceVersion": node.metadata.resource_version}}
            try:
                self.core.patch_node(instance_id, patch)
            except ApiException as exc:
                if exc.status != 409:
                    raise
                continue
            return deadline
        raise RuntimeError(f"kwok: Node {instance_id} kept changing; the reclaim deadline was "
                           f"not written after {_CONFLICT_RETRIES} tries")

    def interruptions(self) -> builtins.list[Interruption]:
        now = self.clock()
        m = self.market
        mt = self.market_now() if m is not None else 0.0
        out = []
        for node in self._nodes():
            meta = node.metadata
            if meta.deletion_timestamp:
                continue
            ann = meta.annotations or {}
            labels = meta.labels or {}
            deadline = ann.get(ANN_RECLAIM)
            if deadline is None and m is not None and labels.get(
                    LABEL_CAPACITY_TYPE) == CapacityType.SPOT:
                it = labels.get("node.kubernetes.io/instance-type", "")
                zone = labels.get("topology.kubernetes.io/zone", "")
                if (it, zone) in m.avail:
                    at = m.reclaim_time(it, zone, float(ann.get(ANN_MARKET_LAUNCHED, mt)), None)
                    if at is not None and at <= mt:
                        log.info("kwok: spot node %s reclaimed (trace drop at market %.0f s)",
                                 meta.name, at)
                        deadline = repr(self.reclaim(meta.name))
            if deadline is None:
                continue
            if now >= float(deadline):
                self.delete(meta.name)  # the reclaim takes the instance at its deadline
                continue
            if ann.get(ANN_RECLAIM_ACK) != "true":
                out.append(Interruption(meta.name, InterruptionKind.SPOT_INTERRUPTION,
                                        float(deadline), receipt=meta.name))
        return out

    def acknowledge(self, event: Interruption) -> None:
        try:
            self.core.patch_node(event.instance_id,
                                 {"metadata": {"annotations": {ANN_RECLAIM_ACK: "true"}}})
        except ApiException as exc:
            if not _gone(exc):
                raise


def kwok_market(types: list[InstanceType], availability_dir: Path | None, spot_discount: float,
                seed: int = 0) -> SpotMarket | None:
    """The simulator's trace market over ``types``: availability traces from ``availability_dir``
    (default: the shared data's spot-traces), prices from the shared price snapshot where it has
    a row, else on-demand × ``spot_discount`` (so a lab without the shared data still has spot).
    None when no trace is found: the lab then offers on-demand only."""
    from gpufleet.catalog.spot_prices import shared_price_snapshot
    from gpufleet.datapaths import data_dir
    from gpufleet.market.spot_model import fit_thinning_dir, load_availability_dir

    if availability_dir is None:
        base = data_dir(required=False)
        if base is None or not (base / "spot-traces" / "availability").is_dir():
            return None
        availability_dir = base / "spot-traces" / "availability"
    prices = shared_price_snapshot()
    for it in types:
        for z in it.zones:
            prices.setdefault((it.name, z), float(it.usd_per_hour) * spot_discount)
    market = SpotMarket(types, prices, availability=load_availability_dir(availability_dir),
                        thinning=fit_thinning_dir(availability_dir), seed=seed)
    return market if market.offered else None
