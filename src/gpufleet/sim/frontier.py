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

Which ``v`` to run (:func:`choose`): the smallest that meets both **targets** — at most
``LATE_TARGET`` (5 %) of jobs > 5 min late, at a cost within ``COST_TARGET`` (+5 %) of the
frontier's ``v`` = 0 point, the rules with no price on delay — else the frontier's **knee**
(:func:`knee`). ``v`` = 0 is always among the points, as the cost target's reference. Over
several workloads, :func:`worst_case` gives the frontier a choice has to hold on: per ``v``,
the worst cost relative to each workload's own ``v`` = 0 and the worst late share.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from gpufleet.config import Scenario
from gpufleet.errors import InputError
from gpufleet.sim.team_report import fmt_cell
from gpufleet.tables import DataTable
from gpufleet.traces.jobs import MAX_VALUE_OF_TIME

MAX_POINTS = 32  # each one is a full simulation
DEFAULT_VALUES = "0,1,3,10,30,100"  # what the docs suggest: a decade in two steps
LATE_TARGET = 0.05  # at most this share of jobs finishing > 5 min later than under static
COST_TARGET = 1.05  # at most this × the cost at v = 0

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
    """``base`` once per value of time (its own value and 0, the cost target's reference,
    added where missing), named ``{base}-v{v}``, validated as a scenario file's would be."""
    own = base.value_of_time_usd_per_gpu_hour
    out = []
    for v in sorted({*values, own, 0.0}):
        data = {**base.model_dump(), "name": f"{base.name}-v{v_text(v)}",
                "value_of_time_usd_per_gpu_hour": v}
        try:
            out.append(Scenario.model_validate(data))
        except ValidationError as exc:
            raise InputError(f"scenario {base.name!r} at v = {v:g}: "
                             f"{exc.errors()[0]['msg']}", field="--frontier") from None
    return out


@dataclass(frozen=True, slots=True)
class Point:
    """One value of time's figures: ``cost`` in any unit all points share (× static, $, × the
    cost at ``v`` = 0), ``late``: the share of jobs > 5 min later than under static."""

    v: float
    cost: float
    late: float


@dataclass(frozen=True, slots=True)
class Choice:
    """:func:`choose`'s answer: the ``v`` chosen, ``by`` which rule (``"targets"``: the
    smallest ``v`` meeting both; ``"knee"``: none does), the knee's ``v`` and the values
    that meet the targets (ascending)."""

    v: float
    by: str
    knee_v: float
    meeting: tuple[float, ...]


def meets_targets(p: Point, reference_cost: float, late_max: float = LATE_TARGET,
                  cost_max: float = COST_TARGET) -> bool:
    """``p`` is late for at most ``late_max`` of jobs at a cost at most ``cost_max`` × the
    reference's (the ``v`` = 0 point's)."""
    return p.late <= late_max and p.cost <= cost_max * reference_cost


def pareto(points: Sequence[Point]) -> list[Point]:
    """The points no other point beats: none is at most as dear and as late and strictly
    better on one; of points equal on both, the smallest ``v``. In order of ``v``."""
    out = []
    for p in points:
        beaten = any((q.cost <= p.cost and q.late <= p.late
                      and (q.cost < p.cost or q.late < p.late))
                     or (q.cost == p.cost and q.late == p.late and q.v < p.v) for q in points)
        if not beaten:
            out.append(p)
    return sorted(out, key=lambda p: p.v)


def knee(points: Sequence[Point]) -> float:
    """The ``v`` where the frontier bends: Kneedle's rule (Satopää et al., 2011) on the
    cost–lateness plane. On the Pareto points (:func:`pareto`), cost and late share each
    scaled to [0, 1] over their range, draw the chord from the cheapest point to the least
    late one; the knee is the point farthest from it on the side of the origin (cheap *and*
    on time): past it, each step buys less lateness per dollar than the chord's average.
    Ties go to the smaller ``v``. With no point off the chord on that side (two points, a
    straight or a bowed-out frontier) or one point beating all, the knee is the cheapest
    point: no bend says a higher ``v`` is worth its price.

    Scaling to the ranges makes the rule independent of the units (a cost × static of 0.2
    against a late share of 0.1 would otherwise weigh one axis by the other's scale)."""
    if not points:
        raise ValueError("no point on the frontier")
    front = pareto(points)
    cheap = min(front, key=lambda p: (p.cost, p.late, p.v))
    prompt = min(front, key=lambda p: (p.late, p.cost, p.v))
    dc = prompt.cost - cheap.cost
    dl = cheap.late - prompt.late
    if dc <= 0 or dl <= 0:  # one point beats or equals all others
        return cheap.v
    best, best_d = cheap.v, 0.0
    for p in front:
        x = (p.late - prompt.late) / dl  # 1 at the cheapest point, 0 at the least late
        y = (p.cost - cheap.cost) / dc  # 0 at the cheapest point, 1 at the least late
        d = (1.0 - x - y) / math.sqrt(2.0)  # distance from the chord x + y = 1, origin side
        if d > best_d + 1e-12:
            best, best_d = p.v, d
    return best


