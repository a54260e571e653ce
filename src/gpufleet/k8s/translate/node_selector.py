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
