"""report.html (``sim.report_html``): the thinning and alignment of chart lines as case tables,
and the page a real `gpufleet simulate` writes, opened in headless chromium: it loads without an
error, every chart has data points, and every figure it shows is summary.json's; with
``--frontier``, its chart has a point per value of time."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from headless_browser import file_url, open_page

from gpufleet.sim.frontier import FRONTIER_COLUMNS, choice_text
from gpufleet.sim.report import COLUMNS
from gpufleet.sim.report_html import chart, thinned
from gpufleet.sim.team_report import TEAM_COLUMNS


@pytest.mark.parametrize(("n", "limit", "expected"), [
    (0, 4, []),
    (3, 4, [0, 1, 2]),  # fewer than the limit: all
    (4, 4, [0, 1, 2, 3]),
    (10, 4, [0, 3, 6, 9]),  # step ceil(10 / 4) = 3, and 9 is the last
    (11, 4, [0, 3, 6, 9, 10]),  # the last sample is always kept
])
def test_thinned(n: int, limit: int, expected: list[int]) -> None:
    assert thinned(n, limit) == expected


def test_chart_lines_step_onto_the_longest_lines_times() -> None:
    # a: sampled at 0, 600, 1200, 1800; b: at 0 and 900, ended at 900 (null after);
    # c: starts at 700 (null before). Each x shows the line's latest sample at or before it.
    c = chart("c", "t", "y", [
        ("a", [0.0, 600.0, 1200.0, 1800.0], [1, 2, 3, 4], False),
        ("b", [0.0, 900.0], [10, 20], True),
        ("c", [700.0, 1800.0], [5, 6], False),
    ])
    assert c["x"] == [0.0, round(600 / 86400, 6), round(1200 / 86400, 6),
                      round(1800 / 86400, 6)]
    assert [s["values"] for s in c["series"]] == [
        [1.0, 2.0, 3.0, 4.0],
        [10.0, 10.0, None, None],
        [None, None, 5.0, 6.0],
    ]
    assert [s["dash"] for s in c["series"]] == [False, True, False]


def number(text: str) -> tuple[float, float] | None:
    """The number a cell shows and half a unit of its last digit (None for "—")."""
    if text == "—":
        return None
    m = re.fullmatch(r"(-?[\d,]+(?:\.(\d+))?)(%?)", text)
    assert m, f"cell {text!r} is not a number"
    decimals = len(m.group(2) or "")
    scale = 0.01 if m.group(3) else 1.0
    return float(m.group(1).replace(",", "")) * scale, 0.5 * 10 ** -decimals * scale


def summary_value(summary: dict[str, Any], cell: dict[str, str]) -> Any:
    s = summary["scenarios"][cell["scenario"]]
    if cell.get("team"):
        return s["teams"]["per_team"][cell["team"]].get(cell["key"])
    return s.get(cell["key"])


def write_workload(path: Path) -> None:
    rows = ["jobs:"]
    for i in range(40):
        gpus = 4 if i % 10 == 0 else 1
        rows.append(f"  - {{job_id: j{i}, submit_s: {i * 300}, duration_s: {1800 + 97 * i}, "
                    f"num_gpu: {gpus}, gpu_models: V100-16GB, tenant: {'ab'[i % 2]}}}")
    path.write_text("\n".join(rows) + "\n")


def test_the_report_opens_in_a_browser_with_charts_and_the_summarys_numbers(
        tmp_path: Path) -> None:
    trace, sc, out = tmp_path / "jobs.yaml", tmp_path / "sc.yaml", tmp_path / "out"
    write_workload(trace)
    sc.write_text("scenarios:\n  - name: gpufleet\n  - name: gpufleet-teams\n    teams:\n"
                  "      queues:\n        - {name: a, gpus: 4, cohort: lab}\n"
                  "        - {name: b, gpus: 4, cohort: lab}\n")
    res = subprocess.run([sys.executable, "-m", "gpufleet", "simulate", "--trace", str(trace),
                          "--scenario", str(sc), "--out", str(out), "--workers", "1"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    summary = json.loads((out / "summary.json").read_text())
    with open_page(file_url(out / "report.html")) as page:
        charts = page.evaluate("""(window.gpufleetCharts || []).map((u) => ({
            title: u.root.querySelector('.u-title').textContent,
            canvas: !!u.root.querySelector('canvas'),
            points: u.data.slice(1).map((ys) => ys.filter((y) => y !== null).length)}))""")
        cells = page.evaluate("""[...document.querySelectorAll('td[data-key]')].map((td) => ({
            scenario: td.dataset.scenario, team: td.dataset.team || '', key: td.dataset.key,
            value: td.dataset.value, text: td.textContent}))""")
        errors = list(page.errors)
    assert not errors, errors
    titles = [c["title"] for c in charts]
    assert titles[:5] == ["GPU utilisation (allocated / provisioned)", "Cumulative cost (USD)",
                          "Spot interruptions (cumulative)", "Queue length (pending jobs)",
                          "Fleet size by capacity type (GPUs)"]
    assert titles[5:] == ["gpufleet-teams: GPU-equivalents in use per team"]
    for c in charts:
        assert c["canvas"], c["title"]
        assert c["points"] and all(p >= 2 for p in c["points"]), c  # every line has data
    # static, gpufleet and gpufleet-teams side by side, and the two teams' rows
    assert len({(c["scenario"], c["team"], c["key"]) for c in cells}) == len(cells) == (
        3 * len(COLUMNS) + 2 * len(TEAM_COLUMNS))
    assert {c["team"] for c in cells} == {"", "a", "b"}
    for c in cells:
        value = summary_value(summary, c)
        assert json.loads(c["value"]) == value, c  # the page carries summary.json's value
        shown = number(c["text"])
        if value is None:
            assert shown is None, c
            continue
        assert shown is not None, c
        got, half_unit = shown
        assert math.isclose(got, float(value), abs_tol=half_unit + 1e-9), c  # and shows it


def test_the_frontier_is_a_chart_with_a_point_per_value_of_time(tmp_path: Path) -> None:
    trace, out = tmp_path / "jobs.yaml", tmp_path / "out"
    write_workload(trace)
    res = subprocess.run([sys.executable, "-m", "gpufleet", "simulate", "--trace", str(trace),
                          "--frontier", "0,30", "--out", str(out), "--workers", "1"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "gpufleet: cost against lateness by value of time" in res.stdout
    summary = json.loads((out / "summary.json").read_text())
    # the built-in gpufleet's own v (3) is added
    assert list(summary["scenarios"]) == ["static", "gpufleet-v0", "gpufleet-v3", "gpufleet-v30"]
    front = summary["frontier"]
    assert [p["v_usd_per_gpu_hour"] for p in front["points"]] == [0.0, 3.0, 30.0]
    with open_page(file_url(out / "report.html")) as page:
        charts = page.evaluate("""(window.gpufleetCharts || []).map((u) => ({
            title: u.root.querySelector('.u-title').textContent,
            xs: u.data[0].length,
            points: u.data.slice(1).map((ys) => ys.filter((y) => y !== null).length)}))""")
        cells = page.evaluate("""[...document.querySelectorAll('td[data-frontier]')].map(
            (td) => ({scenario: td.dataset.frontier, key: td.dataset.key,
                      value: td.dataset.value}))""")
        choice = page.evaluate("document.getElementById('frontier-choice').textContent")
        errors = list(page.errors)
    assert not errors, errors
    (chart,) = [c for c in charts if "cost against lateness" in c["title"]]
    # a point per value of time on the curve; the configured one (built-in gpufleet: v = 3)
    # once more, alone in its series
    assert chart["xs"] == 3 and chart["points"] == [3, 1]
    by = {p["scenario"]: p for p in front["points"]}
    assert len(cells) == 3 * len(FRONTIER_COLUMNS)
    # the page says which v the targets or the knee choose: summary.json's choice
    assert choice == choice_text(front), choice
    assert f"v = {front['choice']['knee_v_usd_per_gpu_hour']:g}" in choice
    for c in cells:
        assert json.loads(c["value"]) == by[c["scenario"]][c["key"]], c