def choose(points: Sequence[Point], late_max: float = LATE_TARGET,
           cost_max: float = COST_TARGET) -> Choice:
    """The value of time to run: the smallest ``v`` meeting both targets
    (:func:`meets_targets`, against the cost of the smallest ``v`` among the points: the
    frontier's ``v`` = 0), else the knee (:func:`knee`)."""
    if not points:
        raise ValueError("no point on the frontier")
    ref = min(points, key=lambda p: p.v).cost
    meeting = tuple(sorted(p.v for p in points if meets_targets(p, ref, late_max, cost_max)))
    k = knee(points)
    return Choice(meeting[0], "targets", k, meeting) if meeting else \
        Choice(k, "knee", k, meeting)


def worst_case(frontiers: Sequence[Sequence[Point]]) -> list[Point]:
    """Several workloads' frontiers as one a choice must hold on: for each ``v`` measured on
    all of them, the highest cost relative to the workload's own ``v`` = 0 (its smallest
    ``v``) and the highest late share. E.g. costs 0.20 and 0.50 × static at ``v`` = 0 and
    0.21 and 0.51 at ``v`` = 10 give ``v`` = 10 the cost 1.05 (0.21 / 0.20)."""
    if not frontiers or any(not f for f in frontiers):
        raise ValueError("a workload without a frontier")
    by_v = [{p.v: p for p in f} for f in frontiers]
    refs = [f[min(f)].cost for f in by_v]
    common = sorted(set.intersection(*(set(f) for f in by_v)))
    return [Point(v, max(f[v].cost / r for f, r in zip(by_v, refs, strict=True)),
                  max(f[v].late for f in by_v)) for v in common]


def as_points(front: Mapping[str, Any]) -> list[Point]:
    """A ``frontier`` section's points (cost × static, late share) that have both figures."""
    return [Point(p["v_usd_per_gpu_hour"], p["cost_vs_static"], p["late_over_5min_share"])
            for p in front["points"]
            if p.get("cost_vs_static") is not None and p.get("late_over_5min_share") is not None]


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
    out: dict[str, Any] = {"scenario": base.name,
                           "configured_v_usd_per_gpu_hour": base.value_of_time_usd_per_gpu_hour,
                           "points": rows}
    pts = as_points(out)
    if pts:
        c = choose(pts)
        out["targets"] = {"late_over_5min_share_max": LATE_TARGET,
                          "cost_vs_v0_max": COST_TARGET}
        out["choice"] = {"v_usd_per_gpu_hour": c.v, "by": c.by,
                         "knee_v_usd_per_gpu_hour": c.knee_v}
        for r in rows:
            r["meets_targets"] = r["v_usd_per_gpu_hour"] in c.meeting
    return out


def choice_text(front: Mapping[str, Any]) -> str:
    """One line on the choice: which ``v`` meets the targets, or the knee."""
    c = front.get("choice")
    if c is None:
        return "no point has both a cost and a late share: no choice"
    targets = (f"late > 5 min ≤ {LATE_TARGET:.0%} at cost ≤ {COST_TARGET:g} × v = 0's")
    if c["by"] == "targets":
        return (f"targets ({targets}): v = {c['v_usd_per_gpu_hour']:g} is the smallest that "
                f"meets them; the knee is at v = {c['knee_v_usd_per_gpu_hour']:g}")
    return (f"targets ({targets}): no v meets them; the knee (farthest from the chord "
            f"cheapest – least late) is at v = {c['knee_v_usd_per_gpu_hour']:g}")


def choice_cell(front: Mapping[str, Any], p: Mapping[str, Any]) -> str:
    """A point's mark: ``chosen``, ``knee``, ``meets targets`` (joined), or ""."""
    c = front.get("choice")
    if c is None:
        return ""
    v = p["v_usd_per_gpu_hour"]
    marks = [m for m, on in (("chosen", v == c["v_usd_per_gpu_hour"]),
                             ("knee", v == c["knee_v_usd_per_gpu_hour"]),
                             ("meets targets", bool(p.get("meets_targets")))) if on]
    return ", ".join(marks)


def frontier_table(front: Mapping[str, Any]) -> DataTable:
    """A row per value of time; the configured one marked with a *, the chosen one, the knee
    and those meeting the targets in the last column (:func:`choose`); the choice in the
    caption."""
    t = DataTable(f"{front['scenario']}: cost against lateness by value of time (v; "
                  "* = the scenario's own)",
                  [*(label for _, label, _ in FRONTIER_COLUMNS), "choice"],
                  numeric=[*(True for _ in FRONTIER_COLUMNS), False],
                  caption=choice_text(front))
    for p in front["points"]:
        cells = [fmt_cell(fmt, p.get(key)) for key, _, fmt in FRONTIER_COLUMNS]
        if p["configured"]:
            cells[0] += " *"
        mark = choice_cell(front, p)
        t.add_row(*cells, mark, values=[*(p.get(key) for key, _, _ in FRONTIER_COLUMNS), mark])
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
