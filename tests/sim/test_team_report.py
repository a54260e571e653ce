"""The per-team table and report section (``sim.team_report``, ``sim.report_html``): cells
from the summary's ``teams`` block, nothing for scenarios without teams."""

from __future__ import annotations

from gpufleet.sim.books import Series
from gpufleet.sim.report_html import team_charts, teams_html
from gpufleet.sim.team_report import TEAM_COLUMNS, team_rows, team_tables

TEAMS = {
    "per_team": {
        "a": {"gpu_hours_used": 1234.56, "gpu_hours_entitled": 2000.0,
              "entitled_delivered": 0.98765, "slowdown_mean": 1.5, "queue_mean_s": 61.4,
              "late_over_5min_share": 0.125, "delay_vs_static_p95_s": 412.3,
              "jobs_finished": 1200, "spend_usd": 99.999, "budget_usd": 80.0,
              "budget_action": "hold", "budget_peak_spend_usd": 90.0,
              "overspend_hours": 0.4567},
        "b": {"gpu_hours_used": 1.0, "gpu_hours_entitled": None, "entitled_delivered": None,
              "slowdown_mean": 1.0, "queue_mean_s": 0.0, "jobs_finished": 3,
              "spend_usd": 0.5},
    },
    "jain_index": 0.9, "jain_index_delivered": 0.95, "worst_entitled_delivered": 0.9,
    "unattributed_usd": 12.0,
}


def test_team_rows_format_and_dash_for_missing() -> None:
    rows = team_rows(TEAMS)
    assert rows[0] == ["a", "1,234.6", "2,000.0", "0.988", "1.50", "61", "12.5%", "412",
                       "1,200", "100.00", "80.00", "hold", "90.00", "0.46"]
    # a budget-only queue without a budget, and no static run to compare with: dashes
    assert rows[1] == ["b", "1.0", "—", "—", "1.00", "0", "—", "—", "3", "0.50", "—", "—",
                       "—", "—"]
    assert len(rows[0]) == len(TEAM_COLUMNS) + 1


def test_only_scenarios_with_teams_get_a_table_and_a_plot() -> None:
    summaries = {"static": {"utilization": 0.5}, "teams": {"teams": TEAMS}}
    tables = team_tables(summaries)
    assert [t.title for t in tables] == ["teams: per team"]
    assert "worst team delivered 0.900" in str(tables[0].caption)
    s = Series(t=[0.0, 600.0], team_gpus={"a": [1.0, 2.0], "b": [0.0, 1.0]})
    found = team_charts(summaries, {"teams": s})
    assert list(found) == ["teams"]
    assert [line["label"] for line in found["teams"]["series"]] == ["a", "b"]
    assert found["teams"]["series"][0]["values"] == [1.0, 2.0]
    out = teams_html(summaries, {n: c["id"] for n, c in found.items()})
    assert out.startswith("<h2>Teams</h2><h3>teams</h3>")
    assert f'<div class="chart" id="{found["teams"]["id"]}">' in out
    assert 'data-team="a" data-key="spend_usd" data-value="99.999">100.00</td>' in out
    assert teams_html({"static": {}}, {}) == ""
