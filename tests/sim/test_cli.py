"""The real ``gpufleet simulate`` and ``gpufleet sweep`` commands in a subprocess, on small
workloads."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

KEYS = {
    "utilization", "cost_usd", "useful_gpu_hours", "jct_p50_s", "jct_p95_s", "queue_p95_s",
    "interruptions", "lost_gpu_hours", "recovery_p50_s", "recovery_p95_s", "deadline_misses",
    "jobs_total", "jobs_finished", "jobs_lost",
}


def gpufleet(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from gpufleet.cli import main; main()", *args],
        capture_output=True, text=True, timeout=300,
    )


def write_jobs(path: Path) -> None:
    rows = ["jobs:"]
    for i in range(40):
        gpus = 8 if i % 10 == 0 else 1
        milli = 500 if i % 3 == 1 and gpus == 1 else 1000
        rows.append(
            f"  - {{job_id: j{i}, submit_s: {i * 300}, duration_s: {1800 + 97 * i}, "
            f"num_gpu: {gpus}, gpu_milli: {milli}, gpu_models: V100-16GB}}"
        )
    path.write_text("\n".join(rows) + "\n")


def test_simulate_writes_summary_and_report(tmp_path: Path) -> None:
    trace = tmp_path / "jobs.yaml"
    write_jobs(trace)
    sc = tmp_path / "sc.yaml"
    sc.write_text("scenarios:\n  - name: gpufleet\n    deadline_policy: null\n")
    out = tmp_path / "out"
    res = gpufleet("simulate", "--trace", str(trace), "--scenario", str(sc), "--out", str(out))
    assert res.returncode == 0, res.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["scenarios"]) == {"static", "gpufleet"}  # static added as baseline
    for s in summary["scenarios"].values():
        assert set(s) >= KEYS
        assert s["jobs_total"] == 40 and s["jobs_lost"] == 0
    assert summary["wall_seconds"] > 0
    html = (out / "report.html").read_text()
    assert html.count('<div class="chart" id=') == 5  # drawn in the page (test_report_html)
    assert "src=\"http" not in html and "<script src" not in html  # self-contained
    assert "GPU util" in res.stdout


def test_bad_scenario_is_one_line_exit_2(tmp_path: Path) -> None:
    trace = tmp_path / "jobs.yaml"
    write_jobs(trace)
    sc = tmp_path / "sc.yaml"
    sc.write_text("name: x\nautoscale: true\n")
    res = gpufleet("simulate", "--trace", str(trace), "--scenario", str(sc), "--out",
                   str(tmp_path / "o"))
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    assert f"{sc}:1: field 'autoscale'" in res.stderr


def test_serve_metrics_exports_the_paced_simulation(tmp_path: Path) -> None:
    import socket
    import time
    import urllib.request

    trace = tmp_path / "jobs.yaml"
    write_jobs(trace)
    sc = tmp_path / "sc.yaml"
    sc.write_text("scenarios:\n  - name: gpufleet\n    deadline_policy: null\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-c", "from gpufleet.cli import main; main()", "simulate", "--trace",
         str(trace), "--scenario", str(sc), "--serve-metrics", str(port), "--speed", "2000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        body = ""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "gpufleet_jobs_running" not in body:
            time.sleep(0.5)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    body = r.read().decode()
            except OSError:
                continue
        assert "gpufleet_jobs_running" in body
        assert "DCGM_FI_DEV_GPU_UTIL" in body
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_unknown_policy_name_fails_before_any_run(tmp_path: Path) -> None:
    trace = tmp_path / "jobs.yaml"
    write_jobs(trace)
    sc = tmp_path / "sc.yaml"
    sc.write_text("scenarios:\n  - name: x\n    spot_strategy: nope\n")
    res = gpufleet("simulate", "--trace", str(trace), "--scenario", str(sc), "--out",
                   str(tmp_path / "o"))
    assert res.returncode == 2
    assert "field 'spot_strategy'" in res.stderr and "capacity-aware" in res.stderr
    assert not (tmp_path / "o").exists()


def test_default_run_reports_baselines_leave_one_out_and_chain(tmp_path: Path) -> None:
    trace = tmp_path / "jobs.yaml"
    write_jobs(trace)
    out = tmp_path / "out"
    res = gpufleet("simulate", "--trace", str(trace), "--out", str(out))
    assert res.returncode == 0, res.stderr
    summary = json.loads((out / "summary.json").read_text())
    scs = summary["scenarios"]
    # baselines: name -> cost, the same figures as their scenarios'
    assert set(summary["baselines"]) == {"static", "static-p99", "static-reserved"}
    for name, cost in summary["baselines"].items():
        assert cost == scs[name]["cost_usd"]
    # static-reserved is static-p99's run billed at the catalogued 1-year rate
    assert scs["static-reserved"]["cost_usd"] / scs["static-p99"]["cost_usd"] == \
        pytest.approx(0.70, rel=1e-4)
    assert scs["static-reserved"]["jct_p95_s"] == scs["static-p99"]["jct_p95_s"]
    # leave-one-out: one entry per lever, each the summary of gpufleet without it
    assert set(summary["ablation"]) == {"packing", "sharing", "autoscaling", "spot",
                                        "checkpointing"}
    for lever, entry in summary["ablation"].items():
        assert entry["scenario"] == f"gpufleet-no-{lever}"
        assert entry["cost_usd"] == scs[f"gpufleet-no-{lever}"]["cost_usd"]
    # the chain: static first, gpufleet last
    steps = [c["scenario"] for c in summary["chain"]]
    assert steps[0] == "static" and steps[-1] == "gpufleet" and len(steps) == 5
    for s in scs.values():
        assert {"jct_mean_s", "late_over_5min_share", "allocated_gpu_hours",
                "cost_vs_static_p99", "cost_vs_static_reserved"} <= set(s)
        assert 0 <= s["late_over_5min_share"] <= 1
    assert scs["static"]["late_over_5min_share"] == 0.0
    html = (out / "report.html").read_text()
    assert "Leave-one-out" in html and "Additive chain" in html
    assert "Leave-one-out" in res.stdout and "Additive chain" in res.stdout


def test_only_runs_named_scenarios_including_the_single_lever_ones(tmp_path: Path) -> None:
    trace = tmp_path / "jobs.yaml"
    write_jobs(trace)
    out = tmp_path / "out"
    res = gpufleet("simulate", "--trace", str(trace), "--only", "packing,static-p99",
                   "--out", str(out))
    assert res.returncode == 0, res.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary["scenarios"]) == ["static", "packing", "static-p99"]
    assert summary["ablation"] == {} and summary["chain"] == []
    bad = gpufleet("simulate", "--trace", str(trace), "--only", "nope", "--out", str(out))
    assert bad.returncode == 2
    assert "unknown scenario 'nope'" in bad.stderr + bad.stdout
    assert "Traceback" not in bad.stderr


def test_tables_fit_80_columns_and_machine_formats_match_the_summary(tmp_path: Path) -> None:
    """Piped at 80 columns, every table is legible (split, never cut to "gpu…"); --format
    json and csv print only the document, with the figures summary.json has."""
    trace = tmp_path / "jobs.yaml"
    write_jobs(trace)
    out = tmp_path / "out"
    env = {**os.environ, "COLUMNS": "80"}
    res = subprocess.run([sys.executable, "-m", "gpufleet", "simulate", "--trace", str(trace),
                          "--out", str(out), "--workers", "1"],
                         capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr
    assert max(len(line) for line in res.stdout.splitlines()) <= 80
    assert "…" not in res.stdout
    summary = json.loads((out / "summary.json").read_text())
    for name in summary["scenarios"]:
        assert name in res.stdout or name.startswith(("gpufleet-no-", "chain-"))
    assert "gpufleet − checkpointing" in res.stdout  # the leave-one-out rows, in full

    res = gpufleet("simulate", "--trace", str(trace), "--out", str(out), "--workers", "1",
                   "--format", "json")
    assert res.returncode == 0, res.stderr
    tables = json.loads(res.stdout)  # nothing else on stdout
    side = tables[0]
    assert side["title"].endswith("scenarios side by side")
    cost = next(r for r in side["rows"] if r["metric"] == "cost $")
    summary = json.loads((out / "summary.json").read_text())
    assert cost["gpufleet"] == summary["scenarios"]["gpufleet"]["cost_usd"]
    assert "workload:" in res.stderr and "wrote" in res.stderr

    res = gpufleet("simulate", "--trace", str(trace), "--out", str(out), "--workers", "1",
                   "--format", "csv")
    assert res.returncode == 0, res.stderr
    rows = list(csv.reader(io.StringIO(res.stdout)))
    assert rows[0] == ["table", "row", "column", "value"]
    assert next(r for r in rows if r[1:3] == ["cost $", "gpufleet"])[3] == str(
        summary["scenarios"]["gpufleet"]["cost_usd"])


def test_sweep_tabulates_a_trace_and_a_synthetic_shape_over_the_seeds(tmp_path: Path) -> None:
    """Two workloads × seeds 0-1 × the default scenarios in two local processes: sweep.json
    has every cell, the json table is its grid, and Ray is never imported without --ray."""
    trace = tmp_path / "jobs.yaml"
    write_jobs(trace)
    out = tmp_path / "out"
    no_ray = ("import atexit, sys; atexit.register(lambda: print('ray imported:', 'ray' in "
              "sys.modules, file=sys.stderr)); from gpufleet.cli import main; main()")
    res = subprocess.run(
        [sys.executable, "-c", no_ray, "sweep", "--trace", str(trace), "--synthetic",
         "jobs=40,days=0.1", "--seeds", "0-1", "--workers", "2", "--out", str(out),
         "--format", "json"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert res.stderr.strip().splitlines()[-1] == "ray imported: False"
    doc = json.loads((out / "sweep.json").read_text())
    assert doc["scenarios"] == ["static", "gpufleet", "gpufleet-no-spot"]  # the default set
    assert doc["seeds"] == [0, 1] and doc["executor"] == "2 local processes"
    assert [(c["workload"], c["seed"], c["scenario"]) for c in doc["cells"]] == [
        (w, seed, name) for w in (str(trace), "synthetic jobs=40,days=0.1") for seed in (0, 1)
        for name in doc["scenarios"]]
    assert doc["workloads"][0]["jobs_by_seed"] == {"0": 40, "1": 40}
    tables = json.loads(res.stdout)  # nothing else on stdout
    assert [t["title"] for t in tables] == [f"{trace}: seeds 0,1",
                                            "synthetic jobs=40,days=0.1: seeds 0,1"]
    for table, w in zip(tables, (str(trace), "synthetic jobs=40,days=0.1"), strict=True):
        grid = [g for g in doc["grid"] if g["workload"] == w]
        assert [r["scenario"] for r in table["rows"]] == [g["scenario"] for g in grid]
        for row, g in zip(table["rows"], grid, strict=True):
            assert (row["cost"], row["worst"], row["lost"]) == (
                g["cost_vs_static_mean"], g["worst_seed"], g["jobs_lost"])
            by_seed = [c["summary"]["cost_vs_static"] for c in doc["cells"]
                       if c["workload"] == w and c["scenario"] == g["scenario"]]
            assert row["cost"] == sum(by_seed) / 2 and row["max"] == max(by_seed)
    # the trace's jobs are the same under both seeds; only the random choices differ
    assert {c["summary"]["jobs_total"] for c in doc["cells"] if c["workload"] == str(trace)} == {
        40}


@pytest.mark.parametrize(("args", "says"), [
    (["--only", "static,nope"], "field 'only': unknown scenario 'nope'; known: static,"),
    (["--seeds", "5-2"], "field '--seeds': expected seeds like 42-51 or 42,43, got '5-2'"),
    (["--trace", "absent.yaml"], "absent.yaml: field '--trace': no such file"),
    (["--synthetic", "jobs=0"], "field '--synthetic': jobs: Input should be greater than or "
     "equal to 1 (in 'jobs=0')"),
    (["--ray", "no-port"], "field '--ray': expected HOST:PORT, ray://HOST:PORT or auto, got "
     "'no-port'"),
    (["--ray", "auto", "--workers", "2"], "field '--workers': --workers sets local processes; "
     "with --ray the cluster schedules the runs: give one of them"),
])
def test_sweep_bad_input_is_one_line_naming_the_option(
        tmp_path: Path, args: list[str], says: str) -> None:
    refused_in_one_line(tmp_path, "sweep", args, says)


def refused_in_one_line(tmp_path: Path, command: str, args: list[str], says: str) -> None:
    """``gpufleet COMMAND ARGS`` exits 2 with one line naming the problem, before any work."""
    res = subprocess.run(
        [sys.executable, "-c", "from gpufleet.cli import main; main()", command, *args,
         "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], lines
    assert not (tmp_path / "out").exists()  # refused before any work


def test_simulate_streams_a_synthetic_shape_with_a_time_remaining(tmp_path: Path) -> None:
    """``--synthetic`` draws the default generator's jobs as the replay reads them: the
    summary counts every job, and the progress bar shows the time remaining."""
    out = tmp_path / "out"
    res = subprocess.run(
        [sys.executable, "-c", "from gpufleet.cli import main; main()", "simulate",
         "--synthetic", "jobs=300,days=0.5", "--only", "gpufleet", "--workers", "1",
         "--out", str(out)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "120"})
    assert res.returncode == 0, res.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["workload"] == "synthetic jobs=300,days=0.5 (seed 0)" and summary["jobs"] == 300
    for s in summary["scenarios"].values():
        assert s["jobs_total"] == s["jobs_finished"] == 300
    assert "eta" in res.stdout


@pytest.mark.parametrize(("args", "says"), [
    (["--synthetic", "jobs=100", "--trace", "x.csv"], "field '--trace/--synthetic': a "
     "workload is given twice"),
    (["--synthetic", "nodes=3"], "field '--synthetic': unknown parameter 'nodes'"),
    (["--synthetic", "days=0"], "days: Input should be greater than 0"),
])
def test_simulate_bad_synthetic_is_one_line_naming_the_option(
        tmp_path: Path, args: list[str], says: str) -> None:
    refused_in_one_line(tmp_path, "simulate", args, says)
