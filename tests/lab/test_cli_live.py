"""``gpufleet lab up`` / ``down`` as a user runs them: a second cluster of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpufleet.lab.binaries import binary
from gpufleet.lab.cluster import controller_command_available
from gpufleet.lab.fleet import DEFAULT_FLEET
from gpufleet.lab.processes import Running, read_pidfile

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
STOCK_POD = """
apiVersion: v1
kind: Pod
metadata: {name: stock-scheduled}
spec:
  containers:
  - name: main
    image: busybox
    resources: {limits: {nvidia.com/gpu: 1}}
"""


def gpufleet(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpufleet", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def kubectl(kubeconfig: Path, *args: str) -> str:
    return subprocess.run(
        [str(binary("kubectl")), f"--kubeconfig={kubeconfig}", *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout


def wait_all_bound(kubeconfig: Path, expected: int, timeout_s: float = 90.0) -> dict[str, str]:
    deadline = time.monotonic() + timeout_s
    while True:
        pods = json.loads(kubectl(kubeconfig, "get", "pods", "-o", "json"))["items"]
        placed = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in pods}
        if len(placed) >= expected and all(placed.values()):
            return placed
        if time.monotonic() > deadline:
            raise AssertionError(f"not every example pod was bound: {placed}")
        time.sleep(0.5)


@pytest.mark.live
def test_lab_up_prints_kubeconfig_last_and_down_stops_everything(
    lab_binaries: Path, tmp_path: Path
) -> None:
    """The README's three commands: lab up (default fleet and, where the command exists, the
    gpufleet controller), apply every example, see them placed; then lab down stops it all."""
    d = tmp_path / "lab"
    controller_missing = controller_command_available()
    base = {"kine", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"}
    up = gpufleet("lab", "up", "--dir", str(d), "--kube-scheduler")
    running: list[Running | None] = []
    try:
        assert up.returncode == 0, up.stderr
        kubeconfig = Path(up.stdout.strip().splitlines()[-1])
        assert kubeconfig == d.resolve() / "kubeconfig" and kubeconfig.is_file()
        nodes = kubectl(kubeconfig, "get", "nodes", "-o", "name").split()
        assert sorted(nodes) == sorted(f"node/{n[0]}" for n in DEFAULT_FLEET)
        running = [read_pidfile(p, d / "logs") for p in sorted((d / "run").glob("*.pid"))]
        names = {r.name for r in running if r}
        assert all(r is not None and r.alive() for r in running)
        for name in base:
            assert (d / "logs" / f"{name}.log").stat().st_size > 0
        # The stock kube-scheduler places a pod that asks for it (no schedulerName) on a GPU.
        stock = subprocess.run(
            [str(binary("kubectl")), f"--kubeconfig={kubeconfig}", "apply", "-f", "-"],
            input=STOCK_POD,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        assert "stock-scheduled" in stock.stdout
        if controller_missing is None:
            assert names == base | {"gpufleet-controller"}
            assert "gpufleet controller: started" in up.stdout
            kubectl(kubeconfig, "apply", "-f", str(ROOT / "examples"))
            # every example schedules on the default fleet (the gang job has two pods)
            placed = wait_all_bound(kubeconfig, expected=len(EXAMPLES) + 2)
            assert placed["mig-inference"] == "a100-mig-0"
            assert placed["fractional-inference"] == "t4-0"
        else:
            assert names == base
            assert f"gpufleet controller: unavailable: {controller_missing}" in up.stdout
            placed = wait_all_bound(kubeconfig, expected=1)
        assert placed["stock-scheduled"] in {n[0] for n in DEFAULT_FLEET}

        status = gpufleet("lab", "status", "--dir", str(d))
        assert status.returncode == 0
        assert set(json.loads(status.stdout)["running"]) == names

        again = gpufleet("lab", "up", "--dir", str(d), "--nodes", "1", "--no-controller")
        assert again.returncode == 1
        assert "already running" in again.stderr
    finally:
        down = gpufleet("lab", "down", "--dir", str(d))
    assert down.returncode == 0, down.stderr
    assert running
    for r in running:
        assert r is not None and not r.alive()
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


def test_lab_up_rejects_a_missing_config_file(tmp_path: Path) -> None:
    out = gpufleet("lab", "up", "--dir", str(tmp_path / "lab"), "--config", "/nonexistent.yaml")
    assert out.returncode == 2
    assert "/nonexistent.yaml: field '--config': file not found" in out.stderr


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
