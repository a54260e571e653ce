"""summary.json and the tables: what a run prints and writes (report.html: ``sim.report_html``).

Three views of one run: the side-by-side table (baselines, gpufleet and any scenario not in a
view below), the leave-one-out table (gpufleet minus each lever) and the additive chain
(static → +autoscaling+packing → +sharing → +spot → +checkpointing). Costs are given against
each baseline (peak-sized ``static``, right-sized ``static-p99``, ``static-reserved``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gpufleet.config import BASELINES, CHAIN, LEVERS
from gpufleet.sim.summary import delay_vs_static, late_share
from gpufleet.sim.team_report import fmt_cell as _fmt
from gpufleet.tables import DataTable

# (summary key, column title, format) — the side-by-side table in the terminal and the HTML
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("utilization", "GPU util", "{:.1%}"),
    ("cost_usd", "cost $", "{:,.0f}"),
    ("cost_vs_static", "cost vs static", "{:.1%}"),
    ("cost_vs_static_p99", "cost vs static-p99", "{:.1%}"),
    ("cost_vs_static_reserved", "cost vs static-reserved", "{:.1%}"),
    ("cost_per_useful_gpu_hour", "$/useful GPU-h", "{:.2f}"),
    ("allocated_gpu_hours", "allocated GPU-h", "{:,.0f}"),
    ("jct_p50_s", "JCT p50 s", "{:,.0f}"),
    ("jct_p95_s", "JCT p95 s", "{:,.0f}"),
    ("jct_mean_s", "JCT mean s", "{:,.0f}"),
    ("late_over_5min_share", "late > 5 min vs static", "{:.1%}"),
    ("delay_vs_static_p50_s", "delay vs static p50 s", "{:,.0f}"),
    ("delay_vs_static_p95_s", "delay vs static p95 s", "{:,.0f}"),
    ("delay_vs_static_p99_s", "delay vs static p99 s", "{:,.0f}"),
    ("delay_vs_run_time_p95_s", "time not running p95 s", "{:,.0f}"),
    ("delay_over_run_time_p95", "not running / run time p95", "{:.2f}"),
    ("queue_p95_s", "queue p95 s", "{:,.0f}"),
    ("interruptions", "interruptions", "{:,}"),
    ("node_failures", "node failures", "{:,}"),
    ("lost_gpu_hours", "lost GPU-h", "{:,.1f}"),
    ("recovery_p50_s", "recovery p50 s", "{:,.0f}"),
    ("recovery_p95_s", "recovery p95 s", "{:,.0f}"),
    ("deadline_misses", "deadline misses", "{:,}"),
    ("deadline_misses_infeasible", "of which infeasible", "{:,}"),
    ("jobs_finished", "finished", "{:,}"),
    ("jobs_lost", "lost", "{:,}"),
    ("spot_share_gpu_hours", "spot share", "{:.0%}"),
    ("wall_seconds", "wall s", "{:.1f}"),
)


# columns of the leave-one-out and chain tables (one row per scenario)
VIEW_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("cost_usd", "cost $", "{:,.0f}"),
    ("cost_vs_static", "vs static", "{:.1%}"),
    ("cost_vs_static_p99", "vs static-p99", "{:.1%}"),
    ("cost_vs_gpufleet", "vs gpufleet", "{:.1%}"),
    ("utilization", "GPU util", "{:.1%}"),
    ("jct_p50_s", "JCT p50 s", "{:,.0f}"),
    ("jct_p95_s", "JCT p95 s", "{:,.0f}"),
    ("jct_mean_s", "JCT mean s", "{:,.0f}"),
    ("late_over_5min_share", "late > 5 min", "{:.1%}"),
    ("delay_vs_static_p95_s", "delay p95 s", "{:,.0f}"),
    ("lost_gpu_hours", "lost GPU-h", "{:,.1f}"),
    ("jobs_lost", "jobs lost", "{:,}"),
)
BASELINE_KEYS = {"static": "cost_vs_static", "static-p99": "cost_vs_static_p99",
                 "static-reserved": "cost_vs_static_reserved", "gpufleet": "cost_vs_gpufleet"}


def add_relative(
    summaries: dict[str, dict[str, Any]],
    finishes: dict[str, dict[str, float | None]] | None = None,
    tenants: Mapping[str, str] | None = None,
) -> None:
    """Cost against each baseline present, and the late share and delay against ``static``'s
    finishes (``sim.summary.delay_vs_static``); with ``tenants`` (job id → team), each
    per-team row of a scenario with teams gains its team's late share and delay p95."""
    for base, key in BASELINE_KEYS.items():
        cost = summaries.get(base, {}).get("cost_usd")
        for s in summaries.values():
            s[key] = s["cost_usd"] / cost if cost else None
    if finishes and "static" in finishes:
        static = finishes["static"]
        for name, s in summaries.items():
            if name in finishes:
                s["late_over_5min_share"] = late_share(finishes[name], static)
                s.update(delay_vs_static(finishes[name], static))
                if tenants is not None and s.get("teams"):
                    s["teams"] = team_delays(s["teams"], finishes[name], static, tenants)


