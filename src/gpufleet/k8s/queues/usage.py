"""The snapshot's pods in a queue's terms: which queue, and how many GPU-equivalents.

A pod belongs to the queue its Namespace's ``gpufleet.io/queue`` label names (``spec``); pods of
other namespaces are not managed by quotas (``queueing.teams.quota``: a team without a queue
keeps scheduling as before). Sizes are milli-GPU-equivalents (``queueing.teams.shares``): a
running MIG pod's share is read on its node's GPU model, a pending one's is the largest over the
models offering the profile (what the core does before placement).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from gpufleet.catalog.gpus import GpuCatalog
from gpufleet.control.cycle import PendingUnit, Victim
from gpufleet.k8s.translate import names
from gpufleet.k8s.translate.snapshot import Allocation, Snapshot
from gpufleet.queueing.teams.shares import gpu_equivalent_milli
from gpufleet.queueing.teams.spend import node_rates
from gpufleet.state import ResourceRequest


def namespace_of(key: str) -> str:
    """The namespace of a pod key or pod-group id ("ns/name")."""
    return key.partition("/")[0]


def _milli(req: ResourceRequest | None, catalog: GpuCatalog, model: str | None = None) -> int:
    if req is None:
        return 0
    try:
        return gpu_equivalent_milli(req, catalog, model)
    except ValueError:  # a MIG profile no catalogued model offers: it cannot be placed either
        return 0


def node_model(snap: Snapshot, node: str) -> str | None:
    state = snap.state
    row = state.index.get(node)
    if row is None or state.model_id[row] < 0:
        return None
    return state.model_names[state.model_id[row]]


def allocation_milli(snap: Snapshot, a: Allocation, catalog: GpuCatalog) -> int:
    return _milli(a.request, catalog, node_model(snap, a.bind.node))


def tag_units(units: Iterable[PendingUnit], teams: Mapping[str, str],
              catalog: GpuCatalog) -> list[PendingUnit]:
    """The cycle's units with their queue and size (a gang's size is all its pending members)."""
    out = []
    for u in units:
        team = teams.get(namespace_of(u.id))
        if team is None:
            out.append(u)
            continue
        out.append(replace(u, team=team, milli=_milli(u.request, catalog) * len(u.placed_ids)))
    return out


def tag_victims(victims: Iterable[Victim], snap: Snapshot, teams: Mapping[str, str],
                catalog: GpuCatalog) -> list[Victim]:
    out = []
    for v in victims:
        team = teams.get(namespace_of(v.job_id))
        a = snap.allocations.get(v.job_id)
        if team is None or a is None:
            out.append(v)
            continue
        out.append(replace(v, team=team, milli=allocation_milli(snap, a, catalog)))
    return out


def usage_by_queue(snap: Snapshot, teams: Mapping[str, str], catalog: GpuCatalog) -> dict[
        str, int]:
    """Milli-GPU-equivalents held per queue: every pod bound to a node (a terminating one too —
    its room is not free yet)."""
    out: dict[str, int] = {}
    for key, a in snap.allocations.items():
        team = teams.get(namespace_of(key))
        if team is not None:
            out[team] = out.get(team, 0) + allocation_milli(snap, a, catalog)
    return out


def model_usage_by_queue(snap: Snapshot, teams: Mapping[str, str], catalog: GpuCatalog
                         ) -> dict[str, dict[str, int]]:
    """Milli-GPU-equivalents held per queue and GPU model (its node's), what per-model quotas
    (``TeamQuota.models``) count; the pods :func:`usage_by_queue` counts, on a node whose model
    is known."""
    out: dict[str, dict[str, int]] = {}
    for key, a in snap.allocations.items():
        team = teams.get(namespace_of(key))
        model = node_model(snap, a.bind.node)
        if team is not None and model is not None:
            per = out.setdefault(team, {})
            per[model] = per.get(model, 0) + allocation_milli(snap, a, catalog)
    return out


def pending_by_queue(snap: Snapshot, teams: Mapping[str, str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for p in snap.pending:
        team = teams.get(p.namespace)
        if team is not None:
            out[team] = out.get(team, 0) + 1
    return out


def node_prices(nodes: Iterable[Mapping[str, Any]], price: Any) -> dict[str, float]:
    """USD per hour per Node name, from its instance type, zone and capacity type labels
    (``price`` is ``PriceBook.price``)."""
    out = {}
    for n in nodes:
        meta = n.get("metadata") or {}
        labels = meta.get("labels") or {}
        out[str(meta.get("name"))] = float(price(
            labels.get(names.INSTANCE_TYPE, ""), labels.get(names.ZONE, ""),
            labels.get(names.CAPACITY_TYPE, "on-demand")))
    return out


def queue_rates(snap: Snapshot, teams: Mapping[str, str], prices: Mapping[str, float],
                catalog: GpuCatalog) -> dict[str, float]:
    """Each queue's spend rate now, micro-dollars a second: every node's whole price split pro
    rata of the GPU-equivalents its pods hold (``ledger``'s module docstring) — the teams
    model's rule, ``queueing.teams.spend.node_rates``, as the simulator charges it. A pod no queue
    manages holds its part under its namespace, charged to no queue."""
    held: dict[str, dict[str, int]] = {}  # node → holder → milli
    for key, a in snap.allocations.items():
        ns = namespace_of(key)
        holder = teams.get(ns) or f"namespace {ns}"
        on = held.setdefault(a.bind.node, {})
        on[holder] = on.get(holder, 0) + allocation_milli(snap, a, catalog)
    queues = set(teams.values())
    out: dict[str, float] = {}
    for node, by in held.items():
        for holder, rate in node_rates(prices.get(node, 0.0), by).items():
            if holder in queues:
                out[holder] = out.get(holder, 0.0) + rate
    return out
