"""Quota verdicts and reclaim, as case tables worked by hand (amounts in milli-GPU)."""

from __future__ import annotations

import pytest

from gpufleet.queueing.teams.quota import (
    Admission,
    QuotaBook,
    Running,
    TeamQuota,
    reclaim_victims,
)

# cohort "research": a = 4 GPUs, b = 4 GPUs (b may borrow at most 2); solo = 2 GPUs, no cohort
TEAMS = [
    TeamQuota("a", 4000, cohort="research"),
    TeamQuota("b", 4000, cohort="research", borrowing_limit_milli=2000),
    TeamQuota("solo", 2000),
]


@pytest.mark.parametrize(
    ("usage", "team", "ask", "admission", "borrowed"),
    [
        # within quota: 3 + 1 = 4 ≤ 4
        ({"a": 3000}, "a", 1000, Admission.WITHIN, 0),
        # a borrows b's idle: 4 + 2 = 6 > 4, cohort room = 8 - 4 = 4 ≥ 2
        ({"a": 4000}, "a", 2000, Admission.BORROWING, 2000),
        # cohort room 8 - (6 + 1) = 1 < 2: blocked
        ({"a": 6000, "b": 1000}, "a", 2000, Admission.BLOCKED, 4000),
        # b's borrowing limit: 4 + 2.5 - 4 = 2.5 > 2
        ({"b": 4000}, "b", 2500, Admission.BLOCKED, 2500),
        ({"b": 4000}, "b", 2000, Admission.BORROWING, 2000),
        # no cohort: cannot borrow
        ({"solo": 1500}, "solo", 1000, Admission.BLOCKED, 500),
        ({"solo": 1500}, "solo", 500, Admission.WITHIN, 0),
        # a fraction counts by its share: 3.75 + 0.25 = 4
        ({"a": 3750}, "a", 250, Admission.WITHIN, 0),
        # a team without a queue is not managed
        ({}, "nobody", 64000, Admission.UNMANAGED, 0),
    ],
)
def test_verdict(usage: dict[str, int], team: str, ask: int, admission: Admission,
                 borrowed: int) -> None:
    v = QuotaBook(TEAMS, usage).verdict(team, ask)
    assert (v.admission, v.borrowed_milli) == (admission, borrowed)
    assert v.admitted == (admission is not Admission.BLOCKED)
    assert bool(v.reason) == (admission is Admission.BLOCKED)


def test_blocked_reason_names_team_and_amounts() -> None:
    v = QuotaBook(TEAMS, {"a": 6000, "b": 1000}).verdict("a", 2000)
    assert v.reason == "team a: cohort research has 1 GPU of idle quota, 2 needed"


RUN = [  # a borrows 3 GPUs beyond its 4: its three newest 1-GPU pods are the borrowed part
    Running("a-old", "a", 4000, started_s=0),
    Running("a-1", "a", 1000, started_s=10),
    Running("a-2", "a", 1000, started_s=20),
    Running("a-3", "a", 1000, started_s=30),
    Running("b-1", "b", 1000, started_s=5),
]


@pytest.mark.parametrize(
    ("team", "ask", "victims"),
    [
        # b (1 used of 4) asks 2: cohort room = 8 - 8 = 0, short 2 → a's two newest
        ("b", 2000, ["a-3", "a-2"]),
        # b asks 3: short 3 → a-3, a-2, a-1 (a is then at its nominal 4)
        ("b", 3000, ["a-3", "a-2", "a-1"]),
        # b asks 4: 1 + 4 = 5 straddles b's 4 (it would borrow 1); a gives back only while it
        # keeps borrowing ≥ 1: a-3 and a-2, then a-1 would leave it 0 → 2 of 4 short: none
        ("b", 4000, None),
        # a itself is over quota: borrowed work does not reclaim
        ("a", 1000, None),
    ],
)
def test_reclaim_takes_borrowed_work_newest_first(team: str, ask: int,
                                                   victims: list[str] | None) -> None:
    book = QuotaBook(TEAMS, {"a": 7000, "b": 1000})
    got = reclaim_victims(book, team, ask, RUN)
    assert (None if got is None else [r.key for r in got]) == victims


