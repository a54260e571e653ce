"""On-demand → spot swap: move a running on-demand node's work to spot when the move pays.

Why: placement fills the room that exists before anything is launched, so once on-demand nodes
are up they keep taking new work, and spot only ever carries the burst above them. On the first
20,000 Philly jobs 83 % of scale-up's launches are spot (63 % of the GPUs launched), yet spot
carries 9 % of the GPU-hours: nearly every spot node is reclaimed (2,999 reclaims for 3,047
spot launches), and its work comes back to the long-lived on-demand nodes.
Karpenter's consolidation replaces a node by a cheaper one; this is that move with spot as the
cheaper node, priced by the same expected-cost rule as a launch (``market.spot_cost``).

The rule (``Scenario.spot_swap``, on in the embedded ``gpufleet``; measured in
docs/simulator.md). Both drivers apply it: the simulator's scan, and the live capacity loop's
scale-down, which hands the decisions to its consolidator as a ``spot-swap`` command (spot node
first, re-validated, then the drain):

0. **When** (``swap_look``): last of a scan's disruption methods, and only when emptiness and
   consolidation found no command in it (one command per scan, as Karpenter's disruption loop
   carries out the first method's), below the node cap (the swap launches before it drains).
1. **Candidates** (``swap_order``): on-demand nodes ready for at least ``min_age_s`` (the demand
   they serve has lasted), dearest first; the driver tries at most ``max_tries`` of those whose
   every pod may move (``control.views.pod_view``: one replica, checkpointing, deadline-safe)
   and tolerates spot, and swaps at most one node per look.
2. **The launch** is the one scale-up would make for those pods now
   (``ScaleUpPolicy.launch_group``): spot only where its expected cost, with the reclaim hazard
   learned so far, beats on-demand. A plan with any on-demand launch is no swap.
3. **The margin** (``swap_decisions``): the plan's spot price is at most ``max_price_ratio`` × the
   node's on-demand price. The hazard is already in the launch choice; the margin covers what it
   leaves out (the new node's boot billed, the requeue after a reclaim).
4. **Payback**: the hourly saving, over the work the pods have already done, pays for the move
   ``payback`` times: (od − spot) × attained ≥ payback × GPUs × (od $/GPU-h) × (checkpoint +
   restart + provisioning delay), plus the pods' owners' wait through the move at their value of
   time (``control.value_of_time``): + Σ pod GPUs × v × (checkpoint + restart + provisioning
   delay) — the move's GPU-hours priced at (od $/GPU-h + v); 0 with ``v`` = 0. A
   latency-sensitive pod is never a candidate's (step 1: ``control.views.may_move`` says no).
   Work done, not work left: a scheduler does not know how long a
   job will run, and for heavy-tailed job lengths the work done is the usual estimate of the work
   left. It also leaves short jobs where they are. A judge (``judge_swap``) checks it with a spot
   price of 0 first (``may_pay``): a node that cannot pay at any price is no swap without step
   2's plan; and no candidate is walked while the spot strategy would bid nowhere
   (``market.bidding.bids_anywhere``, asked at the start of a look).

Then the decisions are the spot launch, a graceful ``Preempt`` of every pod (checkpoint, requeue)
and ``Terminate`` of the node, applied in that order.

Example (``tests/control/test_spot_swap.py``): a p3.16xlarge at 24.48 $/h running one 8-GPU job
that has worked 2 h; spot planned at 7.34 $/h; checkpoint 30 s, restart 120 s, provisioning 180 s.
7.34 ≤ 0.6 × 24.48 = 14.688; the move costs 8 × 3.06 × 330 / 3600 = 2.244 $; the saving over the
work done is (24.48 − 7.34) × 2 = 34.28 ≥ 8 × 2.244 = 17.952 → swap. After 1 h of work: 17.14 <
17.952 → not yet. The same node after 2 h, its job's owner valuing delay at v = 10 $/GPU-h:
the move costs 8 × (3.06 + 10) × 330 / 3600 = 9.577 $, and 34.28 < 8 × 9.577 = 76.62 → no
swap; it pays only once the work done passes 76.62 / 17.14 ≈ 4.47 h.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from gpufleet.control.limits import may_launch
from gpufleet.decisions import CapacityType, Cause, Decision, Launch, Preempt, Terminate
from gpufleet.market.bidding import SpotStrategy, ZoneMarket
from gpufleet.provisioning.scale_up import (
    Hazard,
    Offer,
    PendingPod,
    PriceScores,
    ScaleUpPolicy,
)

HOUR_S = 3600.0
REASON = "spot swap"


@dataclass(frozen=True, slots=True)
class SwapSettings:
    """The rule's knobs (module docstring)."""

    min_age_s: float = 1800.0
    max_price_ratio: float = 0.6
    payback: float = 8.0
    max_tries: int = 5


