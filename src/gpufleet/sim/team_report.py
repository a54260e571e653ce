"""The per-team part of the simulator's output: a table per scenario with a ``teams:`` section
(the terminal; report.html draws the same columns, ``sim.report_html``).

Reads only the summary's ``teams`` block (``sim.summary.team_figures`` defines every figure);
scenarios without teams add nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpufleet.tables import DataTable

# (key in the per-team row, column label, format); None values print as "—"
TEAM_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("gpu_hours_used", "GPU-h used", "{:,.1f}"),
    ("gpu_hours_entitled", "GPU-h entitled", "{:,.1f}"),
    ("entitled_delivered", "entitled delivered", "{:.3f}"),
    ("slowdown_mean", "JCT slowdown", "{:.2f}"),
    ("queue_mean_s", "queueing mean s", "{:,.0f}"),
    ("late_over_5min_share", "late > 5 min", "{:.1%}"),
    ("delay_vs_static_p95_s", "delay vs static p95 s", "{:,.0f}"),
    ("jobs_finished", "jobs done", "{:,}"),
    ("spend_usd", "spend $", "{:,.2f}"),
    ("budget_usd", "budget $", "{:,.2f}"),
    ("budget_action", "action", "{}"),
    ("budget_peak_spend_usd", "peak period $", "{:,.2f}"),
    ("overspend_hours", "overspend h", "{:.2f}"),
)


def fmt_cell(fmt: str, v: Any) -> str:
    """A table cell: ``v`` by ``fmt``, "—" for a missing value, ``str`` when it will not
    format (the report's tables use it too)."""
    if v is None:
        return "—"
    try:
        return fmt.format(v)
    except (ValueError, TypeError):
        return str(v)


def team_rows(teams: Mapping[str, Any]) -> list[list[str]]:
    """One row of cells per team (``TEAM_COLUMNS``), the team's name first."""
    return [[name, *(fmt_cell(fmt, row.get(key)) for key, _, fmt in TEAM_COLUMNS)]
            for name, row in teams["per_team"].items()]


def _footer(teams: Mapping[str, Any]) -> str:
    worst = teams.get("worst_entitled_delivered")
    return (f"Jain's index (used / entitled) {teams['jain_index']:.3f}; over entitled "
            f"delivered {teams.get('jain_index_delivered', 1.0):.3f}; worst team delivered "
            f"{'—' if worst is None else f'{worst:.3f}'}; unattributed spend "
            f"${teams.get('unattributed_usd') or 0.0:,.2f}")


def team_tables(summaries: Mapping[str, Mapping[str, Any]]) -> list[DataTable]:
    """A table per scenario that has teams."""
    out = []
    for name, s in summaries.items():
        teams = s.get("teams")
        if not teams:
            continue
        t = DataTable(f"{name}: per team", ["team", *(label for _, label, _ in TEAM_COLUMNS)],
                      numeric=[False, *(True for _ in TEAM_COLUMNS)], caption=_footer(teams))
        for cells, (team, row) in zip(team_rows(teams), teams["per_team"].items(),
                                      strict=True):
            t.add_row(*cells, values=[team, *(row.get(key) for key, _, _ in TEAM_COLUMNS)])
        out.append(t)
    return out
