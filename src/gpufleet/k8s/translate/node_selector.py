"""Node selection as Kubernetes defines it: ``nodeSelector`` AND any one required node-affinity
term (terms are ORed, expressions in a term ANDed; operators In, NotIn, Exists, DoesNotExist,
Gt, Lt). Pure functions over label dicts.

GPU-model and CUDA requirements are lifted out into the request (``gpu_models``/``min_cuda``)
when the selector has a single term, so placement's own filters judge them and name them in
the "0/N nodes are available" reason; everything else (zone, instance type, capacity type,
hostname, any label) is matched here and turned into a node mask for the cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpufleet.catalog.gpus import GpuCatalog
from gpufleet.k8s.translate import names

Requirement = tuple[str, str, tuple[str, ...]]
Term = tuple[Requirement, ...]
Selector = tuple[Term, ...]  # OR of terms; () = every node

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


def selector_of(spec: Mapping[str, Any]) -> tuple[Selector, str | None]:
    """The pod's node selection as OR-of-AND terms, or a reason it cannot be honoured."""
    base = tuple((k, "In", (str(v),)) for k, v in sorted((spec.get("nodeSelector") or {}).items()))
    aff = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms: list[Term] = []
    for term in aff.get("nodeSelectorTerms") or ():
        if term.get("matchFields"):
            return (), "node affinity matchFields is not supported"
        reqs = []
        for e in term.get("matchExpressions") or ():
            op = e.get("operator", "")
            if op not in OPERATORS:
                return (), f"node affinity operator {op!r} is not one of {', '.join(OPERATORS)}"
            reqs.append((e.get("key", ""), op, tuple(str(v) for v in e.get("values") or ())))
        terms.append(base + tuple(reqs))
    if not terms:
        return ((base,) if base else ()), None
    return tuple(terms), None


def _match(labels: Mapping[str, str], req: Requirement) -> bool:
    key, op, values = req
    has = key in labels
    if op == "In":
        return has and labels[key] in values
    if op == "NotIn":
        return not has or labels[key] not in values
    if op == "Exists":
        return has
    if op == "DoesNotExist":
        return not has
    try:  # Gt / Lt compare integers
        v, bound = int(labels[key]), int(values[0])
    except (KeyError, ValueError, IndexError):
        return False
    return v > bound if op == "Gt" else v < bound


def matches(labels: Mapping[str, str], selector: Selector) -> bool:
    return not selector or any(all(_match(labels, r) for r in term) for term in selector)


def matches_node_selector(selector: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """A core ``NodeSelector`` object (``nodeSelectorTerms``, ORed; in a term its
    ``matchExpressions`` on labels and ``matchFields`` on ``metadata.name`` ANDed) against a Node
    object: what a claim's ``status.allocation.nodeSelector`` says about where it may be used.
    No terms select no node, as in Kubernetes."""
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    fields = {"metadata.name": str(meta.get("name", ""))}

    def req(e: Mapping[str, Any]) -> Requirement:
        return (str(e.get("key", "")), str(e.get("operator", "")),
                tuple(str(v) for v in e.get("values") or ()))

    for term in selector.get("nodeSelectorTerms") or ():
        exprs, flds = term.get("matchExpressions") or (), term.get("matchFields") or ()
        if not exprs and not flds:
            continue  # an empty term selects nothing
        if all(_match(labels, req(e)) for e in exprs) and all(
                _match(fields, req(f)) for f in flds):
            return True
    return False


def lift_gpu_constraints(
    selector: Selector, cat: GpuCatalog
) -> tuple[frozenset[str] | None, int, Selector]:
    """(GPU models, minimum CUDA, the selector left) — lifted only from a single-term selector."""
    if len(selector) != 1:
        return None, 0, selector
    models: frozenset[str] | None = None
    min_cuda = 0
    rest: list[Requirement] = []
    cuda_keys = names.CUDA_RUNTIME_MAJOR
    for key, op, values in selector[0]:
        if key == names.GPU_PRODUCT and op == "In" and values:
            got = frozenset(cat.resolve(v) or v for v in values)
            models = got if models is None else models & got
        elif key in cuda_keys and op in ("In", "Gt") and values and all(
                v.isdigit() for v in values):
            major = min(int(v) for v in values) + (1 if op == "Gt" else 0)
            min_cuda = max(min_cuda, major * 1000)
        else:
            rest.append((key, op, values))
    return models, min_cuda, ((tuple(rest),) if rest else ())
