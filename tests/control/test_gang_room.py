"""Gang room: the three prices (hand-worked), the choice, when room frees, and eviction plans
that only count when every victim fits again."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from gpufleet.catalog.instances import default_instance_catalog
from gpufleet.control.gang_room import (
    Costs,
    GangRoomBook,
    GangRoomSettings,
    Movable,
    Room,
    choose,
    eviction_loss_s,
    eviction_plan,
    eviction_usd,
    gpu_hour_usd,
    room_frees_in,
    scale_up_usd,
    wait_usd,
)
from gpufleet.decisions import Bind, CapacityType
from gpufleet.placement import PlacementResult, get_policy
from gpufleet.provisioning import NodeShape, Offer
from gpufleet.queueing.gang import place_gang
from gpufleet.queueing.preemption import Victim
from gpufleet.state import FleetState, ResourceRequest

INF = math.inf
P3 = 3.06  # p3.2xlarge on demand, $/GPU-h
S = GangRoomSettings(launch=True, provisioning_delay_s=180, unneeded_s=600)


@pytest.mark.parametrize(("wait", "up", "pre", "want"), [
    (24.48, 13.056, None, Room.SCALE_UP),  # room in 30 min: launching is cheaper
    (8.16, 13.056, None, Room.WAIT),  # room in 10 min: wait
    (8.16, 13.056, 1.428, Room.PREEMPT),  # movable pods free it for $1.43
    (INF, None, None, Room.WAIT),  # nothing possible: it waits
    (5.0, 5.0, 5.0, Room.WAIT),  # ties: the least disruptive
    (10.0, 5.0, 5.0, Room.SCALE_UP),
    (INF, None, 99.0, Room.PREEMPT),  # a fixed fleet with no room expected
])
def test_choose(wait: float, up: float | None, pre: float | None, want: Room) -> None:
    assert choose(wait, up, pre) is want


@pytest.mark.parametrize(("gpus", "wait_s", "settings", "want_wait", "want_up"), [
    # 16 GPUs, room in 30 min: wait 16·3.06·0.5; scale up 16·3.06·(2·180 + 600)/3600
    (16, 1800, S, 24.48, 13.056),
    (16, 600, S, 8.16, 13.056),
    # room never expected: no surplus after the boot, 16·3.06·360/3600
    (16, INF, S, INF, 4.896),
    # a fixed fleet cannot launch
    (16, 1800, GangRoomSettings(False, 180, 600), 24.48, None),
    # scale up iff the wait exceeds 2P + U = 960 s
    (8, 960, S, 6.528, 6.528),
])
def test_wait_and_scale_up_prices(gpus: float, wait_s: float, settings: GangRoomSettings,
                                  want_wait: float, want_up: float | None) -> None:
    assert wait_usd(gpus, P3, wait_s) == pytest.approx(want_wait)
    got = scale_up_usd(gpus, P3, settings, wait_s)
    assert got == pytest.approx(want_up) if want_up is not None else got is None


@pytest.mark.parametrize(("w", "wait_s", "want_wait", "want_up", "choice"), [
    # the 16-GPU gang at 3.06 $/GPU-h (P 180 s, U 600 s), its owner valuing delay at w $/GPU-h:
    # wait adds 16·w·T, scale up 16·w·P (the boot's wait; its bill and the surplus are not
    # delay). w 0, room in 10 min: wait $8.16 < scale up $13.056 → wait
    (0.0, 600, 8.16, 13.056, Room.WAIT),
    # w 10: wait 8.16 + 16·10·600/3600 = 34.827; scale up 13.056 + 16·10·180/3600 = 21.056
    (10.0, 600, 34.827, 21.056, Room.SCALE_UP),
    # w 10, room in 30 min: 24.48 + 80 = 104.48 against 21.056 → scale up (as at w 0)
    (10.0, 1800, 104.48, 21.056, Room.SCALE_UP),
    # w 1: wait 8.16 + 2.667 = 10.827 < 13.056 + 0.8 = 13.856 → still wait
    (1.0, 600, 10.827, 13.856, Room.WAIT),
    # room never expected: waiting is never chosen, the boot's wait priced with w
    (10.0, INF, INF, 4.896 + 8.0, Room.SCALE_UP),
])
def test_the_value_of_time_prices_the_wait_and_the_boot(w: float, wait_s: float,
                                                        want_wait: float, want_up: float,
                                                        choice: Room) -> None:
    got_wait = wait_usd(16, P3, wait_s, w)
    got_up = scale_up_usd(16, P3, S, wait_s, w)
    assert got_wait == pytest.approx(want_wait, abs=1e-3)
    assert got_up == pytest.approx(want_up, abs=1e-3)
    assert choose(got_wait, got_up, None) is choice


def test_a_victims_value_of_time_prices_its_eviction() -> None:
    # two 4-GPU victims, each losing 150 s (a checkpoint write on notice + restart) at 3.06
    # $/GPU-h: 4·3.06·150/3600 = $0.51 each, the docstring's $1.02 for both. Valuing their
    # delay at 20 $/GPU-h adds 4·20·150/3600 = $3.333 each → $3.843 each, $7.687 both; with the
    # gang's (w 10) wait for the 30 s writes, 16·(3.06 + 10)·30/3600 = $1.741: $9.43 in all,
    # still below waiting 10 min at w 10 ($34.83) → preempt.
    r = ResourceRequest(cpu_milli=4000, memory_mib=1024, num_gpu=4)
    v = Victim("x", 0, 0.0, r, Bind("x", "n", (0, 1, 2, 3)))
    assert eviction_usd(Movable(v, 150.0, 30.0), lambda _: P3) == pytest.approx(0.51)
    each = eviction_usd(Movable(v, 150.0, 30.0, value_of_time=20.0), lambda _: P3)
    assert each == pytest.approx(3.8433, abs=1e-4)
    pre = 2 * each + 16 * P3 * 30 / 3600 + 16 * 10.0 * 30 / 3600
    assert pre == pytest.approx(9.428, abs=1e-3)
    assert choose(wait_usd(16, P3, 600, 10.0), scale_up_usd(16, P3, S, 600, 10.0),
                  pre) is Room.PREEMPT
    # v 0: the same float as without the term
    assert eviction_usd(Movable(v, 150.0, 30.0, value_of_time=0.0), lambda _: P3) == (
        4 * P3 * 150.0 / 3600)


def test_eviction_loss_is_lost_work_plus_write_plus_restart() -> None:
    assert eviction_loss_s(0.0, 30.0, 120.0) == 150.0  # writes a checkpoint on notice
    assert eviction_loss_s(300.0, 0.0, 120.0) == 420.0  # resumes from its last checkpoint


def test_gpu_hour_is_the_cheapest_fitting_on_demand_rate() -> None:
    cat = default_instance_catalog()
    p2, p16, g4 = cat["p3.2xlarge"], cat["p3.16xlarge"], cat["g4dn.xlarge"]
    offers = [
        Offer(p2.name, CapacityType.ON_DEMAND, NodeShape.of(p2), p2.usd_per_hour),
        Offer(p16.name, CapacityType.ON_DEMAND, NodeShape.of(p16), p16.usd_per_hour),
        Offer(p2.name, CapacityType.SPOT, NodeShape.of(p2), 0.5),  # spot is not the value
        Offer(g4.name, CapacityType.ON_DEMAND, NodeShape.of(g4), g4.usd_per_hour),
    ]
    # any 1-GPU pod: the T4 is cheapest; a V100 pod: the p3s; 4 GPUs: only the 8-GPU p3 holds it
    assert gpu_hour_usd(ResourceRequest(num_gpu=1), offers) == pytest.approx(g4.usd_per_hour)
    v100 = ResourceRequest(num_gpu=1, gpu_models=frozenset({"V100-16GB"}))
    assert gpu_hour_usd(v100, offers) == pytest.approx(p2.usd_per_hour)
    assert gpu_hour_usd(ResourceRequest(num_gpu=4), offers) == pytest.approx(
        p16.usd_per_hour / 8)
    assert gpu_hour_usd(ResourceRequest(num_gpu=16), offers) is None  # nothing that large


# -- when room frees and eviction plans, on a small fleet ----------------------------------
FOUR = ResourceRequest(cpu_milli=1000, num_gpu=4)


def fleet(names: str) -> FleetState:
    s = FleetState()
    for n in names:
        s.add_node(n, gpu_model="T4", num_gpus=4, cpu_milli=16000, memory_mib=65536)
    return s


def run(s: FleetState, job: str, node: str, gpus: tuple[int, ...]) -> Victim:
    req = ResourceRequest(cpu_milli=1000, num_gpu=len(gpus))
    b = Bind(job, node, gpus)
    s.allocate(req, b)
    return Victim(job, 0, 0.0, req, b)


def gang_place(s: FleetState, req: ResourceRequest, replicas: int
               ) -> Callable[[], list[Bind] | None]:
    policy = get_policy("bestfit")
    rng = np.random.default_rng(0)

    def place() -> list[Bind] | None:
        got = place_gang(s, req, replicas, policy, rng, "g")
        if not isinstance(got, list):
            return None
        return [r.to_bind(s, f"g#{k}") for k, r in enumerate(got)
                if isinstance(r, PlacementResult)]
    return place


@pytest.mark.parametrize(("replicas", "ends", "want"), [
    # two whole nodes: a0 ends at 100, b0 at 50, b1 at 300 → both free at 300
    (2, {"a0": 100.0, "b0": 50.0, "b1": 300.0}, 300.0),
    # one whole node: a frees at 100, before b (300)
    (1, {"a0": 100.0, "b0": 50.0, "b1": 300.0}, 100.0),
    # b1's work left is unknown: it never ends, so two nodes never free
    (2, {"a0": 100.0, "b0": 50.0}, INF),
])
def test_room_frees_when_the_pods_ending_first_make_it(replicas: int, ends: dict[str, float],
                                                       want: float) -> None:
    s = fleet("ab")
    vs = [run(s, "a0", "a", (0, 1, 2, 3)), run(s, "b0", "b", (0, 1)), run(s, "b1", "b", (2, 3))]
    before = s.free_milli.copy()
    assert room_frees_in(s, gang_place(s, FOUR, replicas), vs, ends, 0.0) == want
    assert (s.free_milli == before).all()  # a what-if


def test_room_frees_in_counts_from_now() -> None:
    s = fleet("a")
    v = run(s, "a0", "a", (0, 1, 2, 3))
    assert room_frees_in(s, gang_place(s, FOUR, 1), [v], {"a0": 700.0}, 400.0) == 300.0
    assert room_frees_in(s, gang_place(s, FOUR, 1), [v], {"a0": 100.0}, 400.0) == 0.0


def moves(vs: list[Victim], loss: dict[str, float]) -> list[Movable]:
    return [Movable(v, loss[v.job_id], 30.0) for v in vs if v.job_id in loss]


def test_eviction_plan_defragments_when_every_victim_fits_again() -> None:
    # a: two movable 1-GPU pods; b: one movable 2-GPU pod; c, d: pods that cannot move.
    # 9 GPUs free but no whole node: the gang (2 × 4 GPUs) needs a and b emptied, and the
    # three victims (4 GPUs) fit in c's 2 and d's 3 free GPUs.
    s = fleet("abcd")
    vs = [run(s, "a0", "a", (0,)), run(s, "a1", "a", (1,)), run(s, "b0", "b", (0, 1)),
          run(s, "c0", "c", (0, 1)), run(s, "d0", "d", (0,))]
    before = s.free_milli.copy()
    got = eviction_plan(s, gang_place(s, FOUR, 2), FOUR,
                        moves(vs, {"a0": 150, "a1": 150, "b0": 150}),
                        get_policy("bestfit"), np.random.default_rng(0), lambda r: P3)
    assert got is not None
    taken, binds = got
    assert [m.victim.job_id for m in taken] == ["a0", "a1", "b0"]
    assert sorted(b.node for b in binds) == ["a", "b"]
    assert (s.free_milli == before).all()


@pytest.mark.parametrize(("movable_loss", "d_gpus"), [
    ({"a0": 150, "a1": 150}, (0,)),  # b0 cannot move: only one node can be emptied
    ({"a0": 150, "a1": 150, "b0": 150}, (0, 1, 2)),  # d has 1 GPU free: victims have no room
])
def test_no_eviction_plan_when_it_would_only_move_the_wait(movable_loss: dict[str, float],
                                                          d_gpus: tuple[int, ...]) -> None:
    s = fleet("abcd")
    vs = [run(s, "a0", "a", (0,)), run(s, "a1", "a", (1,)), run(s, "b0", "b", (0, 1)),
          run(s, "c0", "c", (0, 1)), run(s, "d0", "d", d_gpus)]
    assert eviction_plan(s, gang_place(s, FOUR, 2), FOUR, moves(vs, movable_loss),
                         get_policy("bestfit"), np.random.default_rng(0), lambda r: P3,
                         need_milli=8000) is None


def test_no_eviction_plan_when_a_victim_finds_no_node_again() -> None:
    # 8 GPUs free (enough in sum), a and b can be emptied, but afterwards b0's 2 GPUs would
    # have to fit on one node and c, d, e, f have 1 free GPU each
    s = fleet("abcdef")
    vs = [run(s, "a0", "a", (0,)), run(s, "a1", "a", (1,)), run(s, "b0", "b", (0, 1))]
    for n in "cdef":
        run(s, f"{n}0", n, (0, 1, 2))
    assert eviction_plan(s, gang_place(s, FOUR, 2), FOUR,
                         moves(vs, {"a0": 150, "a1": 150, "b0": 150}), get_policy("bestfit"),
                         np.random.default_rng(0), lambda r: P3, need_milli=8000) is None
    # with one more free GPU on f, b0 fits there
    s.release(ResourceRequest(cpu_milli=1000, num_gpu=3), Bind("f0", "f", (0, 1, 2)))
    run(s, "f0", "f", (0, 1))
    got = eviction_plan(s, gang_place(s, FOUR, 2), FOUR,
                        moves(vs, {"a0": 150, "a1": 150, "b0": 150}), get_policy("bestfit"),
                        np.random.default_rng(0), lambda r: P3, need_milli=8000)
    assert got is not None and len(got[0]) == 3


def test_eviction_plan_reprieves_victims_the_gang_does_not_need() -> None:
    # the gang needs one whole node; a's pods are cheaper to evict than b's, so a is emptied
    # and b's pod is never taken; the 2 × 1-GPU victims fit on b's 2 free GPUs
    s = fleet("ab")
    vs = [run(s, "a0", "a", (0,)), run(s, "a1", "a", (1,)), run(s, "b0", "b", (0, 1))]
    got = eviction_plan(s, gang_place(s, FOUR, 1), FOUR,
                        moves(vs, {"a0": 100, "a1": 100, "b0": 9000}),
                        get_policy("bestfit"), np.random.default_rng(0), lambda r: P3)
    assert got is not None
    assert [m.victim.job_id for m in got[0]] == ["a0", "a1"]


def test_book_holds_a_choice_until_it_lapses() -> None:
    book = GangRoomBook()
    assert book.due("g", 0.0)
    wait = Costs(8.16, 13.056, None, 600.0)
    assert book.record("g", wait, 0.0) is Room.WAIT
    assert not book.due("g", 599.0) and book.holds_scale_up("g", 599.0)
    assert book.due("g", 600.0) and not book.holds_scale_up("g", 600.0)
    assert book.next_due() == 600.0
    up = Costs(24.48, 13.056, None, 1800.0)
    assert book.record("g", up, 600.0) is Room.SCALE_UP
    assert not book.due("g", 1e9) and not book.holds_scale_up("g", 700.0)  # stands
    pre = Costs(24.48, 13.056, 1.43, 1800.0, ("a0",), ("a", "b"), 30.0)
    assert book.record("h", pre, 0.0) is Room.PREEMPT
    assert book.reserved(89.0) == {"h": ("a", "b")}  # 30 s write + 60 s grace
    assert book.reserved(90.0) == {}
    book.started("h")
    assert book.reserved(0.0) == {}
    assert book.counts == {"wait": 1, "scale-up": 1, "preempt": 1}


def test_book_keeps_no_timer_when_nothing_is_possible() -> None:
    """No room expected, no launch, no eviction (a fixed fleet too small for the gang): the
    gang waits, but nothing is booked — no lapse to price it again at (``next_due`` None: no
    pass is scheduled for it), and scale-up is not held back for it. A wait priced before is
    forgotten."""
    book = GangRoomBook()
    book.record("g", Costs(8.16, None, None, 600.0), 0.0)
    assert book.next_due() == 600.0
    none = Costs(math.inf, None, None, math.inf)
    assert book.record("g", none, 10.0) is Room.WAIT
    assert book.decided == {} and book.next_due() is None
    assert book.due("g", 11.0) and not book.holds_scale_up("g", 11.0)
    # a wait with no room expected but a launch possible still lapses after REPRICE_S
    assert book.record("g", Costs(math.inf, math.inf, None, math.inf), 10.0) is Room.WAIT
    assert book.next_due() == 610.0
    assert book.counts == {"wait": 3, "scale-up": 0, "preempt": 0}


def test_book_applies_a_cycle_as_both_drivers_do() -> None:
    """``apply``: the started units are forgotten first, then each priced gang's choice is
    recorded (a gang that started and was priced again in one cycle keeps the new choice)."""
    book = GangRoomBook()
    book.record("old", Costs(1.0, None, None, 100.0), 0.0)
    book.record("g", Costs(1.0, None, None, 100.0), 0.0)
    up = Costs(24.48, 13.056, None, 1800.0)
    got = book.apply(["old", "g", "lone-pod"], {"g": up}, 50.0)
    assert got == [("g", up, Room.SCALE_UP)]
    assert set(book.decided) == {"g"} and book.decided["g"].room is Room.SCALE_UP
    assert book.counts == {"wait": 2, "scale-up": 1, "preempt": 0}


def test_book_indices_answer_what_a_walk_over_every_choice_answers() -> None:
    """``reserved`` and ``next_due`` read indices kept as choices are booked; after every step
    of a run of bookings, replacements and starts they equal the definition, a walk over
    ``decided``: the preempt choices not yet lapsed, and the earliest finite lapse of a choice
    that is not a scale-up. Costs: ``wait`` lapses at now + 600, ``pre`` reserves a and b for
    30 s + 60 s grace, ``up`` stands; ``none`` (nothing possible) forgets the gang."""
    wait = Costs(8.16, 13.056, None, 600.0)
    pre = Costs(24.48, 13.056, 1.43, 1800.0, ("a0",), ("a", "b"), 30.0)
    up = Costs(24.48, 13.056, None, 1800.0)
    none = Costs(math.inf, None, None, math.inf)
    book = GangRoomBook()

    def check(now: float) -> None:
        want_reserved = {g: d.nodes for g, d in book.decided.items()
                         if d.room is Room.PREEMPT and now < d.until_s}
        times = [d.until_s for d in book.decided.values()
                 if d.room is not Room.SCALE_UP and not math.isinf(d.until_s)]
        assert book.reserved(now) == want_reserved
        assert book.next_due() == (min(times) if times else None)

    steps: list[tuple[str, str, float]] = [
        ("record", "g", 0.0), ("record-pre", "h", 10.0),  # g lapses at 600, h at 100
        ("record-pre", "g", 20.0),  # g's wait replaced: its lapse at 600 is stale (110 now)
        ("started", "h", 30.0), ("record-up", "g", 40.0),  # no lapse left
        ("record", "k", 50.0), ("record-none", "k", 60.0),  # k forgotten
        ("record", "g", 70.0), ("record", "g", 80.0), ("started", "g", 90.0),
        ("record-pre", "m", 100.0), ("record", "n", 100.0)]
    for what, gang, now in steps:
        if what == "started":
            book.started(gang)
        else:
            costs = {"record": wait, "record-pre": pre, "record-up": up,
                     "record-none": none}[what]
            book.record(gang, costs, now)
        for t in (now, now + 50.0, now + 95.0, now + 1000.0):
            check(t)
    assert book.reserved(150.0) == {"m": ("a", "b")} and book.next_due() == 190.0


def test_a_lapse_is_spent_by_the_cycle_at_it_whether_or_not_the_gang_is_priced_again() -> None:
    """A wait booked at 0 for 600 s lapses at 600 and asks for a pass then. The pass at 600
    does not price the gang (its team is over quota): the lapse is spent, so ``next_due`` asks
    for no further pass at 600 (which would price nothing either, for ever) while the gang
    stays due for the next pass. A gang priced in that same pass books its own lapse."""
    wait = Costs(8.16, 13.056, None, 600.0)
    book = GangRoomBook()
    book.record("g", wait, 0.0)
    assert book.next_due() == 600.0
    assert book.apply([], {}, 599.0) == [] and book.next_due() == 600.0  # not yet lapsed
    book.apply([], {}, 600.0)
    assert book.next_due() is None and book.due("g", 600.0) and book.due("g", 601.0)
    book.apply([], {"h": wait}, 600.0)
    assert book.next_due() == 1200.0
