"""report.html: one self-contained page to open offline — the run, its scenario settings, its
tables and interactive charts.

The charts are drawn by uPlot (MIT licence, ``gpufleet/sim/assets``), inlined into the page with
the data: no CDN, no network, one file to attach to a ticket. Each chart has a legend that shows
the values under the cursor and hides a scenario on click; drag to zoom, double-click to reset.
A series is thinned to at most ``MAX_POINTS`` samples (every k-th and the last) so a months-long
replay stays a page a browser opens at once.

Every table cell that shows a summary figure carries it as data (``data-scenario``,
``data-team`` or, for a ``--frontier`` point, ``data-frontier``; ``data-key`` and
``data-value``, the JSON value summary.json holds), so what the page shows can be checked
against summary.json, and the charts are in ``window.gpufleetCharts``. With ``--frontier`` the
page has the cost-against-lateness chart too (``sim.frontier.frontier_chart``): the late share
across, the cost against ``static`` up, drawn with a point per value of time.
"""

from __future__ import annotations

import bisect
import html
import json
import math
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from gpufleet.sim.books import Series
from gpufleet.sim.frontier import FRONTIER_COLUMNS, choice_text, frontier_chart
from gpufleet.sim.report import COLUMNS, VIEW_COLUMNS, _view_tables, side_by_side, summary_json
from gpufleet.sim.team_report import TEAM_COLUMNS, _footer, fmt_cell

MAX_POINTS = 1500  # per line: a months-long replay samples tens of thousands of times
DAY_S = 86400.0


def thinned(n: int, limit: int = MAX_POINTS) -> list[int]:
    """Indices of at most ``limit`` (+1) of ``n`` samples: every k-th, and the last."""
    if n <= limit:
        return list(range(n))
    step = math.ceil(n / limit)
    idx = list(range(0, n, step))
    if idx[-1] != n - 1:
        idx.append(n - 1)
    return idx


def charts(series: Mapping[str, Series]) -> list[dict[str, Any]]:
    """The charts over time, one line per scenario (the fleet chart: on-demand and spot GPUs of
    each scenario that ran spot, plus ``static`` and ``gpufleet``)."""
    specs: list[tuple[str, str, Any]] = [
        ("GPU utilisation (allocated / provisioned)", "fraction",
         lambda s: [a / max(1, o + p) for a, o, p in zip(s.alloc_gpus, s.od_gpus, s.spot_gpus,
                                                         strict=True)]),
        ("Cumulative cost (USD)", "USD", lambda s: s.cost_usd),
        ("Spot interruptions (cumulative)", "job interruptions", lambda s: s.interruptions),
        ("Queue length (pending jobs)", "jobs", lambda s: s.pending),
    ]
    out = []
    for k, (title, ylabel, fn) in enumerate(specs):
        out.append(chart(f"chart-{k}", title, ylabel,
                         [(name, s.t, fn(s), False) for name, s in series.items()]))
    fleet = []
    for name, s in series.items():
        if not any(s.spot_gpus) and name not in ("static", "gpufleet"):
            continue
        fleet.append((f"{name} on-demand", s.t, s.od_gpus, False))
        if any(s.spot_gpus):
            fleet.append((f"{name} spot", s.t, s.spot_gpus, True))
    out.append(chart("chart-fleet", "Fleet size by capacity type (GPUs)", "GPUs", fleet))
    return out


def chart(cid: str, title: str, ylabel: str,
          lines: Sequence[tuple[str, Sequence[float], Sequence[float], bool]]) -> dict[str, Any]:
    """One chart of step series ``(label, times, values, dashed)`` on one x axis: the sample
    times of the line with the most samples, thinned. Each line shows, at each x, its latest
    sample at or before x, and nothing (null) before its first or after its last sample, so
    lines sampled at other times or ending earlier are drawn where they have data only."""
    longest = max((t for _, t, _, _ in lines), key=len, default=[])
    grid = [longest[i] for i in thinned(len(longest))]
    out = []
    for label, t, values, dash in lines:
        ys: list[float | None] = []
        for x in grid:
            i = bisect.bisect_right(t, x) - 1
            ys.append(None if i < 0 or x > t[-1] else round(float(values[i]), 6))
        out.append({"label": label, "values": ys, "dash": dash})
    return {"id": cid, "title": title, "ylabel": ylabel,
            "x": [round(x / DAY_S, 6) for x in grid], "series": out}


