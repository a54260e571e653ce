"""Scale-up: which instance type, zone and capacity type to launch for the pending pods.

Trigger (the seed's): the pending ``nvidia.com/gpu`` not already absorbed by booting nodes is at
least ``gpu_threshold`` (default 2) — or the oldest such pod has waited ``max_wait_s``, so a lone
1-GPU job is not stranded below the threshold forever — or a pod is ``urgent`` (the driver marks
deadline jobs whose slack cannot absorb that wait).

Choice (Cluster Autoscaler's least-waste and price expanders in one number): pending pods are
grouped by what they can run on (constraints, spot tolerance, GPUs per pod); for each group every
fitting offer is bin-packed and scored by *cost per useful GPU-hour* = nodes × price / GPUs the
pods use. Empty GPUs on the last node are waste and raise the score, so a lone 1-GPU pod takes a
1-GPU instance while eight of them take one 8-GPU node when that is cheaper per GPU. Spot offers
are only scored for pods that tolerate spot; the spot strategy (``gpufleet.market.bidding``) then
spreads the nodes over zones, and when it declines (``[]``) the group falls back to its best
on-demand offer.

Gangs (the replicas of one multi-node job) form a group of their own, and all of a gang's nodes
are launched in **one zone** (the spot strategy's first choice; on-demand launches name one zone
anyway): its replicas must share a cluster placement group, which is confined to a zone. A
booting node absorbs a gang only if the whole gang fits the booting nodes of one zone.

MIG pods form their own groups and are scored only on MIG offers (a MIG-capable type launched
with every GPU in MIG mode); their useful GPUs are their compute share (a 1g.5gb is 1/7 of an
A100), so seven of them fill one GPU's worth of "useful" and pay for one. Their launches come back
as a ``Launch`` whose ``mig_config`` says which mig-manager config the node boots with.

Example: 3 pending 1-GPU spot-tolerant pods; offers p3.2xlarge spot 0.918 $/h, p3.16xlarge spot
8.0 $/h (8 GPUs), p3.2xlarge on-demand 3.06 $/h. Scores: 3×0.918/3 = 0.918; 8.0/3 = 2.67;
3.06 → three p3.2xlarge spot nodes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from dataclasses import replace as dc_replace

from gpufleet.decisions import CapacityType, Launch
from gpufleet.market.bidding import SpotStrategy, ZoneMarket
from gpufleet.provisioning.binpack import (
    MIG_CONFIG,
    Bin,
    NodeShape,
    fits_shape,
    gpu_milli_of,
    pack,
)
from gpufleet.state import GPU_MILLI, ResourceRequest

# (models, min CUDA, GPU memory, spot ok, min(GPUs, 2), MIG, gang id or ""): pods one launch serves
_GroupKey = tuple[frozenset[str] | None, int, int, bool, int, bool, str]


@dataclass(frozen=True, slots=True)
class Offer:
    """One instance type on one capacity type; price in USD/hour (spot: cheapest usable zone)."""

    instance_type: str
    capacity_type: CapacityType
    shape: NodeShape
    usd_per_hour: float
    zone: str = ""  # on-demand: the zone to launch in


@dataclass(frozen=True, slots=True)
class PendingPod:
    """One replica waiting (a gang contributes one per replica)."""

    job_id: str
    request: ResourceRequest
    spot_ok: bool
    waited_s: float
    # cannot afford to wait for the trigger (a deadline job with little slack): scale up now
    urgent: bool = False
    gang_size: int = 1  # replicas of its job (> 1: a gang, launched in one zone)


@dataclass(frozen=True, slots=True)
class InFlight:
    """A node launched but not ready yet: its capacity absorbs pending pods."""

    shape: NodeShape
    spot: bool
    zone: str = ""


@dataclass(frozen=True, slots=True)
class Unprovisioned:
    """A pending pod scale-up found no launch for, and why (an expected "no", as data)."""

    job_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class ScaleUpReply:
    """Scale-up's answer: the launches, and the pods none of them is for because no offer
    fits them or every fitting one was declined (pods below the trigger are simply not
    considered yet, so not listed)."""

    launches: tuple[Launch, ...] = ()
    unprovisioned: tuple[Unprovisioned, ...] = ()


@dataclass(frozen=True, slots=True)
class ScaleUpPolicy:
    gpu_threshold: float = 2.0
    max_wait_s: float = 60.0
    max_pods: int = 512  # pods considered per scan (queue order); later ones wait a scan

    def decide(
        self,
        pending: Sequence[PendingPod],
        offers: Sequence[Offer],
        inflight: Sequence[InFlight] = (),
        markets: Mapping[str, Sequence[ZoneMarket]] | None = None,
        spot_strategy: SpotStrategy | None = None,
    ) -> list[Launch]:
        """The launches for ``pending`` (``plan`` without the pods left over)."""
        return list(self.plan(pending, offers, inflight, markets, spot_strategy).launches)

    def plan(
        self,
        pending: Sequence[PendingPod],
        offers: Sequence[Offer],
        inflight: Sequence[InFlight] = (),
        markets: Mapping[str, Sequence[ZoneMarket]] | None = None,
        spot_strategy: SpotStrategy | None = None,
    ) -> ScaleUpReply:
        """Launches for the pending pods the booting nodes do not absorb, once the trigger
        fires, and the pods no launch is for."""
        pods = list(pending[: self.max_pods])
        uncovered = _absorb(pods, inflight)
        if not uncovered:
            return ScaleUpReply()
        gpus = sum(gpu_milli_of(p.request) for p in uncovered) / GPU_MILLI
        oldest = max(p.waited_s for p in uncovered)
        if gpus < self.gpu_threshold and oldest < self.max_wait_s and not any(
            p.urgent for p in uncovered
        ):
            return ScaleUpReply()
        groups: dict[_GroupKey, list[PendingPod]] = {}
        for p in uncovered:
            r = p.request
            key = (r.gpu_models, r.min_cuda, r.gpu_memory_mib, p.spot_ok, min(r.num_gpu, 2),
                   r.mig_profile is not None, p.job_id if p.gang_size > 1 else "")
            groups.setdefault(key, []).append(p)
        out: list[Launch] = []
        left: list[Unprovisioned] = []
        for key in sorted(groups, key=group_order):
            plan, why = self._launch_group(groups[key], offers, markets or {}, spot_strategy)
            out.extend(plan)
            if why:
                ids = dict.fromkeys(p.job_id for p in groups[key])
                left.extend(Unprovisioned(i, why) for i in ids)
        return ScaleUpReply(tuple(out), tuple(left))

    def _launch_group(
        self,
        pods: list[PendingPod],
        offers: Sequence[Offer],
        markets: Mapping[str, Sequence[ZoneMarket]],
        spot_strategy: SpotStrategy | None,
    ) -> tuple[list[Launch], str]:
        """The group's launches, or [] and why none."""
        reqs = [p.request for p in pods]
        spot_ok = pods[0].spot_ok
        # Offers repeat a shape (one instance type in every zone, spot and on-demand): whether
        # the group fits a shape and how many nodes its packing takes are asked once per shape.
        fit: dict[NodeShape, bool] = {}
        packed: dict[NodeShape, tuple[int, bool]] = {}
        usable = []
        for o in offers:
            if not (spot_ok or o.capacity_type == CapacityType.ON_DEMAND):
                continue
            ok = fit.get(o.shape)
            if ok is None:
                ok = fit[o.shape] = all(fits_shape(r, o.shape) for r in reqs)
            if ok:
                usable.append(o)
        scored = [(score(reqs, o, packed), o) for o in usable]
        ranked = sorted(
            ((s, o) for s, o in scored if s[1] > 0),
            key=lambda so: (so[0][0], so[0][1], so[1].usd_per_hour, so[1].instance_type),
        )
        for (_, nodes), offer in ranked:
            if offer.capacity_type == CapacityType.ON_DEMAND:
                plan = [
                    Launch(offer.instance_type, offer.zone, CapacityType.ON_DEMAND, nodes,
                           reason=f"{len(pods)} pending pods")
                ]
            elif spot_strategy is None:
                continue
            else:
                zones = markets.get(offer.instance_type, ())
                plan = spot_strategy.plan(offer.instance_type, zones, nodes)
                if pods[0].gang_size > 1:
                    plan = one_zone(plan)
            if plan:
                if offer.shape.mig:
                    return [dc_replace(x, mig_config=MIG_CONFIG) for x in plan], ""
                return plan, ""
        if not ranked:
            return [], "no offer fits"
        return [], "the spot strategy found no zone and no on-demand offer fits"


