"""A DRA pod's claims written before its Binding — kube-scheduler's PreBind (``bindClaim``).

For a pod planned onto a node, the one claim holding its GPU request (a general pod: each of its
unallocated claims, with the allocation the general allocator made) gets, in this order:

1. the finalizer ``resource.kubernetes.io/delete-protection`` in a normal update (skipped when
   already there: a predecessor killed after this step left it, and the claim controller only
   removes it from unallocated claims, which this one still is);
2. ``status.allocation`` (the devices the plan chose, :func:`..dra.claims.allocation`) and
   the pod in ``status.reservedFor``, in one ``resourceclaims/status`` update carrying the
   claim's ``resourceVersion`` — so it is written only while the claim is as the cycle saw it,
   unallocated; anyone else's change in between is a 409 and the pod is planned again;

and only then is the pod bound (the kubelet refuses a pod whose claims are not reserved for it).
A pinned pod whose node is gone has its claims released (:meth:`ClaimWriter.release`) and is
planned again.
A pod *pinned* to its already allocated claims (see :mod:`..dra.claim_view`) only gets
itself added to ``reservedFor`` where it is missing. Each written claim goes into the claim
assume cache, so the next cycle counts its devices before the informer shows them.

Kill -9 anywhere in here leaves nothing a later leader cannot finish or undo from the API: a
claim allocated and reserved but its pod unbound pins the pod to that node (it is bound next
cycle); if the pod is gone, the controller-manager's claim controller drops the reservation and
deallocates the claim.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Mapping
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException

from gpufleet.decisions import Bind
from gpufleet.k8s.dra.claim_assume import ClaimAssume
from gpufleet.k8s.dra.claim_view import DraWorld, PodClaims
from gpufleet.k8s.dra.claims import FINALIZER, allocation, reserved_for
from gpufleet.k8s.dra.extended_claims import extended_mappings
from gpufleet.k8s.watch.ratelimit import TokenBucket

log = logging.getLogger(__name__)

CONFLICT = "conflict"


class ClaimWriter:
    def __init__(self, resource: Any, core: Any, assumed: ClaimAssume,
                 limiter: TokenBucket) -> None:
        self.resource = resource  # kubernetes.client.ResourceV1Api
        self.core = core  # kubernetes.client.CoreV1Api (the pod's extended-resource status)
        self.assumed = assumed
        self.limiter = limiter

    def _call(self, fn: Any, *args: Any) -> dict[str, Any]:
        self.limiter.take()
        return dict(json.loads(fn(*args, _preload_content=False).data))

    def prebind(self, d: Bind, pod: Mapping[str, Any], claims: PodClaims, world: DraWorld,
                device_only: frozenset[str]) -> str | Mapping[str, Any] | None:
        """Write the pod's claims for ``d``. None: the pod may be bound now; a pod object: it
        may, and this is the pod as the API now has it (its status was patched: the Binding's
        ``resourceVersion`` precondition must be this one); a string: :data:`CONFLICT`
        (re-plan next cycle) or an error message."""
        meta = pod["metadata"]
        ref = {"resource": "pods", "name": meta["name"], "uid": meta.get("uid")}
        if not claims.through_claims(d.node, device_only):
            return None  # a mapped extended resource on a node with its device plugin
        try:
            if claims.pinned is not None:
                if claims.pinned != d.node:
                    return f"claims of {meta['name']} are on {claims.pinned}, not {d.node}"
                for c in claims.claims:
                    if str(meta.get("uid")) not in reserved_for(c):
                        body = copy.deepcopy(c)
                        body["status"].setdefault("reservedFor", []).append(ref)
                        self._write_status(body)
                return self._extended_status(pod, claims.claims[0], claims)
            if claims.general:
                return self._general(d, pod, claims, ref)
            assert claims.ask is not None
            devices = world.devices.get(d.node)
            claim = claims.claim if claims.create is None else claims.create
            assert claim is not None
            alloc = allocation(claim, claims.ask, d, devices, world.classes) \
                if devices is not None else None
            if alloc is None:
                return f"bind {meta['name']} → {d.node}: the chosen devices are not published"
            if claims.create is not None:  # kube's createExtendedResourceClaimInAPI
                body = self._call(self.resource.create_namespaced_resource_claim,
                                  meta["namespace"], claims.create)
            else:
                body = copy.deepcopy(claim)
            if (body.get("status") or {}).get("allocation"):
                return CONFLICT
            body = self._protected(body)
            status = body.setdefault("status", {})
            status["allocation"] = alloc
            status["reservedFor"] = [*(status.get("reservedFor") or ()), ref]
            written = self._write_status(body)
            return self._extended_status(pod, written, claims)
        except ApiException as exc:
            if exc.status in (404, 409):
                log.info("claims of %s/%s: %s (changed or gone); re-planning", meta["namespace"],
                         meta["name"], exc.status)
                return CONFLICT
            return f"claims of {meta['namespace']}/{meta['name']}: {exc.status} {exc.reason}"
        except (urllib3.exceptions.HTTPError, OSError) as exc:  # the connection, not the API
            return f"claims of {meta['namespace']}/{meta['name']}: {exc}"

    def _protected(self, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` with kube's delete-protection finalizer, written first where missing (the
        claim as the API then has it)."""
        have = body["metadata"].get("finalizers") or []
        if FINALIZER in have:
            return body
        return self._finalizers(body, [*have, FINALIZER])

    def _finalizers(self, body: dict[str, Any], finalizers: list[str]) -> dict[str, Any]:
        """Set the claim's finalizers: a merge patch of ``metadata`` alone, guarded by the
        ``resourceVersion`` (409 if the claim changed). The spec is never sent back: the API
        server compares an opaque config's parameters byte for byte, and a re-serialised
        copy is "field is immutable" (422)."""
        m = body["metadata"]
        self.limiter.take()
        resp = self.resource.patch_namespaced_resource_claim(
            m["name"], m["namespace"], {"metadata": {
                "finalizers": finalizers, "resourceVersion": m.get("resourceVersion")}},
            _content_type="application/merge-patch+json", _preload_content=False)
        return dict(json.loads(resp.data))

    def _general(self, d: Bind, pod: Mapping[str, Any], claims: PodClaims,
                 ref: dict[str, Any]) -> str | None:
        """A general pod's claims (``dra.claim_view.general_binds``): each unallocated one
        gets the finalizer, then its allocation on ``d.node`` and the pod in
        ``reservedFor`` in one guarded status update, in the pod's order; an allocated one
        (shared, or written by a predecessor) only the reservation."""
        meta = pod["metadata"]
        planned = dict(claims.allocations)
        if len(planned) != len(claims.general):
            return f"bind {meta['name']} → {d.node}: its claims were not allocated there"
        for c in claims.claims:
            key = f"{c['metadata'].get('namespace')}/{c['metadata'].get('name')}"
            body = copy.deepcopy(c)
            status = body["status"] = body.get("status") or {}
            if key in planned:
                if status.get("allocation"):
                    return CONFLICT
                body = self._protected(body)
                status = body["status"] = body.get("status") or {}
                status["allocation"] = planned[key]
            elif str(meta.get("uid")) in reserved_for(c):
                continue
            status["reservedFor"] = [*(status.get("reservedFor") or ()), ref]
            self._write_status(body)
        return None

    def release(self, pod: Mapping[str, Any], claims: PodClaims) -> None:
        """The pod's claims are allocated on a node that no longer exists: deallocate those
        reserved for nobody but this (unbound) pod — allocation and reservation cleared in one
        ``resourceVersion``-guarded status update, then the finalizer removed — so the next
        cycle allocates them anew. A conflict or error is left to the next cycle."""
        uid = str(pod["metadata"].get("uid"))
        for c in claims.claims:
            if not set(reserved_for(c)) <= {uid}:
                continue  # another consumer still holds it
            body = copy.deepcopy(c)
            body["status"] = {**(body.get("status") or {}), "allocation": None,
                              "reservedFor": None}
            try:
                body = self._write_status(body)
                m = body["metadata"]
                self.assumed.assume(self._finalizers(
                    body, [f for f in m.get("finalizers") or () if f != FINALIZER]))
                log.info("released claim %s/%s: its node %s is gone", m["namespace"],
                         m["name"], claims.pinned)
            except ApiException as exc:
                log.info("releasing claim %s: %s %s", c["metadata"].get("name"), exc.status,
                         exc.reason)
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                log.info("releasing claim %s: %s", c["metadata"].get("name"), exc)

    def _write_status(self, body: dict[str, Any]) -> dict[str, Any]:
        m = body["metadata"]
        got = self._call(self.resource.replace_namespaced_resource_claim_status,
                         m["name"], m["namespace"], body)
        self.assumed.assume(got)
        return got

    def _extended_status(self, pod: Mapping[str, Any], claim: Mapping[str, Any],
                         claims: PodClaims) -> Mapping[str, Any] | None:
        """For a mapped extended resource, the pod's ``status.extendedResourceClaimStatus``
        (kube's ``patchPodExtendedResourceClaimStatus``), unless it already names the claim;
        returns the patched pod (None: nothing patched)."""
        if not claims.extended:
            return None
        name = claim["metadata"]["name"]
        have = ((pod.get("status") or {}).get("extendedResourceClaimStatus") or {})
        if have.get("resourceClaimName") == name:
            return None
        meta = pod["metadata"]
        self.limiter.take()
        resp = self.core.patch_namespaced_pod_status(
            meta["name"], meta["namespace"], {"status": {"extendedResourceClaimStatus": {
                "requestMappings": extended_mappings(claims.extended),
                "resourceClaimName": name}}}, _preload_content=False)
        return dict(json.loads(resp.data))
