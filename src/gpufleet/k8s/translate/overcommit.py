"""Is any GPU given out twice? Read from the API objects alone (pods and nodes as JSON).

The scheduler's own state cannot answer this: a bug there (a bind planned twice, GPUs handed
out while an earlier bind was still on its way) is invisible from inside. What the cluster
shows can: every pod gpufleet bound carries its GPU assignment as annotations
(:mod:`.names`: ``gpufleet.io/node``, ``gpus``, ``gpu-milli``, ``mig``), written with the
binding in one update. On each node, over every bound pod that has not finished (a terminating
pod still holds its GPUs):

* ``index`` — a GPU index outside the node's GPUs, or a MIG slot that does not exist on its
  model, or an assignment that does not parse;
* ``milli`` — the ``gpu-milli`` of the pods sharing one GPU sums to more than 1000;
* ``whole`` — a GPU given whole (1000) to one pod is used by any other pod;
* ``mig`` — two MIG instances on one GPU overlap in memory slices (one slot used twice), or a
  GPU carries MIG instances and a whole/fractional share at once;
* ``count`` — pods bound without gpufleet's annotations (another scheduler's) ask for more
  whole ``nvidia.com/gpu`` than the GPUs the annotated pods and the claims left untouched (a pod
  whose ``nvidia.com/gpu`` an extended-resource claim serves is judged by its claim instead).

With Dynamic Resource Allocation a GPU is also given out by a ResourceClaim's ``status.allocation``.
Given the claims and the ResourceSlices, every device-level rule of
:mod:`gpufleet.k8s.dra.claim_devices` applies (``missing``, ``exclusive``, ``capacity``,
``counters``), plus ``node`` (a bound pod whose claim's allocation cannot be on its node), and each
claim's use of a ``gpu.nvidia.com`` GPU joins the annotation assignments on that GPU above: an
annotation pod on a GPU a claim holds whole is ``whole``, shares over the GPU ``milli``, a whole GPU
and a MIG slice of it ``mig``. A pod holding the same GPU through both (gpufleet's annotations
recording its claim's allocation) counts once.

Pure (dicts in, findings out), so the live tests' checker (``tests/support/overcommit.py``),
the lab's kubelet stand-in (:mod:`gpufleet.lab.kubelet_check`), which list the objects from the
API, and ``bench k8s-packing`` share one rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from gpufleet.catalog.gpus import GpuCatalog, default_gpu_catalog
from gpufleet.k8s.dra.claim_devices import (
    DeviceFinding,
    GpuClaimUse,
    judge_claims,
    misplaced,
)
from gpufleet.k8s.translate import names
from gpufleet.k8s.translate.nodes import node_spec
from gpufleet.k8s.translate.pods import TERMINAL_PHASES, assignment_of, pod_key, request_of
from gpufleet.state import GPU_MILLI


@dataclass(frozen=True, slots=True)
class Overcommit:
    """One GPU (``gpu``; None: the node as a whole) given out beyond what it has."""

    node: str
    gpu: int | None
    # index | milli | whole | mig | count; with claims also missing | exclusive | capacity |
    # counters | node
    kind: str
    pods: tuple[str, ...]
    detail: str
    excess: int = 1  # GPUs over: 1 per GPU, the shortfall for ``count``

    def __str__(self) -> str:
        where = self.node if self.gpu is None else f"{self.node} GPU {self.gpu}"
        return f"{where}: {self.kind}: {self.detail} ({', '.join(self.pods)})"


@dataclass(slots=True)
class _Use:
    pod: str  # ``ns/name``; for a claim's use, ``claim ns/name``
    milli: int | Fraction  # 0 for a MIG instance
    mig_mask: int = 0
    mig: str = ""


def _claim_use(u: GpuClaimUse) -> _Use:
    return _Use(f"claim {u.claim}", u.milli, u.mig_mask, u.mig)


def _from_device(f: DeviceFinding) -> Overcommit:
    return Overcommit(f.node, f.gpu, f.kind, tuple(f"claim {c}" for c in f.claims), f.detail,
                      0 if f.kind == "node" else 1)


def _bound_pods(pods: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    by_node: dict[str, list[Mapping[str, Any]]] = {}
    for p in pods:
        node = (p.get("spec") or {}).get("nodeName")
        if node and (p.get("status") or {}).get("phase") not in TERMINAL_PHASES:
            by_node.setdefault(node, []).append(p)
    return by_node


def find_overcommits(nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]],
                     catalog: GpuCatalog | None = None, *,
                     claims: Iterable[Mapping[str, Any]] = (),
                     slices: Iterable[Mapping[str, Any]] = ()) -> list[Overcommit]:
    """Every over-commit on every node (empty: none), from annotations and, when given, from
    ResourceClaims judged against ResourceSlices. Pods bound to a node not in ``nodes`` are not
    judged (the node is gone; its pods are the garbage collector's)."""
    cat = catalog or default_gpu_catalog()
    pods, claims, slices = list(pods), list(claims), list(slices)
    nodes_by_name = {n["metadata"]["name"]: n for n in nodes}
    judged = judge_claims(claims, slices, cat)
    found = [_from_device(f) for f in judged.findings]
    by_node = _bound_pods(pods)
    for name, node in nodes_by_name.items():
        held = judged.gpu_uses.get(name, {})
        if name in by_node or held:
            found.extend(_node_overcommits(node, by_node.get(name, []), cat, held))
    found.extend(_from_device(f) for f in misplaced(pods, nodes_by_name, claims, slices))
    return found


def overcommitted_gpus(found: Iterable[Overcommit]) -> int:
    """GPUs given out beyond what they have: each GPU with a finding once, plus the shortfall of
    every ``count`` finding."""
    gpus = {(f.node, f.gpu) for f in found if f.gpu is not None}
    return len(gpus) + sum(f.excess for f in found if f.gpu is None)


def _node_overcommits(node: Mapping[str, Any], pods: list[Mapping[str, Any]],
                      cat: GpuCatalog, held: Mapping[int, list[GpuClaimUse]]) -> list[Overcommit]:
    spec = node_spec(node, cat)
    name, n_gpus = spec.name, spec.num_gpus
    out: list[Overcommit] = []
    uses: dict[int, list[_Use]] = {}
    foreign_whole: list[tuple[str, int]] = []
    for p in pods:
        key = pod_key(p)
        ann = (p.get("metadata") or {}).get("annotations") or {}
        if ann.get(names.ANN_NODE) != name:  # not (or not here) bound by gpufleet
            req, _ = request_of(p, cat)
            by_claim = ((p.get("status") or {}).get("extendedResourceClaimStatus") or {})
            if (req is not None and req.num_gpu and not req.is_shared and not req.mig_profile
                    and not by_claim.get("resourceClaimName")):
                foreign_whole.append((key, req.num_gpu))
            continue
        bind = assignment_of(ann, name, key)
        if bind is None:
            out.append(Overcommit(name, None, "index", (key,),
                                  f"GPU assignment does not parse: {dict(ann)}", 0))
            continue
        if bind.mig:
            slot = bind.mig[0]
            prof = (cat.mig_profile(spec.gpu_model, slot.profile)
                    if spec.gpu_model in cat else None)
            label = f"{slot.profile}@{slot.start}"
            if not 0 <= slot.gpu < n_gpus or prof is None or slot.start not in prof.starts:
                out.append(Overcommit(name, slot.gpu, "index", (key,),
                                      f"MIG slot {label} does not exist on a {n_gpus}-GPU "
                                      f"{spec.gpu_model or 'GPU-less'} node"))
                continue
            uses.setdefault(slot.gpu, []).append(_Use(key, 0, prof.slice_mask(slot.start),
                                                      label))
            continue
        for g in bind.gpus:
            if not 0 <= g < n_gpus:
                out.append(Overcommit(name, g, "index", (key,),
                                      f"GPU index {g} on a node with {n_gpus} GPU(s)"))
                continue
            uses.setdefault(g, []).append(_Use(key, bind.milli_per_gpu))
    for g in sorted(set(uses) | set(held)):
        claimed = [_claim_use(u) for u in held.get(g, ())]
        holders = {pod for u in held.get(g, ()) for pod in u.pods}
        annotated = [u for u in uses.get(g, ()) if u.pod not in holders]
        if annotated:
            out.extend(_gpu_overcommits(name, g, annotated + claimed))
        else:  # claims alone: the device rules judged shares and exclusivity
            out.extend(_mig_overcommits(name, g, claimed))
    if foreign_whole:
        free = n_gpus - len(set(uses) | set(held))
        want = sum(n for _, n in foreign_whole)
        if want > free:
            out.append(Overcommit(name, None, "count", tuple(k for k, _ in foreign_whole),
                                  f"{want} whole GPU(s) asked without gpufleet's annotations, "
                                  f"{free} of {n_gpus} untouched by annotated pods and claims",
                                  want - max(free, 0)))
    return out


def _gpu_overcommits(node: str, g: int, uses: list[_Use]) -> list[Overcommit]:
    out: list[Overcommit] = []
    shares = [u for u in uses if not u.mig]
    whole = [u for u in shares if u.milli >= GPU_MILLI]
    if whole and len(uses) > 1:
        out.append(Overcommit(node, g, "whole", tuple(u.pod for u in uses),
                              f"given whole to {whole[0].pod} and used by {len(uses) - 1} "
                              f"other pod(s)"))
    total = sum((u.milli for u in shares), Fraction(0))
    if total > GPU_MILLI:
        shown = total.numerator if total.denominator == 1 else f"{float(total):.1f}"
        out.append(Overcommit(node, g, "milli", tuple(u.pod for u in shares),
                              f"{shown} milli-GPU given out of {GPU_MILLI}"))
    return out + _mig_overcommits(node, g, uses)


def _mig_overcommits(node: str, g: int, uses: list[_Use]) -> list[Overcommit]:
    """A GPU carrying MIG instances and a whole/fractional share at once, or two MIG instances
    on overlapping memory slices."""
    out: list[Overcommit] = []
    shares = [u for u in uses if not u.mig]
    migs = [u for u in uses if u.mig]
    if migs and shares:
        out.append(Overcommit(node, g, "mig", tuple(u.pod for u in uses),
                              "MIG instances and a whole/fractional share on one GPU"))
    taken = 0
    for u in migs:
        if taken & u.mig_mask:
            clash = tuple(v.pod for v in migs if v.mig_mask & u.mig_mask)
            out.append(Overcommit(node, g, "mig", clash,
                                  f"MIG slot {u.mig} overlaps another instance's slices"))
        taken |= u.mig_mask
    return out
