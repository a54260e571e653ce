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
* a **pending** pod whose claims placement does not express (several requests or claims,
  ``allocationMode: All``, constraints, a ``firstAvailable`` of other subrequests, another
  driver's devices, tolerations, a selector matching only some of a node's GPUs…), or whose
  claims are partly allocated: *general* — the nodes where the general allocator
  (:mod:`.allocator`, kube's own rules) fits all of its unallocated claims beside what is
  allocated, its request without GPUs. After the plan picks one of those nodes,
  :func:`general_binds` allocates the claims there, counting the devices this cycle's other
  binds take;
* a pod still **waiting** for its template's claim, or whose claims cannot be allocated on any
  node: a refusal that says why;
* a **bound** pod with claims: its CPU and memory as usual, its GPUs from its allocated claims
  (:func:`.claims.holdings`), never from annotations, so nothing is counted twice.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gpufleet.catalog.gpus import GpuCatalog
from gpufleet.decisions import Bind
from gpufleet.k8s.dra.allocator import AllocationError, InUse, NodePools, allocate, node_pools
from gpufleet.k8s.dra.claims import (
    ClaimAsk,
    allocated,
    allocation,
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
from gpufleet.k8s.translate.node_selector import Selector, matches
from gpufleet.k8s.translate.pods import PodInfo
from gpufleet.placement.fit import cuda_supported, model_allowed
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
    # every driver's devices by node, for the general allocator (:mod:`.allocator`)
    pools: dict[str, NodePools] = field(default_factory=dict)
    _used: InUse | None = None
    # this cycle's general allocations tried, by the claims' specs: the nodes they fit, or why
    # not (pods of one template ask the same)
    _fits: dict[str, tuple[frozenset[str], str | None]] = field(default_factory=dict)
    # each node's labels (set by the snapshot): a general pod's claims are tried only on the
    # nodes its node selector admits, as kube-scheduler filters NodeAffinity first
    node_labels: dict[str, Mapping[str, str]] = field(default_factory=dict)

    def in_use(self) -> InUse:
        """What the allocated claims hold (computed once)."""
        if self._used is None:
            used = InUse()
            for c in self.claims.values():
                used.add((c.get("status") or {}).get("allocation"))
            self._used = used
        return self._used

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
        pools = cache.pools(slices) if cache is not None else node_pools(slices)
        return cls(devices, by_key, by_name, problems, extended_classes(by_name), owned, memo,
                   pools)


class DeviceCache:
    """The devices of the last cycle's slices, reused while no slice changed (same names and
    resourceVersions): slices change when nodes come and go, claims every bind."""

    def __init__(self) -> None:
        self._key: frozenset[tuple[str, str]] | None = None
        self._got: tuple[dict[str, NodeDevices], list[SliceProblem]] = ({}, [])
        self._pools: dict[str, NodePools] | None = None
        self.selector_memo: dict[Any, Any] = {}  # emptied with the devices

    def pools(self, slices: list[Mapping[str, Any]]) -> dict[str, NodePools]:
        """Every driver's devices by node, for the slices :meth:`devices` was last given."""
        if self._pools is None:
            self._pools = node_pools(slices)
        return self._pools

    def devices(self, slices: list[Mapping[str, Any]], catalog: GpuCatalog
                ) -> tuple[dict[str, NodeDevices], list[SliceProblem]]:
        key = frozenset((str((s.get("metadata") or {}).get("name")),
                         str((s.get("metadata") or {}).get("resourceVersion"))) for s in slices)
        if key != self._key:
            self._got = devices_by_node(slices, catalog)
            self._key = key
            self._pools = None
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
    # the nodes whose devices the ask's CEL selectors admit (None: no such selector); a
    # general pod's: where the general allocator fits its claims
    nodes: frozenset[str] | None = None
    # allocated by the general allocator (:mod:`.allocator`), not placed by placement: its
    # claims (those not allocated yet) and, once :func:`general_binds` ran on the plan, each
    # one's allocation on the bind's node, as (namespace/name, status.allocation)
    general: tuple[dict[str, Any], ...] = ()
    allocations: tuple[tuple[str, dict[str, Any]], ...] = ()

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
        if len(nodes) != 1 or None in nodes:
            return replace(info, request=None, refusal=(
                "claims allocated on different nodes (or on no single node): no node can run "
                "the pod")), None
        (node,) = nodes
        if len(done) == len(claims):
            return info, PodClaims(tuple(claims), pinned=node)
        return _general(info, base, claims, world, catalog, node)  # the rest beside them, there
    hint = info.request.gpu_milli if info.request is not None and info.request.is_shared \
        else None
    req, ask, why = pod_ask(base, hint, claims, world.classes, catalog)
    if why or req is None or ask is None:  # a shape placement does not express
        return _general(info, base, claims, world, catalog)
    admits, why = selector_nodes(ask, world.devices, world.selector_memo)
    if why:  # a selector matching some GPUs of a node, or none: said if nothing fits
        return _general(info, base, claims, world, catalog, why=why)
    if _tolerates(claims):  # placement books tainted devices as taken
        return _general(info, base, claims, world, catalog)
    if ask.profile is not None and _static_mig(world, ask.profile):
        return _general(info, base, claims, world, catalog)
    claim = next(c for c in claims if claim_key(c) == ask.claim)
    return replace(info, request=req), PodClaims(tuple(claims), claim, ask, nodes=admits)


def _static_mig(world: DraWorld, profile: str) -> bool:
    """Whether a node with static MIG instances publishes devices of ``profile``: placement
    chooses start slices as if it could create them, so MIG claims there are the general
    allocator's, which gives the instances that exist."""
    key = ("static-mig", profile)
    got = world.selector_memo.get(key)
    if got is None:
        got = world.selector_memo[key] = any(
            d.static_mig and any(p == profile for (_, p, _) in d.mig)
            for d in world.devices.values())
    return bool(got)


def _tolerates(claims: Iterable[Mapping[str, Any]]) -> bool:
    """Whether any request of ``claims`` carries device tolerations."""
    for c in claims:
        for r in ((c.get("spec") or {}).get("devices") or {}).get("requests") or ():
            for ex in [r.get("exactly") or {}, *(r.get("firstAvailable") or ())]:
                if ex.get("tolerations"):
                    return True
    return False


def _general(info: PodInfo, base: ResourceRequest, claims: list[dict[str, Any]],
             world: DraWorld, catalog: GpuCatalog, only: str | None = None,
             why: str | None = None) -> tuple[PodInfo, PodClaims | None]:
    """The pod as the general allocator serves it: its request without GPUs, limited to the
    nodes where its unallocated claims all fit now (``only``: the node its allocated claims
    are on), or refused with kube-scheduler's reason (``why``, when no node fits: what the
    selectors' reading found, more telling than that)."""
    todo = tuple(c for c in claims if not allocated(c))
    key = json.dumps([only, info.selector, [c.get("spec") for c in todo]], sort_keys=True,
                     default=str)
    got = world._fits.get(key)
    if got is None or got[1] is not None:  # an error names the claim: this pod's own
        got = world._fits[key] = _fitting_nodes(todo, world, only, info.selector)
    nodes, error = got
    if error is not None:
        return replace(info, request=None, refusal=error), None
    if base.gpu_models or base.min_cuda:  # the pod's GPU Feature Discovery label affinity
        nodes = frozenset(n for n in nodes if _gpu_node(world.devices.get(n), base, catalog))
    if not nodes:
        where = f"on node {only}, where its allocated claims are" if only else "on any node"
        return replace(info, request=None,
                       refusal=why or f"cannot allocate all claims {where}"), None
    return replace(info, request=base), PodClaims(tuple(claims), nodes=nodes, general=todo)


def _gpu_node(devices: NodeDevices | None, req: ResourceRequest, catalog: GpuCatalog) -> bool:
    """Whether a node's GPUs meet the pod's GPU model and CUDA constraints (lifted from its
    node affinity on GPU Feature Discovery's labels, which placement checks only for a
    request with GPUs: a general pod's has none)."""
    if devices is None:
        return False
    inv = devices.inventory
    return model_allowed(req.gpu_models, inv.gpu_model, catalog) and cuda_supported(
        req.min_cuda, inv.cuda_driver, inv.gpu_model, catalog)


def as_general(info: PodInfo, pc: PodClaims, world: DraWorld, catalog: GpuCatalog,
               within: frozenset[str]) -> tuple[PodInfo, PodClaims] | None:
    """A placement pod (``pc``) handed to the general allocator instead, on the nodes
    ``within``: its request without GPUs, kept to where its claims fit now; None when they fit
    on none of them (placement's own refusal, and the capacity loop's reading of its GPUs,
    then stand)."""
    if info.request is None:
        return None
    got, claims = _general(info, gpu_free(info.request), list(pc.claims), world, catalog)
    if claims is None or claims.nodes is None or not claims.nodes & within:
        return None
    return got, replace(claims, nodes=claims.nodes & within)


def _fitting_nodes(todo: tuple[dict[str, Any], ...], world: DraWorld, only: str | None,
                   selector: Selector) -> tuple[frozenset[str], str | None]:
    """The nodes (``only``, or any ``selector`` admits) where the general allocator fits
    ``todo`` now, or the error that fits them nowhere."""
    used = world.in_use()
    nodes: set[str] = set()
    names = sorted(world.pools) if only is None else [only]
    if selector and world.node_labels:
        names = [n for n in names if matches(world.node_labels.get(n, {}), selector)]
    try:
        for name in names:
            pools = world.pools.get(name)
            if pools is not None and allocate(todo, world.classes, pools, used,
                                              share_id=str) is not None:
                nodes.add(name)
    except AllocationError as e:
        return frozenset(), str(e)
    return frozenset(nodes), None


def general_binds(world: DraWorld, binds: Sequence[Bind], claims: Mapping[str, PodClaims],
                  held: Iterable[tuple[str, int]] = ()) -> tuple[dict[str, PodClaims], list[str]]:
    """Allocate the general pods' claims on the nodes the plan bound them to (``binds``, in
    order), beside what is allocated and what the cycle's other binds take (their devices
    as :func:`.claims.allocation` will write them). ``held``: (node, GPU index) used by pods
    without claims (the device plugin's, on a node that has both) — every device of such a
    GPU is taken. Returns each such pod's claims with its allocations, and the pods whose
    claims no longer fit there (another bind of the cycle took the devices): they are not
    bound this cycle."""
    used = world.in_use().copy()
    for node, gpu in held:
        devices = world.devices.get(node)
        if devices is not None:
            used.whole.update(d.key for d in devices.by_name.values() if d.gpu == gpu)
    for b in binds:  # placement's choices first: they hold their devices whatever comes after
        pc = claims.get(b.job_id)
        if pc is None or pc.general or pc.ask is None or pc.pinned is not None:
            continue
        claim = pc.claim if pc.create is None else pc.create
        devices = world.devices.get(b.node)
        if claim is not None and devices is not None:
            used.add(allocation(claim, pc.ask, b, devices, world.classes))
    out: dict[str, PodClaims] = {}
    failed: list[str] = []
    for b in binds:
        pc = claims.get(b.job_id)
        if pc is None or not pc.general:
            continue
        pools = world.pools.get(b.node)
        try:
            got = allocate(pc.general, world.classes, pools, used) if pools else None
        except AllocationError:
            got = None
        if got is None:
            failed.append(b.job_id)
            continue
        for a in got:
            used.add(a)
        out[b.job_id] = replace(pc, allocations=tuple(
            (claim_key(c), a) for c, a in zip(pc.general, got, strict=True)))
    return out, failed


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
