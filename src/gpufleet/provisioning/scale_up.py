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

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from dataclasses import replace as dc_replace
from functools import lru_cache

from gpufleet.decisions import CapacityType, Launch
from gpufleet.market.bidding import SpotStrategy, ZoneMarket
from gpufleet.market.spot_cost import SpotRisk, spot_cost_per_work_hour
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
_GroupKey = tuple[object, ...]  # the group key: shape fields, then "spot-only" if so
# reclaims per spot node-hour of (instance type, zone), as the fleet has seen them so far
Hazard = Callable[[str, str], float]


@dataclass(frozen=True, slots=True)
class Offer:
    """One instance type on one capacity type; price in USD/hour (spot: cheapest usable zone)."""

    instance_type: str
    capacity_type: CapacityType
    shape: NodeShape
    usd_per_hour: float
    zone: str = ""  # on-demand: the zone to launch in


# ``launch_group``'s price scores of one offer list, per (requests, spot ok, spot only, node
# cap): ((cost per useful GPU-hour, nodes) per usable offer, the best on-demand score)
PriceScores = dict[tuple[object, ...], tuple[list[tuple[tuple[float, int], Offer]], float]]


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
    # spot capacity only (its team's budget says ``spot-only``: ``control.teams``)
    spot_only: bool = False
    # what a reclaim would cost it (``market.spot_cost``); None: not known, spot is judged on
    # price alone
    risk: SpotRisk | None = None
    # it may only run on nodes of at most this many GPUs (``control.right_size``: a pod that
    # cannot move and outlasts scale-down is not left to strand a larger node); None: any
    max_node_gpus: int | None = None

    def fits_node(self, gpus: int) -> bool:
        return self.max_node_gpus is None or gpus <= self.max_node_gpus


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
    provisioning_delay_s: float = 0.0  # part of what a reclaim costs (``market.spot_cost``)

    def decide(
        self,
        pending: Sequence[PendingPod],
        offers: Sequence[Offer],
        inflight: Sequence[InFlight] = (),
        markets: Mapping[str, Sequence[ZoneMarket]] | None = None,
        spot_strategy: SpotStrategy | None = None,
        hazard: Hazard | None = None,
    ) -> list[Launch]:
        """The launches for ``pending`` (``plan`` without the pods left over)."""
        return list(self.plan(pending, offers, inflight, markets, spot_strategy,
                              hazard).launches)

    def plan(
        self,
        pending: Sequence[PendingPod],
        offers: Sequence[Offer],
        inflight: Sequence[InFlight] = (),
        markets: Mapping[str, Sequence[ZoneMarket]] | None = None,
        spot_strategy: SpotStrategy | None = None,
        hazard: Hazard | None = None,
        prices: PriceScores | None = None,
    ) -> ScaleUpReply:
        """Launches for the pending pods the booting nodes do not absorb, once the trigger
        fires, and the pods no launch is for. ``hazard``: the reclaim rate learned so far per
        (type, zone); with it a spot offer is scored by its expected cost (``spot_score``).
        ``prices``: see ``launch_group``."""
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
            key: _GroupKey = (r.gpu_models, r.min_cuda, r.gpu_memory_mib, p.spot_ok,
                              min(r.num_gpu, 2), r.mig_profile is not None,
                              p.job_id if p.gang_size > 1 else "")
            if p.spot_only:  # only then: the keys (and so the groups' order) stay as they were
                key = (*key, "spot-only")
            if p.max_node_gpus is not None:  # likewise: capped pods launch apart
                key = (*key, f"max-gpus={p.max_node_gpus}")
            groups.setdefault(key, []).append(p)
        out: list[Launch] = []
        left: list[Unprovisioned] = []
        # spot-tolerant groups first: one that ends up on on-demand anyway (spot declined, or
        # dearer by expected cost) joins the on-demand group of its shape, so the two are
        # packed onto the same nodes instead of each rounding up its own
        for key in sorted((k for k in groups if k[3]), key=group_order):
            members = groups.pop(key)
            plan, why = self.launch_group(members, offers, markets or {}, spot_strategy,
                                           hazard, prices)
            if plan and all(x.capacity_type == CapacityType.ON_DEMAND for x in plan):
                od_key: _GroupKey = (key[0], key[1], key[2], False, key[4], key[5], key[6],
                                     *(x for x in key[7:] if x != "spot-only"))
                groups.setdefault(od_key, []).extend(members)
                continue
            out.extend(plan)
            if why:
                ids = dict.fromkeys(p.job_id for p in members)
                left.extend(Unprovisioned(i, why) for i in ids)
        for key in sorted(groups, key=group_order):
            plan, why = self.launch_group(groups[key], offers, markets or {}, spot_strategy,
                                           hazard, prices)
            out.extend(plan)
            if why:
                ids = dict.fromkeys(p.job_id for p in groups[key])
                left.extend(Unprovisioned(i, why) for i in ids)
        return ScaleUpReply(tuple(out), tuple(left))

    def launch_group(
        self,
        pods: list[PendingPod],
        offers: Sequence[Offer],
        markets: Mapping[str, Sequence[ZoneMarket]],
        spot_strategy: SpotStrategy | None,
        hazard: Hazard | None = None,
        prices: PriceScores | None = None,
    ) -> tuple[list[Launch], str]:
        """The group's launches, or [] and why none: the cheapest offer by expected cost that
        fits every pod of ``pods`` (one group: the same key in ``plan``). Also asked by the
        on-demand → spot swap (``control.spot_swap``) for the pods of a running node.
        ``prices``: the price scores already worked out on this same ``offers`` list
        (``price_scores``), kept there as they are worked out."""
        spot_ok = pods[0].spot_ok
        if prices is None:
            scored, od_best = price_scores(pods, offers)
        else:
            key = (tuple(p.request for p in pods), spot_ok, pods[0].spot_only,
                   pods[0].max_node_gpus)
            got = prices.get(key)
            if got is None:
                got = prices[key] = price_scores(pods, offers)
            scored, od_best = got
        ranked: list[tuple[float, int, Offer, Sequence[ZoneMarket]]] = []
        for (s, nodes), o in scored:
            if nodes <= 0:
                continue
            zones: Sequence[ZoneMarket] = ()
            if o.capacity_type == CapacityType.SPOT:
                zones = markets.get(o.instance_type, ())
                if hazard is not None:
                    s, zones = spot_score(s, o, zones, pods, nodes, od_best, hazard,
                                          self.provisioning_delay_s)
                    if not zones:
                        continue  # the expected loss eats the discount in every zone
            ranked.append((s, nodes, o, zones))
        ranked.sort(key=lambda r: (r[0], r[1], r[2].usd_per_hour, r[2].instance_type))
        for _, nodes, offer, zones in ranked:
            if offer.capacity_type == CapacityType.ON_DEMAND:
                plan = [
                    Launch(offer.instance_type, offer.zone, CapacityType.ON_DEMAND, nodes,
                           reason=f"{len(pods)} pending pods")
                ]
            elif spot_strategy is None:
                continue
            else:
                plan = spot_strategy.plan(offer.instance_type, zones, nodes)
                if pods[0].gang_size > 1:
                    plan = one_zone(plan)
            if plan and pods[0].gang_size > 1:  # a gang's nodes: of no use to it in part
                plan = [dc_replace(x, all_or_none=True) for x in plan]
            if plan:
                if offer.shape.mig:
                    return [dc_replace(x, mig_config=MIG_CONFIG) for x in plan], ""
                return plan, ""
        if not scored or all(n <= 0 for (_, n), _ in scored):
            return [], "no offer fits"
        return [], "the spot strategy found no zone and no on-demand offer fits"


