from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

from p3_offers import OFFERS, P3_2X, P3_16X

from gpufleet.decisions import CapacityType, Launch
from gpufleet.market.bidding import ZoneMarket, get_spot_strategy
from gpufleet.provisioning import InFlight, NodeShape, PendingPod, ScaleUpPolicy, score
from gpufleet.state import ResourceRequest

V100 = frozenset({"V100-16GB"})


def pod(n: int = 1, spot: bool = True, waited: float = 0.0, milli: int = 1000) -> PendingPod:
    r = ResourceRequest(cpu_milli=4000 * n, memory_mib=12288 * n, num_gpu=n, gpu_milli=milli,
                        gpu_models=V100)
    return PendingPod("j", r, spot, waited)


def markets(zone_prices: dict[str, float]) -> dict[str, list[ZoneMarket]]:
    return {
        it: [ZoneMarket(z, Decimal("3.06"), (Decimal(str(p)),) * 10, (1,) * 96)
             for z, p in zone_prices.items()]
        for it in ("p3.2xlarge", "p3.16xlarge")
    }


def test_docstring_example_three_spot_singles() -> None:
    # scores: p3.2x spot 3×0.918/3 = 0.918; p3.16x spot 8.0/3 = 2.67; on-demand 3.06
    reqs = [pod().request] * 3
    assert score(reqs, OFFERS[2]) == (0.918, 3)
    assert score(reqs, OFFERS[3]) == (8.0 / 3, 1)
    out = ScaleUpPolicy().decide([pod()] * 3, OFFERS, (), markets({"us-west-2a": 0.918}),
                                 get_spot_strategy("capacity-aware"))
    assert out == [Launch("p3.2xlarge", "us-west-2a", CapacityType.SPOT, 3,
                          max_price=Decimal("3.06"), reason="capacity-aware")]


def test_threshold_and_max_wait() -> None:
    pol = ScaleUpPolicy(gpu_threshold=2, max_wait_s=60)
    assert pol.decide([pod(spot=False)], OFFERS) == []  # 1 GPU < 2, waited 0 s
    out = pol.decide([pod(spot=False, waited=61)], OFFERS)
    assert out == [Launch("p3.2xlarge", "us-east-1a", CapacityType.ON_DEMAND, 1,
                          reason="1 pending pods")]


def test_urgent_pod_skips_the_wait_trigger() -> None:
    # 1 GPU < 2 and waited 0 s: no launch — unless the driver marks the pod urgent (a deadline
    # job whose slack cannot absorb the 60-s wait)
    pol = ScaleUpPolicy(gpu_threshold=2, max_wait_s=60)
    p = pod(spot=False)
    assert pol.decide([p], OFFERS) == []
    urgent = PendingPod(p.job_id, p.request, False, 0.0, urgent=True)
    assert pol.decide([urgent], OFFERS) == [
        Launch("p3.2xlarge", "us-east-1a", CapacityType.ON_DEMAND, 1, reason="1 pending pods")]
    # an urgent pod already absorbed by a booting node launches nothing more
    assert pol.decide([urgent], OFFERS, [InFlight(P3_2X, False)]) == []


def test_eight_gpu_pod_needs_big_node_and_non_spot_pods_stay_on_demand() -> None:
    out = ScaleUpPolicy().decide([pod(8, spot=False)], OFFERS)
    assert [(la.instance_type, la.capacity_type, la.count) for la in out] == [
        ("p3.16xlarge", CapacityType.ON_DEMAND, 1)
    ]


def test_least_waste_packs_eight_singles_on_cheapest_per_gpu() -> None:
    # on-demand only: 8×3.06/8 == 24.48/8 — tie on price, fewer nodes wins
    out = ScaleUpPolicy().decide([pod(spot=False)] * 8, OFFERS)
    assert [(la.instance_type, la.count) for la in out] == [("p3.16xlarge", 1)]


def test_inflight_nodes_absorb_pending() -> None:
    pol = ScaleUpPolicy()
    assert pol.decide([pod(spot=False)] * 2, OFFERS, [InFlight(P3_16X, False)]) == []
    # spot in-flight capacity does not absorb pods that may not run on spot
    out = pol.decide([pod(spot=False)] * 2, OFFERS, [InFlight(P3_16X, True)])
    assert sum(la.count for la in out) >= 1


