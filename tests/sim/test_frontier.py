"""The cost–lateness frontier (``sim.frontier``, ``gpufleet simulate --frontier``): the values
parsed, the scenarios named, each point's figures from hand-worked summaries, the table and
the chart, then a tiny real batch and the command's refusals."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.config import Scenario, scenarios_named, static_scenario
from gpufleet.errors import InputError
from gpufleet.sim.batch import run_all
from gpufleet.sim.frontier import (
    FRONTIER_COLUMNS,
    Choice,
    Point,
    as_points,
    choose,
    frontier,
    frontier_chart,
    frontier_scenarios,
    frontier_table,
    knee,
    pareto,
    parse_values,
    worst_case,
)
from gpufleet.sim.report import add_relative
from gpufleet.state import ResourceRequest
from gpufleet.traces.jobs import JobSpec


@pytest.mark.parametrize(("text", "want"), [
    ("0,1,3,10,30,100", [0.0, 1.0, 3.0, 10.0, 30.0, 100.0]),
    (" 30, 0.5 ,10 ", [0.5, 10.0, 30.0]),  # spaces dropped, sorted
    ("1000000", [1e6]),  # the bound itself
])
def test_parse_values(text: str, want: list[float]) -> None:
    assert parse_values(text) == want


@pytest.mark.parametrize(("text", "says"), [
    ("", "no value of time"),
    ("1,x", "'x' is not a value of time"),
    ("-1", "'-1' is not a value of time"),
    ("1e7", "'1e7' is not a value of time"),
    ("nan", "'nan' is not a value of time"),
    ("3,3.0", "'3.0' is given twice"),
    (",".join(str(i) for i in range(33)), "at most 32"),
])
def test_parse_values_refuses_with_the_reason(text: str, says: str) -> None:
    with pytest.raises(InputError, match=says) as exc:
        parse_values(text)
    assert exc.value.field == "--frontier"


def test_frontier_scenarios_add_the_own_value_and_change_nothing_else() -> None:
    (base,) = scenarios_named(["gpufleet"])
    base = base.model_copy(update={"value_of_time_usd_per_gpu_hour": 5.0})
    got = frontier_scenarios(base, [0.0, 0.5, 1e6])
    assert [s.name for s in got] == ["gpufleet-v0", "gpufleet-v0.5", "gpufleet-v5",
                                     "gpufleet-v1000000"]
    assert [s.value_of_time_usd_per_gpu_hour for s in got] == [0.0, 0.5, 5.0, 1e6]
    for s in got:
        assert s.model_copy(update={"name": base.name, "value_of_time_usd_per_gpu_hour": 5.0}) \
            == base
    # v = 0, the cost target's reference, is added too
    assert [s.value_of_time_usd_per_gpu_hour for s in frontier_scenarios(base, [10.0])] \
        == [0.0, 5.0, 10.0]
    # a name the suffix makes too long is refused up front, naming the option
    long = base.model_copy(update={"name": "g" * 62})
    with pytest.raises(InputError, match=r"at v = 0: .*at most 64 characters") as exc:
        frontier_scenarios(long, [10.0])
    assert exc.value.field == "--frontier"


def pts(*rows: tuple[float, float, float]) -> list[Point]:
    return [Point(*r) for r in rows]


# A frontier that bends: (v, cost, late share). Scaled to their ranges (cost 1.00–1.40, late
# 0.05–0.20) the points are v0 (x 1, y 0), v3 (0.333, 0.05), v10 (0.067, 0.25), v30 (0, 1);
# the chord v0–v30 is x + y = 1 and the distance on the origin's side (1 − x − y) / √2:
# v3 0.617 / √2 = 0.436, v10 0.683 / √2 = 0.483: the knee is v10.
BENT = pts((0, 1.00, 0.20), (3, 1.02, 0.10), (10, 1.10, 0.06), (30, 1.40, 0.05))


@pytest.mark.parametrize(("points", "want"), [
    (BENT, 10.0),
    # points beaten on both figures do not count: v1 (as dear as v0, later) and v100 (as late
    # as v30, dearer) leave the knee and the chord's ends where they were
    ([*BENT, Point(1, 1.00, 0.21), Point(100, 1.50, 0.05)], 10.0),
    # the recorded embedded default on the trace market (cost × static, late): Pareto v0,
    # v3, v30, v100 (v1 is beaten by v0, v10 by v30); ranges 0.2117–0.2478 and 3.75–10.95 %;
    # v3 (0.799, 0.411) lies beyond the chord, v30 (0.083, 0.550) 0.367 / √2 inside: v30
    (pts((0, 0.21174, 0.1095), (1, 0.21183, 0.121), (3, 0.22655, 0.095),
         (10, 0.23549, 0.0545), (30, 0.23155, 0.0435), (100, 0.24775, 0.0375)), 30.0),
    # a straight line: every point on the chord, no bend: the cheapest
    (pts((0, 1.0, 0.2), (10, 1.1, 0.1), (30, 1.2, 0.0)), 0.0),
    # bowed outwards (v10 beyond the chord: x 0.5, y 0.9): no bend towards the origin
    (pts((0, 1.0, 0.2), (10, 1.9, 0.1), (30, 2.0, 0.0)), 0.0),
    # one point beats every other: it is the knee whatever its v
    (pts((0, 1.0, 0.2), (10, 0.9, 0.1), (30, 1.2, 0.15)), 10.0),
    # equal distances (ranges 1.0–1.2 and 0–0.2: v3 (0.3, 0.2) and v10 (0.2, 0.3), both
    # x + y = 0.5, 0.5 / √2 from the chord): the smaller v
    (pts((0, 1.0, 0.2), (3, 1.04, 0.06), (10, 1.06, 0.04), (30, 1.2, 0.0)), 3.0),
    ([Point(5, 1.0, 0.3)], 5.0),  # one point
])
def test_knee(points: list[Point], want: float) -> None:
    assert knee(points) == want


def test_pareto_keeps_the_unbeaten_and_the_smallest_v_of_equals() -> None:
    got = pareto(pts((0, 1.0, 0.2), (1, 1.0, 0.2), (3, 1.0, 0.25), (10, 1.1, 0.1),
                     (30, 1.2, 0.1)))
    assert [p.v for p in got] == [0.0, 10.0]


@pytest.mark.parametrize(("points", "want"), [
    # cost target 1.05 × v0's 1.00; late target 5 %: v10 is late 4.5 % at 1.04, v30 is dearer
    # than 1.05 although on time: the smallest meeting both is v10. The knee is v3 (ranges
    # 1.00–1.06 and 4–10 %: v3 (0.333, 0.333) is 0.333 / √2 inside the chord, v10
    # (0.083, 0.667) 0.25 / √2), reported beside the choice
    (pts((0, 1.00, 0.10), (3, 1.02, 0.06), (10, 1.04, 0.045), (30, 1.06, 0.04)),
     Choice(10.0, "targets", 3.0, (10.0,))),
    # v = 0 already meets them: nothing to buy (the knee is reported beside it)
    (pts((0, 1.00, 0.04), (10, 1.01, 0.03), (30, 1.30, 0.00)),
     Choice(0.0, "targets", 10.0, (0.0, 10.0))),
    # both bounds are inclusive: 5 % late at exactly 1.05 × v0's cost meets them
    (pts((0, 0.20, 0.10), (30, 0.21, 0.05)), Choice(30.0, "targets", 0.0, (30.0,))),
    # none meets them (v3 too late, v10 and v30 too dear): the knee, v10 (see BENT)
    (BENT, Choice(10.0, "knee", 10.0, ())),
    # the reference is the smallest v measured: here v1 (cost 2.00, bound 2.10)
    (pts((1, 2.00, 0.08), (10, 2.10, 0.05)), Choice(10.0, "targets", 1.0, (10.0,))),
])
def test_choose(points: list[Point], want: Choice) -> None:
    assert choose(points) == want


def test_choose_and_knee_refuse_an_empty_frontier() -> None:
    with pytest.raises(ValueError, match="no point"):
        choose([])
    with pytest.raises(ValueError, match="no point"):
        knee([])


def test_worst_case_of_two_workloads() -> None:
    # A: v0 0.20, v10 0.21 (1.05 × v0), v30 0.22 (1.10); B: v0 0.50, v10 0.51 (1.02), v30 0.60
    # (1.20); v3 only on A: left out
    a = pts((0, 0.20, 0.10), (3, 0.20, 0.09), (10, 0.21, 0.04), (30, 0.22, 0.03))
    b = pts((0, 0.50, 0.02), (10, 0.51, 0.06), (30, 0.60, 0.01))
    got = worst_case([a, b])
    assert [p.v for p in got] == [0.0, 10.0, 30.0]
    assert [p.cost for p in got] == pytest.approx([1.0, 1.05, 1.2])
    assert [p.late for p in got] == [0.10, 0.06, 0.03]
    # v10 is late 6 % on B: no v meets the targets on both; v10 alone would on A
    assert choose(got).by == "knee" and choose(a).v == 10.0
    with pytest.raises(ValueError, match="without a frontier"):
        worst_case([a, []])


def summaries_of(rows: dict[str, tuple[float, float, float, float, float]]) -> dict:
    """name → (cost $, late share, JCT p95 s, delay p95 s, delay p99 s), with cost_vs_static
    as ``add_relative`` writes it."""
    out = {name: {"cost_usd": c, "late_over_5min_share": late, "jct_p95_s": jct,
                  "delay_vs_static_p95_s": d95, "delay_vs_static_p99_s": d99}
           for name, (c, late, jct, d95, d99) in rows.items()}
    for s in out.values():
        s["cost_vs_static"] = s["cost_usd"] / out["static"]["cost_usd"]
    return out


def test_points_hand_worked() -> None:
    base = Scenario(name="gpufleet", value_of_time_usd_per_gpu_hour=10.0)
    pts = frontier_scenarios(base, [0.0, 100.0])
    sums = summaries_of({
        "static": (1000.0, 0.0, 2000.0, 0.0, 0.0),
        # cheap and late: 60 % of static's cost, 20 % of jobs late, JCT p95 × 1.5
        "gpufleet-v0": (600.0, 0.2, 3000.0, 900.0, 1800.0),
        "gpufleet-v10": (700.0, 0.1, 2500.0, 400.0, 1200.0),
        # dear and on time
        "gpufleet-v100": (900.0, 0.0, 2000.0, 0.0, 60.0),
    })
    front = frontier(sums, pts, base)
    assert front["scenario"] == "gpufleet"
    assert front["configured_v_usd_per_gpu_hour"] == 10.0
    p = {q["v_usd_per_gpu_hour"]: q for q in front["points"]}
    assert p[0.0]["cost_vs_static"] == pytest.approx(0.6)
    assert p[0.0]["jct_p95_vs_static"] == pytest.approx(1.5)
    assert p[10.0]["jct_p95_vs_static"] == pytest.approx(1.25)
    assert p[100.0]["late_over_5min_share"] == 0.0
    assert p[0.0]["delay_vs_static_p99_s"] == 1800.0
    assert [q["configured"] for q in front["points"]] == [False, True, False]
    # the choice: none meets the targets (v0 20 % late; v10 and v100 dearer than 0.63 × static,
    # 1.05 × v0's 0.60); the knee: on ranges 0.6–0.9 and 0–20 %, v10 (0.5, 0.333) lies
    # 0.167 / √2 inside the chord v0–v100
    assert front["choice"] == {"v_usd_per_gpu_hour": 10.0, "by": "knee",
                               "knee_v_usd_per_gpu_hour": 10.0}
    assert front["targets"] == {"late_over_5min_share_max": 0.05, "cost_vs_v0_max": 1.05}
    assert [q["meets_targets"] for q in front["points"]] == [False, False, False]
    # the table: a row per v, the configured one starred, the choice in the last column
    t = frontier_table(front)
    assert [r[0] for r in t.text] == ["0", "10 *", "100"]
    assert list(t.text[0][1:5]) == ["0.600", "20.0%", "1.500", "900"]
    assert len(t.text[0]) == len(FRONTIER_COLUMNS) + 1
    assert [r[-1] for r in t.text] == ["", "chosen, knee", ""]
    assert "no v meets them; the knee" in t.caption and "v = 10" in t.caption
    # v100 at 0.62 × static (≤ 0.63) and 5 % late meets both: chosen by the targets. It beats
    # v10 on both figures, which leaves two points and no bend: the knee is the cheapest, v0
    near = {**sums, "gpufleet-v100": {**sums["gpufleet-v100"], "cost_vs_static": 0.62,
                                      "late_over_5min_share": 0.05}}
    met = frontier(near, pts, base)
    assert met["choice"] == {"v_usd_per_gpu_hour": 100.0, "by": "targets",
                             "knee_v_usd_per_gpu_hour": 0.0}
    assert [r[-1] for r in frontier_table(met).text] == ["knee", "", "chosen, meets targets"]
    # the chart: in order of the late share (x), cost × static (y); the configured point alone
    # in its own series
    c = frontier_chart(front)
    assert c["x"] == [0.0, 0.1, 0.2]
    assert c["series"][0]["values"] == [0.9, 0.7, 0.6]
    assert c["series"][1]["values"] == [None, 0.7, None]
    assert c["labels"] == ["v = 100", "v = 10", "v = 0"]


def tiny() -> list[JobSpec]:
    """Forty interruptible V100 jobs, one an hour's worth each, submitted 5 min apart."""
    req = ResourceRequest(cpu_milli=4000, num_gpu=1, gpu_models=frozenset({"V100-16GB"}))
    return [JobSpec(job_id=f"j{i}", submit_s=300.0 * i, duration_s=1800.0 + 97 * i,
                    request=req) for i in range(40)]