@dataclass(frozen=True, slots=True)
class SwapNode:
    """One on-demand node as the rule reads it.

    ``job_ids``: its pods' jobs; ``pod_gpus``: the GPUs they hold; ``attained_s``: the least
    work any of them has done; ``move_s``: what one move costs each pod in seconds (the longest
    checkpoint + restart overhead among them + the provisioning delay); ``delay_usd_h``: what
    an hour of their delay costs their owners, Σ GPUs × value of time ($/h;
    ``control.value_of_time``)."""

    name: str
    usd_per_hour: float
    gpus: int
    job_ids: tuple[str, ...]
    pod_gpus: float
    attained_s: float
    move_s: float
    delay_usd_h: float = 0.0


class SwapLook(Enum):
    """Step 0's answer for one scan (``swap_look``)."""

    LOOK = "look"  # look now
    NEXT_CYCLE = "next cycle"  # disruption acted: the look is the next cycle's
    NO = "no"  # at the node cap: a swap launches its spot node first


def swap_look(disruption_found: bool, live: int, max_nodes: int) -> SwapLook:
    """Step 0: whether a scan's swap look runs, given whether the scan's emptiness or
    consolidation look found a command (``disruption_found``) and the nodes up or booting
    (``live``, against ``max_nodes``).

    One disruption command per scan, methods in a fixed order (Karpenter's disruption loop
    carries out the first method that finds one): a node just emptied or consolidated changes
    what the swap would read (its pods are pending again, room moved), so the swap waits for
    the next cycle rather than judge a fleet that is mid-change. The live consolidator carries
    one command at a time anyway; the simulator follows the same rule so that the two drivers
    make the same moves (and scans again for the next cycle's look: ``swap_owed``). At the node
    cap no look, whatever disruption did: a swap launches its spot node first."""
    if not may_launch(live, max_nodes):
        return SwapLook.NO
    return SwapLook.NEXT_CYCLE if disruption_found else SwapLook.LOOK


def swap_order(
    nodes: Sequence[tuple[str, float, float]], now: float, cfg: SwapSettings
) -> list[str]:
    """Candidate names from ``(name, ready_s, usd_per_hour)`` of the ready on-demand nodes that
    hold pods: ready for ``min_age_s`` or more, dearest first (name breaks ties)."""
    # (−price, name) pairs sort dearest first, name breaking ties, without a key function:
    # the simulator orders every on-demand node on every look
    old = sorted([(-usd, name) for name, ready_s, usd in nodes if now - ready_s >= cfg.min_age_s])
    return [name for _, name in old]


def first_swap(
    order: Sequence[str] | Callable[[], Sequence[str]], movable: Callable[[str], bool],
    judge: Callable[[str], list[Decision] | None], cfg: SwapSettings,
    spot_anywhere: Callable[[], bool] | None = None,
) -> list[Decision] | None:
    """Walk ``order`` (``swap_order``): a node whose pods may all move and tolerate spot
    (``movable``) is judged (``judge``: the driver asks scale-up and ``swap_decisions``), at most
    ``max_tries`` of them; the first swap that pays is the look's one swap.

    ``spot_anywhere`` (where the driver asks it: the strategy would launch spot somewhere
    now, ``market.bidding.bids_anywhere``): False → no walk, as no plan could be all spot
    and so no judge could swap; it never changes the answer. It is asked first: ``order``
    may be what works the candidates out (a walk over every node), then asked only when the
    strategy bids somewhere."""
    if spot_anywhere is not None and not spot_anywhere():
        return None
    names = order() if callable(order) else order
    tries = 0
    for name in names:
        if not movable(name):
            continue
        tries += 1
        if tries > cfg.max_tries:
            return None
        got = judge(name)
        if got is not None:
            return got
    return None