def group_order(key: tuple[object, ...]) -> str:
    """The order groups are served in: their key's ``repr`` with every frozenset's members
    sorted. A frozenset of model names iterates in hash order, which Python salts per process
    (``PYTHONHASHSEED``); groups compete for the node cap, the market's zones and node names, so
    a hash-ordered walk gave each process its own fleet. One-member sets print as ``repr``
    does, so orders that never depended on hashing are unchanged."""
    parts = []
    for x in key:
        if isinstance(x, frozenset):
            inner = ", ".join(repr(m) for m in sorted(x))
            parts.append(f"frozenset({{{inner}}})" if x else "frozenset()")
        else:
            parts.append(repr(x))
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


def one_zone(plan: Sequence[Launch]) -> list[Launch]:
    """A gang's launches merged into the plan's first zone (the strategy ranks zones best
    first): a gang's nodes share one zone, whatever spread the strategy asked for."""
    if len({x.zone for x in plan}) <= 1:
        return list(plan)
    return [dc_replace(plan[0], count=sum(x.count for x in plan))]


def score(reqs: Sequence[ResourceRequest], offer: Offer,
          packed: dict[NodeShape, tuple[int, bool]] | None = None) -> tuple[float, int]:
    """(cost per useful GPU-hour, nodes) of packing ``reqs`` on fresh ``offer`` nodes.

    ``packed``: (nodes, anything left over) per shape already packed for these same ``reqs``
    (the packing depends on the shape alone, not on the offer's zone, price or capacity type);
    filled as shapes are packed."""
    got = packed.get(offer.shape) if packed is not None else None
    if got is None:
        bins, left = pack(reqs, offer.shape)
        got = (len(bins), bool(left))
        if packed is not None:
            packed[offer.shape] = got
    nodes, leftover = got
    if leftover:
        return float("inf"), 0
    useful = sum(gpu_milli_of(r) for r in reqs) / GPU_MILLI
    cost = nodes * offer.usd_per_hour
    if useful <= 0:  # CPU-only pods: cheapest nodes
        return cost, nodes
    return cost / useful, nodes


