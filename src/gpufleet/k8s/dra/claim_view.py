"""The DRA world one cycle reads — slices, classes, claims — and what it means for each pod.

:class:`DraWorld` is built from the three informers' objects (with this replica's own claim
writes laid over them, :mod:`.claim_assume`). :func:`resolve` turns one parsed pod into what the
cycle needs:

* a **pending** pod whose claims are all unallocated: its request with the GPU part its claims
  ask (:func:`.claims.pod_ask`), the claim the plan's ``Bind`` will be written into, and the
  nodes its CEL selectors admit (:func:`.claims.selector_nodes`; none: refused with why);
* a **pending** pod whose claims are all allocated (a shared claim, or this scheduler — or its
  predecessor, killed between allocation and binding — allocated them): *pinned* to the node
  the allocation names; it is bound there, not planned (kube-scheduler does the same: an
  allocated claim restricts the pod to its node);
* a pod still **waiting** for its template's claim, or whose claims gpufleet cannot allocate:
  a refusal that says why;
* a **bound** pod with claims: its CPU and memory as usual, its GPUs from its allocated claims
  (:func:`.claims.holdings`), never from annotations, so nothing is counted twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gpufleet.catalog.gpus import GpuCatalog
from gpufleet.k8s.dra.claims import (
    ClaimAsk,
    allocated,
    allocation_node,
    claim_asks,
    claim_key,
    pod_ask,
    selector_nodes,
)
from gpufleet.k8s.dra.devices import NodeDevices, devices_by_node
from gpufleet.k8s.dra.extended_claims import (
    EXTENDED_CLAIM_ANNOTATION,
    ExtendedRequest,
    extended_claim,
    extended_classes,
)
from gpufleet.k8s.dra.slices import SliceProblem
from gpufleet.k8s.translate.pods import PodInfo
from gpufleet.state import GPU_MILLI, ResourceRequest


@dataclass(slots=True)
class DraWorld:
    devices: dict[str, NodeDevices]  # node → its gpu.nvidia.com devices
    claims: dict[str, dict[str, Any]]  # namespace/name → claim
    classes: dict[str, dict[str, Any]]  # DeviceClass name → object
    problems: list[SliceProblem] = field(default_factory=list)
    extended: dict[str, str] = field(default_factory=dict)  # extended resource → class
    extended_claims: dict[str, dict[str, Any]] = field(default_factory=dict)  # pod uid → claim
    # CEL selectors judged over ``devices`` (:func:`.claims.selector_nodes`), kept with them
    selector_memo: dict[Any, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, slices: Iterable[Mapping[str, Any]], claims: Iterable[dict[str, Any]],
           classes: Iterable[dict[str, Any]], catalog: GpuCatalog,
           cache: DeviceCache | None = None) -> DraWorld:
        slices = list(slices)
        devices, problems = cache.devices(slices, catalog) if cache is not None \
            else devices_by_node(slices, catalog)
        by_key = {claim_key(c): c for c in claims}
        by_name = {str(c["metadata"]["name"]): c for c in classes}
        owned: dict[str, dict[str, Any]] = {}
        for c in by_key.values():  # kube's findExtendedResourceClaim: annotated, pod-owned
            meta = c.get("metadata") or {}
            if (meta.get("annotations") or {}).get(EXTENDED_CLAIM_ANNOTATION) == "true":
                for o in meta.get("ownerReferences") or ():
                    if o.get("kind") == "Pod" and o.get("controller"):
                        owned[str(o.get("uid"))] = c
        memo = cache.selector_memo if cache is not None else {}
        return cls(devices, by_key, by_name, problems, extended_classes(by_name), owned, memo)


class DeviceCache:
    """The devices of the last cycle's slices, reused while no slice changed (same names and
    resourceVersions): slices change when nodes come and go, claims every bind."""

    def __init__(self) -> None:
        self._key: frozenset[tuple[str, str]] | None = None
        self._got: tuple[dict[str, NodeDevices], list[SliceProblem]] = ({}, [])
        self.selector_memo: dict[Any, Any] = {}  # emptied with the devices

    def devices(self, slices: list[Mapping[str, Any]], catalog: GpuCatalog
                ) -> tuple[dict[str, NodeDevices], list[SliceProblem]]:
        key = frozenset((str((s.get("metadata") or {}).get("name")),
                         str((s.get("metadata") or {}).get("resourceVersion"))) for s in slices)
        if key != self._key:
            self._got = devices_by_node(slices, catalog)
            self._key = key
            self.selector_memo = {}
        return self._got


@dataclass(frozen=True, slots=True)
class PodClaims:
    """What binding one pending pod with claims takes: allocate ``claim`` for ``ask`` on the
    plan's node, or (``pinned``) only reserve the already allocated claims on that node."""

    claims: tuple[dict[str, Any], ...]
    claim: dict[str, Any] | None = None
    ask: ClaimAsk | None = None
    pinned: str | None = None
    # extended resources (KEP-5004): the requests the claim serves (the pod's status names
    # them), and the claim to create first when the pod has none yet. Such a pod is bound
    # through its claim only on a node whose GPUs are devices only; elsewhere the device
    # plugin serves its extended resource as before.
    extended: tuple[ExtendedRequest, ...] = ()
    create: dict[str, Any] | None = None
    # the nodes whose devices the ask's CEL selectors admit (None: no such selector)
    nodes: frozenset[str] | None = None

    def through_claims(self, node: str, device_only: frozenset[str]) -> bool:
        """Whether binding the pod to ``node`` goes through its claims."""
        return not self.extended or self.pinned is not None or node in device_only