def test_spot_strategy_declines_falls_back_to_on_demand() -> None:
    # no market with availability → capacity-aware returns [] → cheapest on-demand
    out = ScaleUpPolicy().decide([pod()] * 3, OFFERS, (), {}, get_spot_strategy("capacity-aware"))
    # on-demand: p3.2xlarge 3×3.06/3 = 3.06 beats p3.16xlarge 24.48/3 = 8.16
    assert out == [Launch("p3.2xlarge", "us-east-1a", CapacityType.ON_DEMAND, 3,
                          reason="3 pending pods")]


def test_group_order_sorts_set_members_and_keeps_repr_otherwise() -> None:
    """Case table: one-member and empty sets print as repr does (unchanged order); a
    many-member set prints its members sorted, so every hash seed orders groups alike."""
    from gpufleet.provisioning.scale_up import group_order

    cases = [
        ((frozenset({"A100-40GB"}), 0, None, True, 1, False, ""),
         "(frozenset({'A100-40GB'}), 0, None, True, 1, False, '')"),
        ((None, 0, None, False, 2, True, "j1"), "(None, 0, None, False, 2, True, 'j1')"),
        ((frozenset(),), "(frozenset(),)"),
        ((frozenset({"T4", "L4", "A10G"}), 1), "(frozenset({'A10G', 'L4', 'T4'}), 1)"),
    ]
    for key, want in cases:
        assert group_order(key) == want


def test_spot_only_pods_never_get_on_demand() -> None:
    """A team whose budget says spot-only: with no spot market the spot strategy finds no zone
    — where spot-tolerant pods fall back to on-demand (the test above), spot-only ones get
    nothing and come back unprovisioned; with a market they get spot; an on-demand node
    booting does not absorb them."""
    p = pod()
    only = PendingPod(p.job_id, p.request, True, 0.0, spot_only=True)
    pol = ScaleUpPolicy()
    reply = pol.plan([only] * 3, OFFERS, (), {}, get_spot_strategy("capacity-aware"))
    assert reply.launches == ()
    assert [u.job_id for u in reply.unprovisioned] == ["j"]
    out = pol.decide([only] * 3, OFFERS, (), markets({"us-west-2a": 0.918}),
                     get_spot_strategy("capacity-aware"))
    assert [(la.capacity_type, la.count) for la in out] == [(CapacityType.SPOT, 3)]
    # a booting on-demand p3.16xlarge absorbs three ordinary pods, not three spot-only ones
    assert pol.decide([p] * 3, OFFERS, [InFlight(P3_16X, False)]) == []
    assert pol.decide([only] * 3, OFFERS, [InFlight(P3_16X, False)], {},
                      get_spot_strategy("capacity-aware")) == []
    assert pol.plan([only] * 3, OFFERS, [InFlight(P3_16X, False)], {},
                    get_spot_strategy("capacity-aware")).unprovisioned != ()


def test_score_reuses_a_shapes_packing_across_offers_of_that_shape() -> None:
    """``packed`` carries (nodes, leftover) per shape between the offers of one group: the
    on-demand and spot p3.2xlarge offers share the shape P3_2X, so the second is priced from
    the first's packing — and every score equals the one packed afresh."""
    reqs = [pod().request] * 3
    packed: dict[NodeShape, tuple[int, bool]] = {}
    assert score(reqs, OFFERS[0], packed) == (3.06, 3) == score(reqs, OFFERS[0])
    assert packed == {P3_2X: (3, False)}
    assert score(reqs, OFFERS[2], packed) == (0.918, 3) == score(reqs, OFFERS[2])
    assert score(reqs, OFFERS[3], packed) == (8.0 / 3, 1) == score(reqs, OFFERS[3])
    assert packed == {P3_2X: (3, False), P3_16X: (1, False)}
    too_big = [pod(2).request]  # two GPUs: a one-GPU shape leaves it over
    memo: dict[NodeShape, tuple[int, bool]] = {}
    assert score(too_big, OFFERS[0], memo) == (float("inf"), 0)
    assert memo == {P3_2X: (0, True)}
    assert score(too_big, OFFERS[2], memo) == (float("inf"), 0)