def team_charts(summaries: Mapping[str, Mapping[str, Any]],
                series: Mapping[str, Series]) -> dict[str, dict[str, Any]]:
    """Per scenario with teams: each team's GPU-equivalents in use over time."""
    out = {}
    for k, (name, s) in enumerate(summaries.items()):
        ser = series.get(name)
        if not s.get("teams") or ser is None or not ser.team_gpus:
            continue
        out[name] = chart(f"chart-team-{k}", f"{name}: GPU-equivalents in use per team", "GPUs",
                          [(team, ser.t, ser.team_gpus[team], False)
                           for team in sorted(ser.team_gpus)])
    return out


def _td(text: str, value: Any, **data: str) -> str:
    attrs = "".join(f' data-{k}="{html.escape(v)}"' for k, v in data.items())
    return (f'<td{attrs} data-value="{html.escape(json.dumps(value))}">'
            f"{html.escape(text)}</td>")


def tables_html(summaries: Mapping[str, Mapping[str, Any]]) -> str:
    """The side-by-side table and the leave-one-out and chain views, each figure's cell
    carrying its summary value."""
    main = side_by_side(dict(summaries))  # type: ignore[arg-type]
    head = "".join(f"<th>{html.escape(n)}</th>" for n in main)
    rows = "".join(
        f"<tr><td>{html.escape(label)}</td>"
        + "".join(_td(fmt_cell(fmt, s.get(key)), s.get(key), scenario=name, key=key)
                  for name, s in main.items())
        + "</tr>"
        for key, label, fmt in COLUMNS)
    out = [f"<h2>Scenarios side by side</h2><table><tr><th>metric</th>{head}</tr>{rows}</table>"]
    for title, vrows in _view_tables(dict(summaries)):  # type: ignore[arg-type]
        vhead = "".join(f"<th>{html.escape(label)}</th>" for _, label, _ in VIEW_COLUMNS)
        body = "".join(
            f"<tr><td>{html.escape(label)}</td>"
            + "".join(_td(fmt_cell(fmt, summaries[name].get(key)), summaries[name].get(key),
                          scenario=name, key=key) for key, _, fmt in VIEW_COLUMNS)
            + "</tr>"
            for label, name in vrows)
        out.append(f"<h2>{html.escape(title)}</h2>"
                   f"<table><tr><th>scenario</th>{vhead}</tr>{body}</table>")
    return "\n".join(out)


def teams_html(summaries: Mapping[str, Mapping[str, Any]], chart_ids: Mapping[str, str]) -> str:
    """Per scenario with teams: its table (cells carry ``data-team``) and its chart."""
    parts = []
    head = "".join(f"<th>{html.escape(label)}</th>" for _, label, _ in TEAM_COLUMNS)
    for name, s in summaries.items():
        teams = s.get("teams")
        if not teams:
            continue
        body = "".join(
            f"<tr><td>{html.escape(team)}</td>"
            + "".join(_td(fmt_cell(fmt, row.get(key)), row.get(key), scenario=name, team=team,
                          key=key) for key, _, fmt in TEAM_COLUMNS)
            + "</tr>"
            for team, row in teams["per_team"].items())
        parts.append(f"<h3>{html.escape(name)}</h3><table><tr><th>team</th>{head}</tr>{body}"
                     f"</table><p>{html.escape(_footer(teams))}</p>")
        if name in chart_ids:
            parts.append(f'<div class="chart" id="{chart_ids[name]}"></div>')
    return "<h2>Teams</h2>" + "".join(parts) if parts else ""


def frontier_html(front: Mapping[str, Any] | None, chart_id: str) -> str:
    """``--frontier``: its table (cells carry ``data-frontier``, the point's scenario), the
    choice (``sim.frontier.choose``: the smallest v meeting the targets, else the knee) and its
    chart; "" without one."""
    if front is None:
        return ""
    head = "".join(f"<th>{html.escape(label)}</th>" for _, label, _ in FRONTIER_COLUMNS)
    body = "".join(
        "<tr>" + "".join(_td(fmt_cell(fmt, p.get(key)) + (" *" if p["configured"] and i == 0
                                                           else ""),
                             p.get(key), frontier=p["scenario"], key=key)
                         for i, (key, _, fmt) in enumerate(FRONTIER_COLUMNS)) + "</tr>"
        for p in front["points"])
    return (f"<h2>Cost against lateness: the value of time</h2><p>{html.escape(front['scenario'])}"
            " once per value of time v ($ per GPU-hour of delay), against static; * marks the "
            "scenario's own v. A higher v buys fewer late jobs at a higher cost: choose the "
            f"point whose trade you want.</p><table><tr>{head}</tr>{body}</table>"
            f'<p id="frontier-choice">{html.escape(choice_text(front))}</p>'
            f'<div class="chart" id="{chart_id}"></div>')


