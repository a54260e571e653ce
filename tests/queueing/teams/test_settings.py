"""The ``teams:`` section: units converted once, bad input refused with the field named."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpufleet.queueing.teams.budget import MICRO
from gpufleet.queueing.teams.quota import TeamQuota
from gpufleet.queueing.teams.settings import TeamsSettings, jain_index


def test_units_are_converted_once() -> None:
    s = TeamsSettings.model_validate({"queues": [
        {"name": "vision", "gpus": 2.5, "cohort": "r", "borrowing_limit": 0.25, "weight": 2,
         "budget": {"usd": 12.5, "period": "week", "action": "hold"}},
        {"name": "nlp", "gpus": 4},
    ]})
    assert s.quotas() == [TeamQuota("vision", 2500, "r", 250, 2.0), TeamQuota("nlp", 4000)]
    b = s.budgets()["vision"]
    assert (b.amount_micro, b.period, b.action) == (12_500_000, "week", "hold")
    assert b.amount_micro == 12.5 * MICRO and "nlp" not in s.budgets()


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"queues": [{"name": "a", "gpus": 1}, {"name": "a", "gpus": 2}]}, "defined twice"),
        ({"queues": [{"name": "a", "gpus": -1}]}, "queues.0.gpus"),
        ({"queues": [{"name": "a", "gpus": 1, "budget": {"usd": 5, "action": "panic"}}]},
         "queues.0.budget.action"),
        ({"queues": [{"name": "a", "gpus": 1, "quota": 3}]}, "queues.0.quota"),
        ({"queues": [{"name": "a", "gpus": float("nan")}]}, "queues.0.gpus"),
    ],
)
def test_bad_teams_name_the_field(doc: dict, message: str) -> None:
    with pytest.raises(ValidationError) as e:
        TeamsSettings.model_validate(doc)
    text = str(e.value)
    loc = ".".join(str(x) for err in e.value.errors() for x in err["loc"])
    assert message in text or message in loc


@pytest.mark.parametrize(
    ("xs", "j"),
    [([1.0, 1.0, 1.0], 1.0), ([1.0, 0.0, 0.0, 0.0], 0.25), ([1.0, 0.5], 0.9), ([], 1.0)],
)
def test_jain_index(xs: list[float], j: float) -> None:
    # (1 + 0.5)² / (2 · 1.25) = 2.25 / 2.5 = 0.9
    assert jain_index(xs) == pytest.approx(j)
