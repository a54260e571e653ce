"""The kubelet stand-in: would a real node's kubelet start every bound pod with the devices its
claims name?

There is no kubelet on a KWOK node, so nothing in the lab refuses a pod whose claims are not
ready, and nothing would notice a device handed out twice. A real kubelet (its DRA manager)
runs a pod only when each of its ResourceClaims exists, is allocated and lists the pod in
``status.reservedFor``, and the node's DRA driver then prepares exactly the allocated devices
— which must exist on that node and not be someone else's. This check asks the same questions
of the API objects, after the fact:

* per bound, unfinished pod (:func:`kubelet_refusals`): every claim it names exists
  (``no-claim``; a template's claim not generated yet is ``no-claim`` too), is allocated
  (``unallocated``) and is reserved for this pod's UID (``unreserved``);
* across the cluster, the over-commit rules of :mod:`gpufleet.k8s.translate.overcommit` (one
  rule, once): the allocation's nodeSelector fits the pod's node and its devices sit in that
  node's slices (``node``), the devices exist (``missing``), no exclusive device twice
  (``exclusive``), shares (``capacity``) and counters (``counters``) within what the slices
  publish, and gpufleet's annotation assignments never on a device a claim holds.

``gpufleet lab check`` runs it against a lab; the live tests call :func:`check_cluster`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpufleet.k8s.dra.claim_devices import claim_key, pod_claim_names
from gpufleet.k8s.translate.overcommit import Overcommit, find_overcommits
from gpufleet.k8s.translate.pods import TERMINAL_PHASES, pod_key
from gpufleet.k8s.watch.informer import list_all

GROUP, VERSION = "resource.k8s.io", "v1"


@dataclass(frozen=True, slots=True)
class Refusal:
    """A bound pod a kubelet would not start: which claim, and why."""

    pod: str
    claim: str  # the pod's name for the claim
    kind: str  # no-claim | unallocated | unreserved
    detail: str

    def __str__(self) -> str:
        return f"pod {self.pod}: claim {self.claim}: {self.kind}: {self.detail}"


@dataclass(slots=True)
class ClusterObjects:
    """What the check reads, as the API's JSON; claims and slices empty when the API server does
    not serve ``resource.k8s.io/v1``."""

    nodes: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    claims: list[dict[str, Any]] = field(default_factory=list)
    slices: list[dict[str, Any]] = field(default_factory=list)


@dataclass(slots=True)
class KubeletReport:
    refusals: list[Refusal]
    overcommits: list[Overcommit]
    pods_checked: int
    claims_checked: int

    @property
    def ok(self) -> bool:
        return not self.refusals and not self.overcommits

    def lines(self) -> list[str]:
        return [str(r) for r in self.refusals] + [str(o) for o in self.overcommits]


def kubelet_refusals(pods: Iterable[Mapping[str, Any]],
                     claims: Iterable[Mapping[str, Any]]) -> list[Refusal]:
    """Per bound, unfinished pod: each of its claims exists, is allocated and reserved for it."""
    by_key = {claim_key(c): c for c in claims}
    out: list[Refusal] = []
    for pod in pods:
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        if not spec.get("nodeName") or status.get("phase") in TERMINAL_PHASES:
            continue
        key, ns = pod_key(pod), (pod.get("metadata") or {}).get("namespace", "")
        uid = (pod.get("metadata") or {}).get("uid")
        for pod_claim, name in pod_claim_names(pod):
            claim = by_key.get(f"{ns}/{name}") if name else None
            if claim is None:
                why = (f"ResourceClaim {ns}/{name} does not exist" if name
                       else "no ResourceClaim generated from its template yet")
                out.append(Refusal(key, pod_claim, "no-claim", why))
                continue
            cstatus = claim.get("status") or {}
            if not cstatus.get("allocation"):
                out.append(Refusal(key, pod_claim, "unallocated",
                                   f"ResourceClaim {ns}/{name} has no status.allocation"))
                continue
            holders = [r for r in cstatus.get("reservedFor") or () if r.get("resource") == "pods"]
            if not any(r.get("name") == pod["metadata"]["name"]
                       and (uid is None or r.get("uid") == uid) for r in holders):
                out.append(Refusal(key, pod_claim, "unreserved",
                                   f"ResourceClaim {ns}/{name} is not reserved for this pod "
                                   f"(reservedFor: {[r.get('name') for r in holders]})"))
    return out


def judge(objs: ClusterObjects) -> KubeletReport:
    """The whole check on listed objects (pure)."""
    bound = [p for p in objs.pods if (p.get("spec") or {}).get("nodeName")
             and (p.get("status") or {}).get("phase") not in TERMINAL_PHASES]
    return KubeletReport(
        refusals=kubelet_refusals(objs.pods, objs.claims),
        overcommits=find_overcommits(objs.nodes, objs.pods, claims=objs.claims,
                                     slices=objs.slices),
        pods_checked=len(bound), claims_checked=len(objs.claims))


def dra_served(api_client: Any) -> bool:
    """Whether the API server serves ``resource.k8s.io/v1`` (a discovery call)."""
    from kubernetes import client

    groups = client.ApisApi(api_client).get_api_versions().groups or ()
    return any(g.name == GROUP and any(v.version == VERSION for v in g.versions or ())
               for g in groups)


def list_cluster(api_client: Any, page: int = 500) -> ClusterObjects:
    """Nodes and pods, and — when the API serves DRA — ResourceClaims and ResourceSlices."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    objs = ClusterObjects(list_all(core.list_node, page)[0],
                          list_all(core.list_pod_for_all_namespaces, page)[0])
    if dra_served(api_client):
        res = client.ResourceV1Api(api_client)
        objs.claims = list_all(res.list_resource_claim_for_all_namespaces, page)[0]
        objs.slices = list_all(res.list_resource_slice, page)[0]
    return objs


def check_cluster(api_client: Any) -> KubeletReport:
    """List the cluster ``api_client`` talks to and judge it."""
    return judge(list_cluster(api_client))
