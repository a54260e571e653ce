"""The cost–lateness frontier: one scenario run at several values of time, against ``static``.

A value of time ``v`` ($ per GPU-hour of delay, ``control.value_of_time``) trades dollars for
lateness: the spot launch rule, the on-demand → spot swap and the gang room each price a move's
delay at ``v``, so a higher ``v`` buys fewer reclaims, swaps and evictions at a higher bill.
``gpufleet simulate --frontier V1,V2,...`` runs ``static`` once and the ``gpufleet`` scenario
once per ``v`` (named ``gpufleet-v10`` and so on; the scenario's own ``v`` is always among them,
so where it stands is marked), all in the one batch ``simulate`` runs (``sim.batch.run_all``),
and gives each point:

* ``cost_vs_static``: cost / ``static``'s cost;
* ``late_over_5min_share``: share of ``static``'s finished jobs finishing > 5 min later;
* ``jct_p95_vs_static``: JCT p95 / ``static``'s JCT p95;
* ``delay_vs_static_p95_s`` / ``_p99_s``: finish here − finish under ``static``
  (``sim.summary.delay_vs_static``).

``v`` is the scenario's value: jobs and teams that set their own keep theirs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from gpufleet.config import Scenario
from gpufleet.errors import InputError
from gpufleet.sim.team_report import fmt_cell
from gpufleet.tables import DataTable
from gpufleet.traces.jobs import MAX_VALUE_OF_TIME

MAX_POINTS = 32  # each one is a full simulation
DEFAULT_VALUES = "0,1,3,10,30,100"  # what the docs suggest: a decade in two steps

# (key of a point, column title, format): the table and report.html's frontier table
FRONTIER_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("v_usd_per_gpu_hour", "v $/GPU-h", "{:g}"),  # cost $ is in the side-by-side table
    ("cost_vs_static", "cost × static", "{:.3f}"),
    ("late_over_5min_share", "late > 5 min", "{:.1%}"),
    ("jct_p95_vs_static", "JCT p95 × static", "{:.3f}"),
    ("delay_vs_static_p95_s", "delay p95 s", "{:,.0f}"),
    ("delay_vs_static_p99_s", "delay p99 s", "{:,.0f}"),
)


def parse_values(text: str) -> list[float]:
    """``--frontier``'s values of time: comma-separated numbers of $ per GPU-hour in
    [0, 1e6], each once, at most ``MAX_POINTS``; ascending."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise InputError(f"no value of time in {text!r}; e.g. {DEFAULT_VALUES}",
                         field="--frontier")
    out: list[float] = []
    for t in items:
        try:
            v = float(t)
        except ValueError:
            v = math.nan
        if not (math.isfinite(v) and 0 <= v <= MAX_VALUE_OF_TIME):
            raise InputError(f"{t!r} is not a value of time: a number of dollars per GPU-hour "
                             f"in [0, {MAX_VALUE_OF_TIME:g}]", field="--frontier")
        if v in out:
            raise InputError(f"{t!r} is given twice", field="--frontier")
        out.append(v)
    if len(out) > MAX_POINTS:
        raise InputError(f"{len(out)} values of time; at most {MAX_POINTS} (each is a "
                         "simulation)", field="--frontier")
    return sorted(out)


def v_text(v: float) -> str:
    """``v`` as a name suffix: plain decimals, no exponent (``10``, ``0.5``, ``1000000``)."""
    return f"{v:f}".rstrip("0").rstrip(".")


def frontier_scenarios(base: Scenario, values: list[float]) -> list[Scenario]:
    """``base`` once per value of time (its own value added where missing), named
    ``{base}-v{v}``, validated as a scenario file's would be."""
    own = base.value_of_time_usd_per_gpu_hour
    out = []
    for v in sorted({*values, own}):
        data = {**base.model_dump(), "name": f"{base.name}-v{v_text(v)}",
                "value_of_time_usd_per_gpu_hour": v}
        try:
            out.append(Scenario.model_validate(data))
        except ValidationError as exc:
            raise InputError(f"scenario {base.name!r} at v = {v:g}: "
                             f"{exc.errors()[0]['msg']}", field="--frontier") from None
    return out


def frontier(summaries: Mapping[str, Mapping[str, Any]],
             points: list[Scenario], base: Scenario) -> dict[str, Any]:
    """summary.json's ``frontier``: ``base``'s configured value of time and a point per run
    of ``points`` (module docstring), read from ``summaries`` after ``add_relative``."""
    static = summaries["static"]
    rows = []
    for sc in points:
        s = summaries[sc.name]
        v = sc.value_of_time_usd_per_gpu_hour
        rows.append({
            "scenario": sc.name, "v_usd_per_gpu_hour": v,
            "configured": v == base.value_of_time_usd_per_gpu_hour,
            "cost_usd": s["cost_usd"], "cost_vs_static": s.get("cost_vs_static"),
            "late_over_5min_share": s.get("late_over_5min_share"),
            "jct_p95_vs_static": s["jct_p95_s"] / static["jct_p95_s"]
            if static["jct_p95_s"] else None,
            "delay_vs_static_p95_s": s.get("delay_vs_static_p95_s"),
            "delay_vs_static_p99_s": s.get("delay_vs_static_p99_s"),
        })
    return {"scenario": base.name,
            "configured_v_usd_per_gpu_hour": base.value_of_time_usd_per_gpu_hour,
            "points": rows}


def frontier_table(front: Mapping[str, Any]) -> DataTable:
    """A row per value of time; the configured one marked with a *."""
    t = DataTable(f"{front['scenario']}: cost against lateness by value of time (v; "
                  "* = the scenario's own)",
                  [label for _, label, _ in FRONTIER_COLUMNS],
                  numeric=[True for _ in FRONTIER_COLUMNS])
    for p in front["points"]:
        cells = [fmt_cell(fmt, p.get(key)) for key, _, fmt in FRONTIER_COLUMNS]
        if p["configured"]:
            cells[0] += " *"
        t.add_row(*cells, values=[p.get(key) for key, _, _ in FRONTIER_COLUMNS])
    return t


def frontier_chart(front: Mapping[str, Any], cid: str = "chart-frontier") -> dict[str, Any]:
    """report.html's chart: cost × static (y) against the late share (x), a point per value
    of time in order of the late share, and the configured one again as its own series."""
    pts = sorted((p for p in front["points"] if p["late_over_5min_share"] is not None
                  and p["cost_vs_static"] is not None),
                 key=lambda p: (p["late_over_5min_share"], p["v_usd_per_gpu_hour"]))
    xs = [round(float(p["late_over_5min_share"]), 6) for p in pts]
    return {"id": cid, "title": f"{front['scenario']}: cost against lateness, one point per "
                                "value of time",
            "xlabel": "late > 5 min (share of jobs)", "ylabel": "cost × static", "points": True,
            "x": xs,
            "labels": [f"v = {p['v_usd_per_gpu_hour']:g}" for p in pts],
            "series": [
                {"label": "frontier", "dash": False,
                 "values": [round(float(p["cost_vs_static"]), 6) for p in pts]},
                {"label": f"configured v = {front['configured_v_usd_per_gpu_hour']:g}",
                 "dash": False, "only_points": True,
                 "values": [round(float(p["cost_vs_static"]), 6) if p["configured"] else None
                            for p in pts]},
            ]}