def test_reclaim_never_touches_work_within_quota() -> None:
    # a at exactly its nominal 4: nothing borrowed, so b (0 used) asking 4 with the cohort full
    # because of b's... nothing — room is 8 - 4 = 4: fits without any victim
    book = QuotaBook(TEAMS, {"a": 4000})
    assert reclaim_victims(book, "b", 4000, [Running("a-old", "a", 4000, 0)]) == []
    # a above quota by 1 only; b needs 5 GPUs of room... b asks 4 with room 3: a gives 1 GPU
    # pod back but never its within-quota 4-GPU pod
    book = QuotaBook(TEAMS, {"a": 5000})
    run = [Running("a-old", "a", 4000, 0), Running("a-new", "a", 1000, 1)]
    assert [r.key for r in reclaim_victims(book, "b", 4000, run) or []] == ["a-new"]


def test_bad_quota_is_refused() -> None:
    with pytest.raises(ValueError, match="nominal quota must be ≥ 0"):
        TeamQuota("x", -1)
    with pytest.raises(ValueError, match="weight must be > 0"):
        TeamQuota("x", 0, weight=0)
    with pytest.raises(ValueError, match="per-model quota must be ≥ 0"):
        TeamQuota("x", 0, models=(("T4", -1),))


# per GPU model: p and q (8 GPUs each, cohort c) list H100 at 2 and 1; r (no cohort) lists H100
# at 1; p's borrowing limit is 2 GPUs
MODEL_TEAMS = [TeamQuota("p", 8000, "c", 2000, models=(("H100", 2000),)),
               TeamQuota("q", 8000, "c", models=(("H100", 1000),)),
               TeamQuota("r", 8000, models=(("H100", 1000),))]


@pytest.mark.parametrize(
    ("team", "model", "milli", "use", "admission", "reason"),
    [
        ("p", "H100", 2000, {}, Admission.WITHIN, ""),
        ("p", "A100", 8000, {}, Admission.WITHIN, ""),  # unlisted model: the total alone
        # p 2 on H100 + 1 = 3 > 2: borrows q's idle H100 (cohort H100 room 2 + 1 - 2 = 1)
        ("p", "H100", 1000, {"p": 2000}, Admission.BORROWING, ""),
        # q uses its H100 → no idle H100 in the cohort
        ("p", "H100", 1000, {"p": 2000, "q": 1000}, Admission.BLOCKED,
         "team p: 3 H100 GPU would exceed its H100 quota of 2 and cohort c has 0 H100 GPU of "
         "idle quota"),
        # p would borrow 3 H100 > its borrowing limit of 2
        ("p", "H100", 5000, {}, Admission.BLOCKED,
         "team p: 5 H100 GPU would exceed its H100 quota of 2, over its borrowing limit of 2"),
        ("r", "H100", 2000, {}, Admission.BLOCKED,
         "team r: 2 H100 GPU would exceed its H100 quota of 1 and it has no cohort"),
        ("u", "H100", 9000, {}, Admission.UNMANAGED, ""),
    ],
)
def test_model_verdict(team: str, model: str, milli: int, use: dict[str, int],
                       admission: Admission, reason: str) -> None:
    book = QuotaBook(MODEL_TEAMS, model_usage={t: {"H100": m} for t, m in use.items()})
    v = book.model_verdict(team, model, milli)
    assert (v.admission, v.reason) == (admission, reason)


def test_admit_books_the_model() -> None:
    book = QuotaBook(MODEL_TEAMS)
    book.admit("p", 1000, "H100")
    book.admit("p", 1000, None)  # the model unknown: the total only
    book.admit("u", 1000, "H100")  # unmanaged: nothing
    assert book.usage["p"] == 2000 and book.model_usage["p"] == {"H100": 1000}
    assert "u" not in book.model_usage


@pytest.mark.parametrize(
    ("usage", "team", "ask", "over"),
    [
        ({"a": 3000}, "a", 1000, 0),  # within: 3 + 1 ≤ 4
        ({"a": 3000}, "a", 2000, 1000),  # straddles: below 4 now, 5 after
        ({"a": 4000}, "a", 1000, None),  # at its nominal already: borrowing, no reclaim
        ({"b": 1000}, "b", 5000, 2000),  # straddles within b's borrowing limit of 2
        ({"b": 1000}, "b", 6000, None),  # would borrow 3 > 2
        ({"solo": 0}, "solo", 3000, None),  # no cohort to reclaim from
        ({}, "nobody", 1000, None),  # unmanaged
    ],
)
def test_reclaim_over(usage: dict[str, int], team: str, ask: int, over: int | None) -> None:
    assert QuotaBook(TEAMS, usage).reclaim_over(team, ask) == over


