"""The real ``gpufleet simulate`` command in a subprocess, on a small YAML workload."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
    assert html.count("data:image/png;base64,") == 5
    assert "src=\"http" not in html  # self-contained
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
