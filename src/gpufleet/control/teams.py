"""Teams and scale-up: which pending work the autoscaler may launch nodes for.

The scheduling pass (``control.cycle`` steps 5 and 6) keeps a team's work pending when its
quota or its budget says so; scale-up must agree, or it would buy nodes for work that is not
allowed to run on them (they would sit empty until scale-down, billed to no one). The rule,
walked in queue order over the pending jobs with a copy of the quota book:

* a job of a team whose budget says ``hold`` or ``hold-and-drain`` → :attr:`Gate.SKIP` (no
  launch);
* a job whose quota verdict is BLOCKED, counting the jobs before it in the walk as admitted
  (so ten 1-GPU jobs of a team with 4 GPUs of quota and no cohort launch for four) →
  :attr:`Gate.SKIP`;
* a job of a team whose budget says ``spot-only`` → :attr:`Gate.SPOT` (launch spot capacity
  only, for the request with the spot toleration, ``request_on_spot``);
* anything else → :attr:`Gate.ANY` (as without teams).

Example: quota ``x`` = 2 GPUs, no cohort, 1 GPU in use; pending x1, x2 (1 GPU each) and y1
(team y, budget ``spot-only``) → ANY, SKIP, SPOT.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence

from gpufleet.queueing.teams.budget import HOLDING, BudgetVerdict
from gpufleet.queueing.teams.quota import QuotaBook


class Gate(enum.Enum):
    ANY = "any"  # launch as without teams
    SPOT = "spot"  # launch spot capacity only
    SKIP = "skip"  # launch nothing for it


def scale_up_gates(pending: Sequence[tuple[str | None, int]], book: QuotaBook | None,
                   budgets: Mapping[str, BudgetVerdict]) -> list[Gate]:
    """One :class:`Gate` per pending job (``(team, milli-GPU-equivalents)``, queue order);
    ``book`` is copied, never changed (module docstring)."""
    plan = None if book is None else QuotaBook(book.teams.values(), book.usage,
                                               book.model_usage)
    out: list[Gate] = []
    for team, milli in pending:
        action = None if team is None or team not in budgets else budgets[team].action
        if action in HOLDING:
            out.append(Gate.SKIP)
            continue
        if plan is not None and team is not None:
            if not plan.verdict(team, milli).admitted:
                out.append(Gate.SKIP)
                continue
            plan.admit(team, milli)
        out.append(Gate.SPOT if action == "spot-only" else Gate.ANY)
    return out