def test_fits_shape_answers_per_object_pair() -> None:
    """The identity memo answers each (request, shape) pair for itself: one request object
    against two shapes, and an equal request built again, all as the field-by-field rule."""
    from gpufleet.provisioning.binpack import fits_shape, shape_misfits

    two = pod(2).request
    for _ in range(2):  # the second round is answered from the memo
        assert fits_shape(two, P3_16X) and not fits_shape(two, P3_2X)
    again = pod(2).request
    assert again is not two
    assert fits_shape(again, P3_16X) == (not shape_misfits(again, P3_16X))
    assert not fits_shape(again, P3_2X)


def capped(cap: int | None) -> PendingPod:
    return replace(pod(spot=False), max_node_gpus=cap)


def test_a_capped_pod_launches_and_is_absorbed_only_within_its_cap() -> None:
    """``control.right_size``: eight 1-GPU pods go on one p3.16xlarge (the tie on price goes
    to fewer nodes); a ninth, capped at 2 GPUs, gets a p3.2xlarge of its own instead of
    rounding the eight up to a second p3.16xlarge, and a booting p3.16xlarge no longer counts
    as room for it while a booting p3.2xlarge does."""
    pol = ScaleUpPolicy()
    out = pol.decide([pod(spot=False)] * 8 + [capped(2)], OFFERS)
    assert sorted((la.instance_type, la.count) for la in out) == [
        ("p3.16xlarge", 1), ("p3.2xlarge", 1)]
    assert [(la.instance_type, la.count) for la in pol.decide([capped(None)] * 8, OFFERS)] == [
        ("p3.16xlarge", 1)]
    big, small = InFlight(P3_16X, False), InFlight(P3_2X, False)
    got = pol.decide([capped(2)] * 2, OFFERS, [big])
    assert [(la.instance_type, la.count) for la in got] == [("p3.2xlarge", 2)]
    assert pol.decide([capped(2)], OFFERS, [big, small]) == []
    # the capped pod took the small node's GPU: the uncapped one still fits the big node
    assert pol.decide([capped(2), pod(spot=False)], OFFERS, [small, big]) == []
    # a cap no offer meets: nothing to launch, and scale-up says so
    reply = pol.plan([replace(pod(8, spot=False), max_node_gpus=4)], OFFERS)
    assert reply.launches == () and [u.job_id for u in reply.unprovisioned] == ["j"]


def test_price_scores_kept_per_group_give_the_plans_worked_out_afresh() -> None:
    """``prices`` keeps ``price_scores`` per (requests, spot ok, spot only, node cap) on one
    offer list: each group below is planned twice with it (the second time from what the first
    kept) and once without, to the same launches; groups that differ in any of the four get an
    entry each, and two equal groups share one."""
    from gpufleet.provisioning.scale_up import PriceScores, price_scores

    pol = ScaleUpPolicy()
    mk = markets({"us-east-1a": 0.918})
    groups = [
        [pod()] * 3,
        [pod(spot=False)] * 3,  # spot ok differs: on-demand only
        [replace(pod(), spot_only=True)] * 3,
        [capped(2)],
        [pod(2)],
        [pod()] * 3,  # equal to the first: its entry
    ]
    prices: PriceScores = {}
    for members in groups:
        for _ in range(2):
            got = pol.launch_group(members, OFFERS, mk, get_spot_strategy(), None, prices)
            assert got == pol.launch_group(members, OFFERS, mk, get_spot_strategy())
        key = (tuple(p.request for p in members), members[0].spot_ok, members[0].spot_only,
               members[0].max_node_gpus)
        assert prices[key] == price_scores(members, OFFERS)
    assert len(prices) == 5
    # the spot group's launch is spot; the on-demand one's is on-demand: the keys kept apart
    spot, od = (pol.launch_group(g, OFFERS, mk, get_spot_strategy(), None, prices)[0]
                for g in groups[:2])
    assert {x.capacity_type for x in spot} == {CapacityType.SPOT}
    assert {x.capacity_type for x in od} == {CapacityType.ON_DEMAND}