def price_scores(pods: Sequence[PendingPod], offers: Sequence[Offer]
                 ) -> tuple[list[tuple[tuple[float, int], Offer]], float]:
    """``launch_group``'s price side for one group: (cost per useful GPU-hour, nodes) of each
    offer the group may use and fits (``score``), and the best on-demand one's score. A
    function of the pods' requests, spot tolerance, spot-only flag and node cap, and of the
    offers alone: the same for every group with those four equal, on the same offers."""
    reqs = [p.request for p in pods]
    spot_ok = pods[0].spot_ok
    spot_only = pods[0].spot_only
    # Offers repeat a shape (one instance type in every zone, spot and on-demand): whether
    # the group fits a shape and how many nodes its packing takes are asked once per shape.
    fit: dict[NodeShape, bool] = {}
    packed: dict[NodeShape, tuple[int, bool]] = {}
    usable = []
    for o in offers:
        if not (spot_ok or o.capacity_type == CapacityType.ON_DEMAND):
            continue
        if spot_only and o.capacity_type != CapacityType.SPOT:
            continue
        if not pods[0].fits_node(o.shape.gpus):  # the group shares one cap (its key)
            continue
        ok = fit.get(o.shape)
        if ok is None:
            ok = fit[o.shape] = all(fits_shape(r, o.shape) for r in reqs)
        if ok:
            usable.append(o)
    scored = [(score(reqs, o, packed), o) for o in usable]
    od_best = min((s for (s, n), o in scored
                   if n > 0 and o.capacity_type == CapacityType.ON_DEMAND), default=math.inf)
    return scored, od_best