def _asset(name: str) -> str:
    return resources.files("gpufleet.sim").joinpath("assets", name).read_text(encoding="utf-8")


# builds each chart of the data block with uPlot; the charts stay in window.gpufleetCharts
_SCRIPT = """
const data = JSON.parse(document.getElementById("gpufleet-data").textContent);
const palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                 "#7f7f7f", "#bcbd22", "#17becf"];
window.gpufleetCharts = data.charts.map((c) => {
  const el = document.getElementById(c.id);
  const xlabel = c.xlabel || "day";
  const opts = {
    title: c.title, width: Math.max(600, Math.min(1100, el.clientWidth || 1100)), height: 320,
    scales: {x: {time: false}},
    axes: [{label: xlabel}, {label: c.ylabel, size: 70}],
    series: [{label: xlabel}, ...c.series.map((s, i) => ({
      label: s.label, stroke: palette[i % palette.length], width: s.only_points ? 0 : 1.5,
      dash: s.dash ? [6, 4] : undefined, spanGaps: false,
      points: c.points ? {show: true, size: s.only_points ? 14 : 7} : undefined}))],
  };
  return new uPlot(opts, [c.x, ...c.series.map((s) => s.values)], el);
});
"""


def report_html(summaries: Mapping[str, Mapping[str, Any]], series: Mapping[str, Series],
                meta: Mapping[str, Any], notes: Sequence[str] = (),
                settings: Mapping[str, Mapping[str, Any]] | None = None,
                frontier: Mapping[str, Any] | None = None) -> str:
    """The page: what ran (workload, seed, each scenario's settings), the tables, the charts
    (``frontier``: its table and cost-against-lateness chart too)."""
    main = side_by_side(dict(summaries))  # type: ignore[arg-type]
    over_time = charts({k: v for k, v in series.items() if k in main})
    per_team = team_charts(summaries, series)
    front = [frontier_chart(frontier)] if frontier is not None else []
    meta_rows = "".join(
        f"<li><b>{html.escape(str(k))}</b>: {html.escape(str(v))}</li>" for k, v in meta.items())
    note_rows = "".join(f"<li>{html.escape(n)}</li>" for n in notes)
    setting_rows = "".join(
        f"<details><summary>{html.escape(name)}</summary><pre>"
        f"{html.escape(json.dumps(sc, indent=2, sort_keys=True))}</pre></details>"
        for name, sc in (settings or {}).items())
    chart_divs = "".join(f'<div class="chart" id="{c["id"]}"></div>' for c in over_time)
    # "</" inside a script element would end it: JSON escapes it as "<\\/"
    blob = json.dumps({"charts": [*over_time, *per_team.values(), *front]}).replace(
        "</", "<\\/")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>gpufleet simulate</title>
<style>{_asset("uPlot.min.css")}</style>
<style>body{{font-family:sans-serif;margin:2em;max-width:1150px}}
table{{border-collapse:collapse;margin-bottom:1em}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}
td:first-child{{text-align:left}}.chart{{margin:1em 0}}pre{{background:#f6f6f6;padding:.5em}}
</style></head><body>
<h1>gpufleet simulate</h1><ul>{meta_rows}</ul>
<h2>Scenario settings</h2><p>Each scenario's settings that differ from the defaults.</p>
{setting_rows}
{tables_html(summaries)}
<ul>{note_rows}</ul>
{frontier_html(frontier, front[0]["id"] if front else "")}
{teams_html(summaries, {n: c['id'] for n, c in per_team.items()})}
<h2>Over time</h2><p>Hover for values; click a legend entry to hide it; drag to zoom,
double-click to reset.</p>{chart_divs}
<script id="gpufleet-data" type="application/json">{blob}</script>
<script>{_asset("uPlot.iife.min.js")}</script>
<script>{_SCRIPT}</script>
</body></html>
"""


def write_outputs(out_dir: Path, summaries: dict[str, dict[str, Any]],
                  series: Mapping[str, Series], wall_s: float, meta: dict[str, Any],
                  notes: Sequence[str] = (),
                  settings: Mapping[str, Mapping[str, Any]] | None = None,
                  frontier: Mapping[str, Any] | None = None) -> tuple[Path, Path]:
    """``summary.json`` and ``report.html`` in ``out_dir``; their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    js = out_dir / "summary.json"
    js.write_text(summary_json(summaries, wall_s, meta, frontier), encoding="utf-8")
    rep = out_dir / "report.html"
    rep.write_text(report_html(summaries, series, meta, notes, settings, frontier),
                   encoding="utf-8")
    return js, rep
