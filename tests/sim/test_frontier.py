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
    frontier,
    frontier_chart,
    frontier_scenarios,
    frontier_table,
    parse_values,
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
    # a name the suffix makes too long is refused up front, naming the option
    long = base.model_copy(update={"name": "g" * 62})
    with pytest.raises(InputError, match=r"at v = 5: .*at most 64 characters") as exc:
        frontier_scenarios(long, [10.0])
    assert exc.value.field == "--frontier"


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
    # the table: a row per v, the configured one starred
    t = frontier_table(front)
    assert [r[0] for r in t.text] == ["0", "10 *", "100"]
    assert list(t.text[0][1:5]) == ["0.600", "20.0%", "1.500", "900"]
    assert len(t.text[0]) == len(FRONTIER_COLUMNS)
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
    assert [q["scenario"] for q in front["points"]] == ["gpufleet-v0", "gpufleet-v30"]
    for q in front["points"]:
        s = sums[q["scenario"]]
        assert q["cost_vs_static"] == pytest.approx(s["cost_usd"] / sums["static"]["cost_usd"])
        assert q["late_over_5min_share"] == s["late_over_5min_share"]
        assert q["delay_vs_static_p95_s"] == s["delay_vs_static_p95_s"]
        assert q["jct_p95_vs_static"] == pytest.approx(
            s["jct_p95_s"] / sums["static"]["jct_p95_s"])
        assert s["jobs_lost"] == 0
    t = frontier_table(front)
    assert [r[0] for r in t.text] == ["0 *", "30"]  # built-in gpufleet: v = 0


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
