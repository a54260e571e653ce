"""The DRA world one cycle reads — slices, classes, claims — and what it means for each pod.

:class:`DraWorld` is built from the three informers' objects (with this replica's own claim
writes laid over them, :mod:`.claim_assume`). :func:`resolve` turns one parsed pod into what the
cycle needs:

* a **pending** pod whose claims are all unallocated: its request with the GPU part its claims
  ask (:func:`.claims.pod_ask`), and the claim the plan's ``Bind`` will be written into;
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
from gpufleet.k8s.translate.claims import (
    ClaimAsk,
    allocated,
    allocation_node,
    claim_key,
    pod_ask,
)
from gpufleet.k8s.translate.devices import NodeDevices, devices_by_node
from gpufleet.k8s.translate.pods import PodInfo
from gpufleet.k8s.translate.resource_slices import SliceProblem
from gpufleet.state import GPU_MILLI, ResourceRequest


@dataclass(slots=True)
class DraWorld:
    devices: dict[str, NodeDevices]  # node → its gpu.nvidia.com devices
    claims: dict[str, dict[str, Any]]  # namespace/name → claim
    classes: dict[str, dict[str, Any]]  # DeviceClass name → object
    problems: list[SliceProblem] = field(default_factory=list)

    @classmethod
    def of(cls, slices: Iterable[Mapping[str, Any]], claims: Iterable[dict[str, Any]],
           classes: Iterable[dict[str, Any]], catalog: GpuCatalog) -> DraWorld:
        devices, problems = devices_by_node(slices, catalog)
        return cls(devices, {claim_key(c): c for c in claims},
                   {str(c["metadata"]["name"]): c for c in classes}, problems)


@dataclass(frozen=True, slots=True)
class PodClaims:
    """What binding one pending pod with claims takes: allocate ``claim`` for ``ask`` on the
    plan's node, or (``pinned``) only reserve the already allocated claims on that node."""

    claims: tuple[dict[str, Any], ...]
    claim: dict[str, Any] | None = None
    ask: ClaimAsk | None = None
    pinned: str | None = None


def gpu_free(req: ResourceRequest) -> ResourceRequest:
    """``req`` without its GPU part (a DRA pod's GPUs are its claims')."""
    return replace(req, num_gpu=0, gpu_milli=GPU_MILLI, gpu_memory_mib=0, mig_profile=None)


def resolve(info: PodInfo, world: DraWorld, catalog: GpuCatalog
            ) -> tuple[PodInfo, PodClaims | None]:
    """``info`` as the cycle must see it (see the module), and for a pending pod the claims
    its bind writes."""
    if not info.uses_claims:
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
    claim = next(c for c in claims if claim_key(c) == ask.claim)
    return replace(info, request=req), PodClaims(tuple(claims), claim, ask)