# cohort "big": x and y 4 GPUs each, w 4 GPUs at fair-share weight 2; x borrows 4
BIG = [TeamQuota("x", 4000, "big"), TeamQuota("y", 4000, "big"),
       TeamQuota("w", 4000, "big", weight=2.0)]
SHARES = [*BIG, TeamQuota("z", 4000, "big"), TeamQuota("v", 2000, "big"),
          TeamQuota("n", 0, "big")]
BIG_USE = {"y": 1000, "z": 3000}


@pytest.mark.parametrize(
    ("team", "left", "milli", "claimant", "over", "gives"),
    [
        ("x", 4000, 1000, "y", 0, True),  # within-quota claimant: while x borrows at all
        ("x", 500, 1000, "y", 0, True),  # the last 0.5 borrowed: the whole pod goes
        ("x", 0, 1000, "y", 0, False),  # x borrows nothing
        # straddling claimant: x's use after, as a share of its 4 nominal, against the
        # claimant's use before over its nominal (BIG_USE: y 1 of 4, z 3 of 4, v 0 of 2)
        ("x", 1000, 1000, "y", 3000, True),  # x keeps 4/4 > y's 1/4
        ("x", 1000, 3000, "y", 3000, True),  # x keeps 2/4 > y's 1/4
        ("x", 1000, 4000, "y", 3000, False),  # x keeps 1/4 = y's 1/4: a tie does not give
        ("x", 1000, 2000, "z", 500, False),  # x keeps 3/4 = z's 3/4: nor here
        ("x", 1000, 5000, "y", 3000, False),  # x would keep 0/4 < y's 1/4
        ("x", 1000, 1000, "z", 500, True),  # x keeps 4/4 > z's 3/4
        ("x", 1000, 3000, "z", 500, False),  # x would keep 2/4 < z's 3/4: stricter than
        # never below its nominal... and looser:
        ("x", 500, 4000, "v", 7000, True),  # x keeps 0.5/4 > v's 0/2
        ("n", 3000, 2000, "y", 3000, True),  # a team with no nominal always may
        ("w", 4000, 2000, "x", 1500, True),  # weights play no part: w keeps 6/4 > x's 0
        ("nobody", 4000, 1000, "y", 0, False),  # not a managed team
    ],
)
def test_gives_back(team: str, left: int, milli: int, claimant: str, over: int,
                    gives: bool) -> None:
    assert QuotaBook(SHARES, BIG_USE).gives_back(team, left, milli, claimant, over) is gives


def test_a_straddling_unit_reclaims_only_what_leaves_the_lender_its_share() -> None:
    """x uses 8 of 4 (borrows 4), y 3 of 4, w is idle: the cohort (12) has 1 of room. y asks 8
    (it would borrow 7), 7 short: x's four newest 1-GPU pods take it to 4 of 4 (its share 1 ≥
    y's 3/4); x-old (4) would leave it 0 of 4 < 3/4, so only 4 of 7 are found → None. y asks
    5, 4 short → the four newest. With y at 1 of 4 (share 1/4) x may go below its nominal:
    x's newest workload of 6 (x at 8 of 4: its 6 and 2) leaves it 2 of 4 ≥ 1/4, so y's 8 (5
    short) takes it alone — where keeping x borrowing ≥ 5 (Kueue's final share) would not;
    with y at 3 of 4 it leaves x 2/4 < 3/4, and the 2 alone is short → None."""
    run = [Running("x-old", "x", 4000, 0), *(Running(f"x-{i}", "x", 1000, 10 * i)
                                             for i in range(1, 5))]
    book = QuotaBook(BIG, {"x": 8000, "y": 3000})
    assert book.cohort_room("big") == 1000
    assert reclaim_victims(book, "y", 8000, run) is None
    assert [r.key for r in reclaim_victims(book, "y", 5000, run) or []] == [
        "x-4", "x-3", "x-2", "x-1"]
    two = [Running("x-a", "x", 2000, 0), Running("x-big", "x", 6000, 50)]
    low = QuotaBook(BIG, {"x": 8000, "y": 1000})
    assert [r.key for r in reclaim_victims(low, "y", 8000, two) or []] == ["x-big"]
    assert reclaim_victims(QuotaBook(BIG, {"x": 8000, "y": 3000}), "y", 6000, two) is None
