"""``gpufleet lab up`` / ``down`` as a user runs them: a second, small cluster of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.lab.binaries import binary
from gpufleet.lab.processes import read_pidfile


def gpufleet(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpufleet", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.live
def test_lab_up_prints_kubeconfig_last_and_down_stops_everything(
    lab_binaries: Path, tmp_path: Path
) -> None:
    d = tmp_path / "lab"
    up = gpufleet("lab", "up", "--dir", str(d), "--nodes", "2", "--no-controller")
    try:
        assert up.returncode == 0, up.stderr
        kubeconfig = Path(up.stdout.strip().splitlines()[-1])
        assert kubeconfig == d.resolve() / "kubeconfig" and kubeconfig.is_file()
        nodes = subprocess.run(
            [str(binary("kubectl")), f"--kubeconfig={kubeconfig}", "get", "nodes", "-o", "name"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        assert nodes.stdout.split() == ["node/node-000", "node/node-001"]
        pidfiles = sorted((d / "run").glob("*.pid"))
        running = [read_pidfile(p, d / "logs") for p in pidfiles]
        assert {r.name for r in running if r} == {
            "kine",
            "kube-apiserver",
            "kube-controller-manager",
            "kwok",
        }
        assert all(r is not None and r.alive() for r in running)
        for name in ("kine", "kube-apiserver", "kube-controller-manager", "kwok"):
            assert (d / "logs" / f"{name}.log").stat().st_size > 0

        status = gpufleet("lab", "status", "--dir", str(d))
        assert status.returncode == 0
        assert len(json.loads(status.stdout)["running"]) == 4

        again = gpufleet("lab", "up", "--dir", str(d), "--nodes", "1", "--no-controller")
        assert again.returncode == 1
        assert "already running" in again.stderr
    finally:
        down = gpufleet("lab", "down", "--dir", str(d))
    assert down.returncode == 0, down.stderr
    for r in running:
        assert r is not None and not r.alive()
        assert not Path(f"/proc/{r.pid}").exists() or not r.alive()
    assert not list((d / "run").glob("*.pid"))
    second = gpufleet("lab", "down", "--dir", str(d))
    assert second.returncode == 0
    assert "nothing was running" in second.stdout
    assert gpufleet("lab", "status", "--dir", str(d)).returncode == 3


def test_lab_up_rejects_a_bad_nodes_file_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "nodes.csv"
    bad.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,64000,262144,two,V100\n")
    out = gpufleet("lab", "up", "--dir", str(tmp_path / "lab"), "--nodes", str(bad))
    assert out.returncode == 2
    assert f"{bad}:2: field 'gpu'" in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "lab").exists()  # rejected before anything started


def test_missing_binaries_name_the_build_script(tmp_path: Path) -> None:
    env = {**os.environ, "GPUFLEET_K8S_BIN": str(tmp_path / "empty")}
    out = subprocess.run(
        [sys.executable, "-m", "gpufleet", "lab", "up", "--dir", str(tmp_path / "lab")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert out.returncode == 1
    assert "deploy/testcluster/build.sh" in out.stderr
