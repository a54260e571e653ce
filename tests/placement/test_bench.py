"""The packing benchmark end to end on a truncated run, and the CLI's bad-input paths."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from gpufleet.cli import _register, app
from gpufleet.placement.bench.protocol import arrival_sequence, run_seed
from gpufleet.state import ResourceRequest
from gpufleet.traces.openb import load_nodes, load_pods

_register()
runner = CliRunner()


def test_arrival_sequence_stops_before_passing_the_load() -> None:
    pods = [
        ResourceRequest(num_gpu=1),
        ResourceRequest(num_gpu=1, gpu_milli=500),
        ResourceRequest(cpu_milli=1),
    ]
    seq = arrival_sequence(pods, capacity_milli=10_000, seed=1, max_load_pct=130)
    total = sum(p.total_gpu_milli for p in seq)
    assert total <= 13_000 and seq[:3] != pods[:0]
    assert sorted(map(id, seq[:3])) == sorted(map(id, pods))  # shuffled originals first
    assert seq == arrival_sequence(pods, 10_000, 1, 130)


def test_truncated_run_on_real_trace(shared_data: Path) -> None:
    nodes = load_nodes(shared_data / "openb" / "openb_node_list_gpu_node.csv")[:150]
    pods = [p.request for p in load_pods(shared_data / "openb" / "openb_pod_list_default.csv")]
    res = run_seed("fgd", nodes, pods, 42, [50, 100], limit=1500)
    assert res.decisions == 1500
    curve = res.alloc_pct
    assert 40 < curve[50] <= 50.5 and 60 < curve[100] <= 100
    assert 0 <= res.frag_ratio_pct[50] <= 100
    # Allocation never exceeds arrival and never decreases (pods never depart).
    seen = curve[~np.isnan(curve)]
    assert np.all(np.diff(seen) >= -1e-9)


def test_cli_list_policies() -> None:
    out = runner.invoke(app, ["bench", "packing", "--list-policies"])
    assert out.exit_code == 0
    for name in ("bestfit", "fgd", "fgd-band", "fgd-strand (default)"):
        assert name in out.output


def test_cli_smoke_writes_json_plot_html(shared_data: Path, tmp_path: Path) -> None:
    js, png, page = tmp_path / "r.json", tmp_path / "r.png", tmp_path / "r.html"
    out = runner.invoke(
        app,
        [
            "bench",
            "packing",
            "-p",
            "bestfit",
            "--seeds",
            "42",
            "--loads",
            "50,100",
            "--limit",
            "1200",
            "--json",
            str(js),
            "--plot",
            str(png),
            "--html",
            str(page),
        ],
    )
    assert out.exit_code == 0, out.output
    doc = json.loads(js.read_text())
    rows = doc["results"]
    assert {r["load"] for r in rows} == {50, 100} and rows[0]["policy"] == "bestfit"
    assert set(rows[0]) == {"policy", "seed", "load", "unallocated_pct", "frag_ratio_pct"}
    assert doc["wall_seconds"]["bestfit"] > 0
    assert png.read_bytes()[:4] == b"\x89PNG" and "<table>" in page.read_text()


def test_cli_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    for args, needle in [
        (["--policy", "nope"], "unknown placement policy"),
        (["--seeds", "51-42"], "--seeds"),
        (["--loads", "a,b"], "--loads"),
        (
            ["--nodes", str(tmp_path / "absent.csv"), "--pods", str(tmp_path / "absent.csv")],
            "missing",
        ),
    ]:
        out = runner.invoke(app, ["bench", "packing", *args])
        assert out.exit_code == 2, out.output
        assert needle in out.output and "Traceback" not in out.output


def test_cli_malformed_trace_names_line(tmp_path: Path) -> None:
    nodes = tmp_path / "n.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,8000,1000,2,T4\n")
    pods = tmp_path / "p.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np1,1,1,1,-3,\n")
    out = runner.invoke(app, ["bench", "packing", "--nodes", str(nodes), "--pods", str(pods)])
    assert out.exit_code == 2
    assert "p.csv:2" in out.output and "gpu_milli" in out.output