def spot_score(
    price_score: float, offer: Offer, zones: Sequence[ZoneMarket], pods: Sequence[PendingPod],
    nodes: int, od_score: float, hazard: Hazard, provisioning_delay_s: float,
) -> tuple[float, list[ZoneMarket]]:
    """A spot offer's expected cost per useful GPU-hour (``market.spot_cost``) and the zones
    where it beats ``od_score``, the group's best on-demand launch (best first).

    Per zone the price score is re-priced at that zone's spot price and the hazard is that
    zone's rate times the nodes one job spans (a gang loses its run when any of its nodes is
    reclaimed); the riskiest pod of the group decides (they share the nodes), each pod's
    reclaim loss priced with its own value of time (``SpotRisk.value_of_time``). With no
    on-demand launch to fall back to, or no pod's risk known, the zones stay as they are (spot
    is then the only way, or nothing is known to weigh) — except for a group with a
    latency-sensitive pod, which goes to spot only where spot beats on-demand, so with no
    on-demand launch to beat it keeps no zone (unless its team's budget says spot only,
    ``PendingPod.spot_only``: the budget is the harder limit). Example: one pod, 10 h left,
    checkpoints of 30 s, zones at λ 0.5 and 20 reclaims per node-hour, spot score 0.918,
    on-demand 3.06 → the 0.5 zone stays at 1.227, the 20 one (7.17) is dropped.
    """
    risks = [p.risk for p in pods if p.risk is not None]
    if not risks:
        return price_score, list(zones)
    if math.isinf(od_score):
        if not pods[0].spot_only and any(r.latency_sensitive for r in risks):
            return math.inf, []
        return price_score, list(zones)
    span = nodes if pods[0].gang_size > 1 else 1
    kept: list[tuple[float, str, ZoneMarket]] = []
    for z in zones:
        s = price_score
        if offer.usd_per_hour > 0:
            s = price_score * float(z.price) / offer.usd_per_hour
        lam = hazard(offer.instance_type, z.zone) * span
        eff = max(spot_cost_per_work_hour(s, od_score, lam, r, provisioning_delay_s)
                  for r in risks)
        if eff < od_score:
            kept.append((eff, z.zone, z))
    kept.sort(key=lambda k: (k[0], k[1]))
    return (kept[0][0] if kept else math.inf), [z for _, _, z in kept]


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
    first): a gang's nodes share one zone, whatever spread the strategy asked for, and are one
    launch (all or none of them under a node cap: ``control.limits.within_cap``)."""
    if len(plan) <= 1:
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
        if len(reqs) <= _FEW:
            got = _packed_few(tuple(reqs), offer.shape)
        else:
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


_FEW = 16


@lru_cache(maxsize=1 << 14)
def _packed_few(reqs: tuple[ResourceRequest, ...], shape: NodeShape) -> tuple[int, bool]:
    """(nodes, anything left over) of packing a few requests on fresh ``shape`` nodes, kept:
    the spot swap asks scale-up about the same node's pods on scan after scan, and a packing
    is a function of the requests and the shape alone."""
    bins, left = pack(reqs, shape)
    return len(bins), bool(left)


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
        cand = [p for p in out if (p.spot_ok or not spot) and (spot or not p.spot_only)]
        gangs: dict[str, list[PendingPod]] = {}
        for p in cand:
            if p.gang_size > 1:
                gangs.setdefault(p.job_id, []).append(p)
        absorbed: set[int] = set()
        for members in gangs.values():  # all or nothing, inside one zone
            for zone in sorted({n.zone for n in nodes}):
                at = [i for i, n in enumerate(nodes)
                      if n.zone == zone and members[0].fits_node(n.shape.gpus)]
                trial = [bins[i].copy() for i in at]
                _, left = pack([p.request for p in members], None, trial)
                if not left:
                    for i, b in zip(at, trial, strict=True):
                        bins[i] = b
                    absorbed.update(id(p) for p in members)
                    break
        rest = [p for p in cand if p.gang_size <= 1]
        # a capped pod is absorbed only by booting nodes within its cap (same bins, so the
        # room it takes is gone for the others): capped ones first, tightest cap first
        caps = sorted({p.max_node_gpus for p in rest if p.max_node_gpus is not None})
        for cap in caps:
            mine = [p for p in rest if p.max_node_gpus == cap]
            _, left = pack([p.request for p in mine], None,
                           [b for b, n in zip(bins, nodes, strict=True) if n.shape.gpus <= cap])
            absorbed.update(id(p) for p in mine)
            absorbed.difference_update(id(mine[i]) for i in left)
        rest = [p for p in rest if p.max_node_gpus is None]
        _, left = pack([p.request for p in rest], None, bins)
        absorbed.update(id(p) for p in rest)
        absorbed.difference_update(id(rest[i]) for i in left)
        out = [p for p in out if id(p) not in absorbed]
    return out