def gpu_free(req: ResourceRequest) -> ResourceRequest:
    """``req`` without its GPU part (a DRA pod's GPUs are its claims')."""
    return replace(req, num_gpu=0, gpu_milli=GPU_MILLI, gpu_memory_mib=0, mig_profile=None)


def resolve(info: PodInfo, world: DraWorld, catalog: GpuCatalog
            ) -> tuple[PodInfo, PodClaims | None]:
    """``info`` as the cycle must see it (see the module), and for a pending pod the claims
    its bind writes."""
    if not info.uses_claims:
        if info.extended and info.pending and info.refusal is None:
            return info, _extended(info, world)
        if not info.pending and info.uid in world.extended_claims and info.request is not None:
            # bound through a claim whose name its status does not carry yet: the claim's
            # devices are its GPUs, not a guess on the node
            return replace(info, request=gpu_free(info.request), assignment=None), None
        return info, None
    base = gpu_free(info.request) if info.request is not None else None
    if not info.pending:
        return replace(info, request=base, assignment=None), None
    if info.refusal is not None or base is None:
        return info, None
    if info.claims_wait:
        return replace(info, request=None, refusal=info.claims_wait), None
    claims: list[dict[str, Any]] = []
    for name in info.claim_names:
        c = world.claims.get(f"{info.namespace}/{name}")
        if c is None:
            return replace(info, request=None, refusal=f"ResourceClaim {name} not found"), None
        if (c.get("metadata") or {}).get("deletionTimestamp"):
            return replace(info, request=None, refusal=f"ResourceClaim {name} is being deleted"
                           ), None
        claims.append(c)
    done = [c for c in claims if allocated(c)]
    if done:
        nodes = {allocation_node(c) for c in done}
        if len(done) < len(claims) or len(nodes) != 1 or None in nodes:
            return replace(info, request=None, refusal=(
                "claims partly allocated or on different nodes (gpufleet allocates all of a "
                "pod's claims together)")), None
        (node,) = nodes
        return info, PodClaims(tuple(claims), pinned=node)
    hint = info.request.gpu_milli if info.request is not None and info.request.is_shared \
        else None
    req, ask, why = pod_ask(base, hint, claims, world.classes, catalog)
    if why or req is None or ask is None:
        return replace(info, request=None,
                       refusal=why or "its claims ask for no gpu.nvidia.com device"), None
    admits, why = selector_nodes(ask, world.devices, world.selector_memo)
    if why:
        return replace(info, request=None, refusal=why), None
    claim = next(c for c in claims if claim_key(c) == ask.claim)
    return replace(info, request=req), PodClaims(tuple(claims), claim, ask, nodes=admits)


def _extended(info: PodInfo, world: DraWorld) -> PodClaims | None:
    """The claim a pod's mapped extended resources become (module docstring of
    :mod:`.claims`): the one a predecessor created (found by owner and annotation, as
    kube-scheduler finds it), else one to create. Only a pod whose GPU requests are all mapped
    and in one container is served this way (one device request, as placement has)."""
    reqs = info.extended
    if len(reqs) != 1 or reqs[0].resource not in world.extended:
        return None
    existing = world.extended_claims.get(info.uid)
    if existing is not None:
        if allocated(existing):
            node = allocation_node(existing)
            return PodClaims((existing,), pinned=node, extended=reqs) if node else None
        asks, why = claim_asks(existing, world.classes)
        nodes, why = selector_nodes(asks[0], world.devices, world.selector_memo) \
            if not why and len(asks) == 1 else (None, why or "not one request")
        if why:
            return None
        return PodClaims((existing,), existing, asks[0], extended=reqs, nodes=nodes)
    body = extended_claim(info.namespace, info.name, info.uid, reqs, world.extended)
    asks, why = claim_asks(body, world.classes)
    nodes, why = selector_nodes(asks[0], world.devices, world.selector_memo) \
        if not why and len(asks) == 1 else (None, why or "not one request")
    if why:
        return None
    return PodClaims((), None, asks[0], extended=reqs, create=body, nodes=nodes)