def team_delays(teams: dict[str, Any], finishes: dict[str, float | None],
                baseline: dict[str, float | None],
                tenants: Mapping[str, str]) -> dict[str, Any]:
    """A copy of a summary's ``teams`` block whose per-team rows carry the team's own
    ``late_over_5min_share`` and ``delay_vs_static_p95_s`` (over the team's jobs only)."""
    per: dict[str, Any] = {}
    for team, row in teams["per_team"].items():
        mine = {k for k, t in tenants.items() if t == team}
        here = {k: v for k, v in finishes.items() if k in mine}
        base = {k: v for k, v in baseline.items() if k in mine}
        per[team] = {**row, "late_over_5min_share": late_share(here, base),
                     "delay_vs_static_p95_s": delay_vs_static(here, base)[
                         "delay_vs_static_p95_s"]}
    return {**teams, "per_team": per}


def ablation_rows(summaries: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Leave-one-out: lever → scenario name (gpufleet without that lever), where it ran."""
    return {lv: f"gpufleet-no-{lv}" for lv in LEVERS if f"gpufleet-no-{lv}" in summaries}


def chain_rows(summaries: dict[str, dict[str, Any]]) -> list[tuple[str, str]]:
    """The additive chain as (row label, scenario name), when every step ran."""
    if not all(name in summaries for name, _ in CHAIN):
        return []
    return [(name if not add else "+" + "+".join(add), name) for name, add in CHAIN]


def views(summaries: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The top-level summary.json keys: ``baselines``, ``ablation`` and ``chain``."""
    return {
        "baselines": {b: summaries[b]["cost_usd"] for b in BASELINES if b in summaries},
        "ablation": {lv: {"scenario": name, **summaries[name]}
                     for lv, name in ablation_rows(summaries).items()},
        "chain": [{"step": label, "scenario": name, **summaries[name]}
                  for label, name in chain_rows(summaries)],
    }


def _view_tables(summaries: dict[str, dict[str, Any]]) -> list[tuple[str, list[tuple[str, str]]]]:
    out = []
    loo = ablation_rows(summaries)
    if loo and "gpufleet" in summaries:
        rows = [("gpufleet (all levers)", "gpufleet")]
        rows += [(f"gpufleet − {lv}", name) for lv, name in loo.items()]
        out.append(("Leave-one-out: gpufleet without each lever", rows))
    chain = chain_rows(summaries)
    if chain:
        out.append(("Additive chain: levers added one step at a time", chain))
    return out


def side_by_side(summaries: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The scenarios of the main table: all but those shown only in the view tables."""
    in_views = set(ablation_rows(summaries).values()) | {n for _, n in chain_rows(summaries)}
    keep = set(BASELINES) | {"gpufleet"}
    return {k: v for k, v in summaries.items() if k in keep or k not in in_views}


def summary_json(summaries: dict[str, dict[str, Any]], wall_s: float, meta: dict[str, Any],
                 frontier: Mapping[str, Any] | None = None) -> str:
    """summary.json: every scenario, the views, and (``--frontier``) the ``frontier``."""
    extra = {"frontier": frontier} if frontier is not None else {}
    return json.dumps(
        {"scenarios": summaries, **views(summaries), **extra, "wall_seconds": wall_s, **meta},
        indent=2, sort_keys=False,
    )




def side_table(summaries: dict[str, dict[str, Any]], title: str) -> DataTable:
    """The side-by-side table: a row per metric, a column per scenario."""
    main = side_by_side(summaries)
    t = DataTable(title, ["metric", *main], numeric=[False, *(True for _ in main)])
    for key, label, fmt in COLUMNS:
        t.add_row(label, *(_fmt(fmt, s.get(key)) for s in main.values()),
                  values=[label, *(s.get(key) for s in main.values())])
    return t


def view_tables(summaries: dict[str, dict[str, Any]]) -> list[DataTable]:
    """The leave-one-out and chain tables (one row per scenario), where their scenarios ran."""
    out = []
    for title, rows in _view_tables(summaries):
        t = DataTable(title, ["scenario", *(label for _, label, _ in VIEW_COLUMNS)],
                      numeric=[False, *(True for _ in VIEW_COLUMNS)])
        for label, name in rows:
            s = summaries[name]
            t.add_row(label, *(_fmt(fmt, s.get(key)) for key, _, fmt in VIEW_COLUMNS),
                      values=[label, *(s.get(key) for key, _, _ in VIEW_COLUMNS)])
        out.append(t)
    return out
