"""``gpufleet bench spot-deadline`` end to end, as a user runs it (a real subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gpufleet.market.deadline.bench.protocol import (
    ALL_SETTINGS,
    MAIN_SETTING,
    load_traces,
    mean_row,
    run_setting,
)


def gpufleet(*args: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from gpufleet.cli import main; sys.argv[0] = 'gpufleet'; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=300)


def write_trace(path: Path, seed: int, n: int = 2000) -> Path:
    rng = np.random.default_rng(seed)
    runs = []
    while sum(len(r) for r in runs) < n:
        runs.append([1] * int(rng.integers(1, 80)) + [0] * int(rng.integers(1, 40)))
    data = [v for r in runs for v in r][:n]
    path.write_text(json.dumps({"metadata": {"gap_seconds": 195}, "data": data}))
    return path


def test_cli_json_and_table(tmp_path: Path) -> None:
    tr = write_trace(tmp_path / "zone-a.json", 1)
    out = tmp_path / "r.json"
    proc = gpufleet("bench", "spot-deadline", "--trace", str(tr), "--policy", "up", "--policy",
                    "optimal", "--policy", "ours", "--starts", "6", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "gap to optimum" in proc.stdout and "zone-a" in proc.stdout
    rows = json.loads(out.read_text())["results"]
    assert [r["policy"] for r in rows] == ["up", "optimal", "ours"]
    for r in rows:
        assert {"trace", "policy", "mean_cost", "misses", "runs"} <= set(r)
        assert r["trace"] == "zone-a" and r["runs"] == 6 and r["misses"] == 0
    by = {r["policy"]: r["mean_cost"] for r in rows}
    assert by["optimal"] <= by["ours"] and by["optimal"] <= by["up"]


def test_cli_default_policy_is_ours_alone(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = gpufleet("bench", "spot-deadline", "--trace", str(write_trace(tmp_path / "z.json", 2)),
                    "--starts", "3", "--deadline-hours", "70", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())["results"]
    assert [r["policy"] for r in rows] == ["ours"]
    assert rows[0]["deadline_hours"] == 70


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy", "nope"], "unknown deadline policy 'nope'"),
        (["--starts", "0"], "field 'starts'"),
        (["--deadline-hours", "40"], "misses the deadline"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    tr = write_trace(tmp_path / "z.json", 3)
    proc = gpufleet("bench", "spot-deadline", "--trace", str(tr), *args)
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_cli_bad_trace_names_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"metadata": {"gap_seconds": 195},\n"data": [1, 0, 7]}')
    proc = gpufleet("bench", "spot-deadline", "--trace", str(bad))
    assert proc.returncode == 2
    assert "bad.json:2: field 'data[2]'" in proc.stderr and "Traceback" not in proc.stderr
    short = write_trace(tmp_path / "short.json", 4, n=500)
    proc = gpufleet("bench", "spot-deadline", "--trace", str(short))
    assert proc.returncode == 2 and "a run needs 1479" in proc.stderr


def test_protocol_reference_on_real_traces(shared_data: Path) -> None:
    """Greedy and UP reproduce the protocol's table (to the cent) on a few starts' worth:
    the full 300 starts run in the benchmark; here 300 starts of two zones."""
    base = shared_data / "spot-traces/availability/1-node/aws-02-15-2023"
    traces = load_traces([base / "us-east-1a_v100_1.json", base / "us-west-2a_v100_1.json"])
    res = run_setting(traces, MAIN_SETTING, ["on_demand", "greedy", "up"], 300)
    got = {(r.trace, r.policy): round(r.mean_cost, 2) for r in res}
    assert got[("us-east-1a_v100_1", "on_demand")] == 147.52
    assert got[("us-east-1a_v100_1", "greedy")] == 143.49
    assert got[("us-east-1a_v100_1", "up")] == 140.66
    assert got[("us-west-2a_v100_1", "greedy")] == 62.65
    assert got[("us-west-2a_v100_1", "up")] == 59.95
    assert mean_row(res, "up")[1:] == (0, 600)
    assert len(ALL_SETTINGS) == 6 and MAIN_SETTING in ALL_SETTINGS