def test_the_table_from_a_tiny_batch() -> None:
    jobs = tiny()
    (base,) = scenarios_named(["gpufleet"])
    pts = frontier_scenarios(base, [0.0, 30.0])
    got = run_all(jobs, [static_scenario(), *pts], seed=0, workers=1)
    sums = {n: o.summary for n, o in got.items()}
    add_relative(sums, {n: o.finishes for n, o in got.items()})
    front = frontier(sums, pts, base)
    # the built-in scenario's own v (3) is added
    assert [q["scenario"] for q in front["points"]] == ["gpufleet-v0", "gpufleet-v3",
                                                        "gpufleet-v30"]
    for q in front["points"]:
        s = sums[q["scenario"]]
        assert q["cost_vs_static"] == pytest.approx(s["cost_usd"] / sums["static"]["cost_usd"])
        assert q["late_over_5min_share"] == s["late_over_5min_share"]
        assert q["delay_vs_static_p95_s"] == s["delay_vs_static_p95_s"]
        assert q["jct_p95_vs_static"] == pytest.approx(
            s["jct_p95_s"] / sums["static"]["jct_p95_s"])
        assert s["jobs_lost"] == 0
    t = frontier_table(front)
    assert [r[0] for r in t.text] == ["0", "3 *", "30"]  # built-in gpufleet: v = 3
    # one point chosen, by the rule on the run's own figures
    c = choose(as_points(front))
    assert front["choice"] == {"v_usd_per_gpu_hour": c.v, "by": c.by,
                               "knee_v_usd_per_gpu_hour": c.knee_v}
    assert [r[-1].startswith("chosen") for r in t.text] == [q["v_usd_per_gpu_hour"] == c.v
                                                          for q in front["points"]]


def gpufleet(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpufleet", *args], capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize(("args", "says"), [
    (["--frontier", "1,-3"], "'-3' is not a value of time"),
    (["--frontier", "1", "--only", "gpufleet"], "without --only and --serve-metrics"),
])
def test_the_command_refuses_a_bad_frontier_before_any_run(
        tmp_path: Path, args: list[str], says: str) -> None:
    res = gpufleet("simulate", "--out", str(tmp_path / "out"), *args)
    assert res.returncode == 2, res.stderr
    assert says in res.stderr and "--frontier" in res.stderr
    assert not (tmp_path / "out" / "summary.json").exists()


def test_a_scenario_file_without_gpufleet_is_refused(tmp_path: Path) -> None:
    sc = tmp_path / "sc.yaml"
    sc.write_text("scenarios:\n  - name: mine\n")
    res = gpufleet("simulate", "--scenario", str(sc), "--frontier", "0,10",
                   "--out", str(tmp_path / "out"))
    assert res.returncode == 2, res.stderr
    assert "the file has none: static, mine" in res.stderr
