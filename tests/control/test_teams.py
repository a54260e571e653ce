"""``control.teams.scale_up_gates``: which pending jobs scale-up may launch for, by hand.

Quotas (milli-GPU): ``x`` 2 GPUs, no cohort; ``y`` and ``z`` 2 GPUs each in cohort ``lab``.
Budgets: as each case says (team → action now).
"""

from __future__ import annotations

import pytest

from gpufleet.control.teams import Gate, scale_up_gates
from gpufleet.queueing.teams.budget import MICRO, BudgetState, BudgetVerdict
from gpufleet.queueing.teams.quota import QuotaBook, TeamQuota

TEAMS = [TeamQuota("x", 2000), TeamQuota("y", 2000, "lab"), TeamQuota("z", 2000, "lab")]
ANY, SPOT, SKIP = Gate.ANY, Gate.SPOT, Gate.SKIP


def verdicts(actions: dict[str, str]) -> dict[str, BudgetVerdict]:
    return {t: BudgetVerdict(t, BudgetState.LOW, a, 9 * MICRO, 10 * MICRO, 1.0, 0.0)  # type: ignore[arg-type]
            for t, a in actions.items()}


@pytest.mark.parametrize(
    ("pending", "usage", "actions", "gates"),
    [
        # the module docstring's example: x at 1 of 2 → x1 fits, x2 would make 3 > 2 (no
        # cohort); y1's team is spot-only
        ([("x", 1000), ("x", 1000), ("y", 1000)], {"x": 1000}, {"y": "spot-only"},
         [ANY, SKIP, SPOT]),
        # counted in queue order: x has 0 of 2; four 1-GPU jobs → two launch, two do not
        ([("x", 1000)] * 4, {}, {}, [ANY, ANY, SKIP, SKIP]),
        # borrowing within the cohort's idle quota is allowed (y 2 of 2, z idle: 2 to lend);
        # the third would need a third idle GPU
        ([("y", 1000), ("y", 1000), ("y", 1000)], {"y": 2000}, {}, [ANY, ANY, SKIP]),
        # hold: nothing for the team, even within quota; others unaffected
        ([("y", 1000), ("z", 1000)], {}, {"y": "hold"}, [SKIP, ANY]),
        # hold-and-drain holds new work as hold does: no launch for it
        ([("y", 1000), ("z", 1000)], {}, {"y": "hold-and-drain"}, [SKIP, ANY]),
        # notify changes nothing; a team with no quota and no budget is as before
        ([("y", 1000), (None, 8000), ("u", 8000)], {}, {"y": "notify"}, [ANY, ANY, ANY]),
        # a budget-only team (no quota) that is spot-only
        ([("b", 4000)], {}, {"b": "spot-only"}, [SPOT]),
        # quota first: a spot-only job its quota blocks is not launched for at all
        ([("x", 3000)], {}, {"x": "spot-only"}, [SKIP]),
    ],
)
def test_scale_up_gates(pending: list[tuple[str | None, int]], usage: dict[str, int],
                        actions: dict[str, str], gates: list[Gate]) -> None:
    book = QuotaBook(TEAMS, usage)
    before = dict(book.usage)
    assert scale_up_gates(pending, book, verdicts(actions)) == gates
    assert book.usage == before  # the caller's book is not changed


def test_no_book_means_budgets_only() -> None:
    assert scale_up_gates([("x", 9000), ("y", 1000)], None, verdicts({"y": "hold"})) == [
        ANY, SKIP]