def swap_owed(
    order: Sequence[str] | Callable[[], Sequence[str]], movable: Callable[[str], bool],
    node_of: Callable[[str], SwapNode], cfg: SwapSettings,
    spot_anywhere: Callable[[], bool] | None = None,
) -> bool:
    """Whether a look that ``swap_look`` put off to the next cycle could have swapped:
    ``first_swap``'s walk with the judge's first step alone (``may_pay``: some candidate whose
    pods may move could pay back at a spot price of 0), so without asking scale-up.

    The simulator scans one interval later for the skipped look only then
    (``ScanClock.swap_deferred``): a look that cannot swap changes nothing, and a scan made
    for it would still move what else scans read on the clock (when a consolidation look is
    due), so a swap that can never pay would not leave the run as it is without the swap."""
    return first_swap(order, movable, lambda name: [] if may_pay(node_of(name), cfg) else None,
                      cfg, spot_anywhere) is not None


def plan_price(plan: Sequence[Launch], markets: Mapping[str, Sequence[ZoneMarket]]) -> float:
    """What ``plan`` costs per hour at the markets' current prices (its zone's price for each
    launch; a launch with no market in its zone counts 0, and the plan is then no spot plan)."""
    return sum(float(z.price) * x.count for x in plan
               for z in markets.get(x.instance_type, ()) if z.zone == x.zone)


def spot_plan(
    scale_up: ScaleUpPolicy, pods: list[PendingPod], offers: Sequence[Offer],
    markets: Mapping[str, Sequence[ZoneMarket]], strategy: SpotStrategy | None,
    hazard: Hazard, prices: PriceScores | None = None,
) -> tuple[list[Launch], float]:
    """Step 2: what scale-up would launch for ``pods`` now (``ScaleUpPolicy.launch_group``,
    with its ``prices``) and that plan's price per hour (``plan_price``). Both drivers ask
    this, with their own offers, markets and learned hazard."""
    plan, _ = scale_up.launch_group(pods, offers, markets, strategy, hazard, prices)
    return plan, plan_price(plan, markets)


def _pays(node: SwapNode, spot_usd_h: float, cfg: SwapSettings) -> bool:
    """Step 4: the hourly saving at ``spot_usd_h``, over the work done, pays for the move
    ``payback`` times; the move's seconds are priced at the pods' GPUs' on-demand rate plus
    their owners' value of time (the second term, 0 without one)."""
    od = node.usd_per_hour
    move_usd = (node.pod_gpus * (od / max(node.gpus, 1)) * node.move_s / HOUR_S
                + node.delay_usd_h * node.move_s / HOUR_S)
    return (od - spot_usd_h) * node.attained_s / HOUR_S >= cfg.payback * move_usd


def may_pay(node: SwapNode, cfg: SwapSettings) -> bool:
    """Step 4 with spot free: a node whose work done cannot pay for the move even at a spot
    price of 0 is no swap whatever scale-up would launch. The drivers ask this before the
    judge's plan (a scale-up pass, the rule's dearest step); it never refuses a swap that
    ``swap_decisions`` would make, as a spot price is never below 0."""
    return bool(node.job_ids) and _pays(node, 0.0, cfg)


def judge_swap(
    node: SwapNode, ask: Callable[[], tuple[list[Launch], float]], cfg: SwapSettings,
    max_nodes: int | None = None,
) -> list[Decision] | None:
    """Steps 2–4 for one candidate, in the order both drivers follow: the payback at a spot
    price of 0 (``may_pay``) first, then ``ask`` for scale-up's plan and its price
    (``spot_plan``, the dearest step), then ``swap_decisions``."""
    if not may_pay(node, cfg):
        return None
    plan, price = ask()
    return swap_decisions(node, plan, price, cfg, max_nodes)


def swap_decisions(
    node: SwapNode, plan: Sequence[Launch], spot_usd_h: float, cfg: SwapSettings,
    max_nodes: int | None = None,
) -> list[Decision] | None:
    """The swap for ``node`` given scale-up's ``plan`` for its pods (``spot_usd_h``: that plan's
    price per hour), or None when the move does not pay (module docstring, steps 2–4).
    ``max_nodes``: the most nodes the driver can launch for one swap (the live consolidator
    carries one replacement per command); a plan of more is no swap there."""
    if not node.job_ids or not plan:
        return None
    if max_nodes is not None and sum(x.count for x in plan) > max_nodes:
        return None
    if any(x.capacity_type != CapacityType.SPOT for x in plan):
        return None
    od = node.usd_per_hour
    if spot_usd_h > cfg.max_price_ratio * od or not _pays(node, spot_usd_h, cfg):
        return None
    return [*plan, *(Preempt(j, REASON, Cause.SWAP) for j in node.job_ids),
            Terminate(node.name, REASON)]