def _absorb(pods: list[PendingPod], inflight: Sequence[InFlight]) -> list[PendingPod]:
    """Pods the booting nodes will not take (spot nodes only take spot-tolerant pods)."""
    if not inflight:
        return pods
    out = pods
    for spot in (False, True):
        nodes = [n for n in inflight if n.spot == spot]
        if not nodes:
            continue
        bins = [Bin.empty(n.shape) for n in nodes]
        cand = [p for p in out if p.spot_ok or not spot]
        gangs: dict[str, list[PendingPod]] = {}
        for p in cand:
            if p.gang_size > 1:
                gangs.setdefault(p.job_id, []).append(p)
        absorbed: set[int] = set()
        for members in gangs.values():  # all or nothing, inside one zone
            for zone in sorted({n.zone for n in nodes}):
                at = [i for i, n in enumerate(nodes) if n.zone == zone]
                trial = [bins[i].copy() for i in at]
                _, left = pack([p.request for p in members], None, trial)
                if not left:
                    for i, b in zip(at, trial, strict=True):
                        bins[i] = b
                    absorbed.update(id(p) for p in members)
                    break
        rest = [p for p in cand if p.gang_size <= 1]
        _, left = pack([p.request for p in rest], None, bins)
        absorbed.update(id(p) for p in rest)
        absorbed.difference_update(id(rest[i]) for i in left)
        out = [p for p in out if id(p) not in absorbed]
    return out

