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


def test_arrival_sequence_refuses_what_would_never_end() -> None:
    import pytest

    from gpufleet.errors import InputError

    cpu_only = [ResourceRequest(cpu_milli=1000, memory_mib=1000, num_gpu=0)]
    with pytest.raises(InputError, match="no pod asks for a GPU"):
        arrival_sequence(cpu_only, capacity_milli=10_000, seed=1, max_load_pct=130)
    gpu = [ResourceRequest(cpu_milli=1000, num_gpu=1, gpu_milli=1000)]
    with pytest.raises(InputError, match="no GPU"):
        arrival_sequence(gpu, capacity_milli=0, seed=1, max_load_pct=130)


def test_cli_refuses_gpu_less_fleets_cpu_only_pods_and_runaway_runs(tmp_path: Path) -> None:
    nodes = tmp_path / "n.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,32000,262144,8,T4\n")
    cpu_nodes = tmp_path / "cpu_nodes.csv"
    cpu_nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,32000,262144,0,\n")
    pods = tmp_path / "p.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np1,1000,1000,1,1000\n")
    cpu_pods = tmp_path / "cpu_pods.csv"
    cpu_pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np1,1000,1000,0,0\n")
    tiny = tmp_path / "tiny.csv"
    tiny.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np1,1,1,1,1\n")
    big = tmp_path / "big.csv"
    big.write_text("sn,cpu_milli,memory_mib,gpu,model\n"
                   + "".join(f"n{i},32000,262144,64,T4\n" for i in range(40)))
    for n, p, needle in [
        (cpu_nodes, pods, "cpu_nodes.csv: field 'gpu': no node has a GPU"),
        (nodes, cpu_pods, "cpu_pods.csv: field 'num_gpu': no pod asks for a GPU"),
        (big, tiny, "arrivals per seed; at most 2,000,000"),
    ]:
        out = runner.invoke(app, ["bench", "packing", "-p", "fgd", "--seeds", "1",
                                  "--nodes", str(n), "--pods", str(p)])
        assert out.exit_code == 2, out.output
        assert needle in out.output and "Traceback" not in out.output


def test_cli_runs_pods_without_gpu_spec(tmp_path: Path) -> None:
    nodes = tmp_path / "n.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,32000,262144,8,T4\n")
    pods = tmp_path / "openb_pod_list_multigpu50.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,qos,pod_phase,creation_time,"
                    "deletion_time,scheduled_time\np1,1000,1000,2,1000,LS,Running,0,9,0\n"
                    "p2,1000,1000,1,500,LS,Running,0,9,0\n")
    out = runner.invoke(app, ["bench", "packing", "-p", "fgd", "--seeds", "1", "--nodes",
                              str(nodes), "--pods", str(pods)])
    assert out.exit_code == 0, out.output
