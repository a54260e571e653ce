"""``gpufleet sweep --ray``: the grid's runs as tasks on a real Ray head node the test starts
(``ray start --head --block``, two CPUs, its own temp dir), giving the local run's cells to the
bit; the head and every process it started are gone at the end."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from live_wait import wait_for

from gpufleet.sim.summary import TIMING

GRID = ["--synthetic", "jobs=60,days=0.2", "--synthetic", "jobs=30,days=0.1",
        "--seeds", "0-1", "--only", "gpufleet,gpufleet-no-spot", "--format", "json"]


def gpufleet(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from gpufleet.cli import main; main()", *args],
        capture_output=True, text=True, timeout=300,
    )


def ray_binary() -> str:
    try:
        import ray  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("CI runs the Ray test with no skips: pip install -e '.[dev]'")
        pytest.skip("Ray is not installed: pip install -e '.[dev]'")
    return str(Path(sys.executable).parent / "ray")


def processes_of(session: int, temp: str) -> list[str]:
    """The processes still in the head's session, or naming its temp dir."""
    ps = subprocess.run(["ps", "-eo", "pid=,sid=,args="], capture_output=True, text=True,
                        check=True).stdout
    out = []
    for line in ps.splitlines():
        pid, sid, *args = line.split(None, 2)
        if int(pid) != os.getpid() and (int(sid) == session or temp in " ".join(args)):
            out.append(line.strip())
    return out


@pytest.fixture(scope="module")
def ray_head() -> Iterator[str]:
    """A Ray head node on this machine; its address."""
    ray = ray_binary()
    # a short path: the raylet's unix sockets live under it (108 bytes at most)
    temp = tempfile.mkdtemp(prefix="gf-ray-", dir="/tmp")
    log = Path(temp + ".log")
    with log.open("w") as out:
        head = subprocess.Popen(
            [ray, "start", "--head", "--block", "--port=0", f"--temp-dir={temp}",
             "--num-cpus=2", "--num-gpus=0", "--object-store-memory=100000000",
             "--include-dashboard=false", "--disable-usage-stats"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})
    try:
        address_file = Path(temp) / "ray_current_cluster"

        def started() -> str | None:
            assert head.poll() is None, f"ray start exited {head.returncode}:\n{log.read_text()}"
            if "block forever" not in log.read_text() or not address_file.exists():
                return None
            return address_file.read_text().strip() or None

        yield wait_for("the Ray head node", started, timeout=120, log=log)
    finally:
        head.send_signal(signal.SIGTERM)  # --block: stops every process the head started
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait(timeout=30)
        try:
            wait_for("the Ray head's processes to end",
                     lambda: not processes_of(head.pid, temp), timeout=60)
        finally:
            left = processes_of(head.pid, temp)
            if left:
                os.killpg(head.pid, signal.SIGKILL)
            shutil.rmtree(temp, ignore_errors=True)
            log.unlink(missing_ok=True)
        assert not left, f"Ray processes left behind: {left}"


def cells(out: Path) -> list[dict]:
    doc = json.loads((out / "sweep.json").read_text())
    return [{**c, "summary": {k: v for k, v in c["summary"].items() if k not in TIMING}}
            for c in doc["cells"]]


@pytest.mark.slow  # a real head node: about 10 s to start and stop
def test_ray_tasks_give_the_local_cells_to_the_bit(ray_head: str, tmp_path: Path) -> None:
    t0 = time.perf_counter()
    local = gpufleet("sweep", *GRID, "--workers", "1", "--out", str(tmp_path / "local"))
    assert local.returncode == 0, local.stderr
    local_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    remote = gpufleet("sweep", *GRID, "--ray", ray_head, "--out", str(tmp_path / "ray"))
    assert remote.returncode == 0, remote.stderr
    ray_s = time.perf_counter() - t0
    print(f"local (1 process) {local_s:.1f} s, Ray (2 CPUs) {ray_s:.1f} s")  # -s shows it
    assert json.loads(remote.stdout) == json.loads(local.stdout)  # the grid tables
    ray_cells, local_cells = cells(tmp_path / "ray"), cells(tmp_path / "local")
    assert ray_cells == local_cells  # == on every float
    assert len(ray_cells) == 2 * 2 * 3  # workloads × seeds × (static + 2)
    doc = json.loads((tmp_path / "ray" / "sweep.json").read_text())
    assert doc["executor"] == f"Ray cluster at {ray_head}"
    assert all(c["summary"]["cpu_seconds"] > 0 for c in doc["cells"])  # ran on the cluster


def test_an_address_nobody_answers_is_one_line_naming_the_option(tmp_path: Path) -> None:
    ray_binary()
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens on it
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.perf_counter()
    res = gpufleet("sweep", "--ray", f"127.0.0.1:{port}", "--out", str(tmp_path / "out"))
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        f"error: field '--ray': cannot reach a Ray cluster at 127.0.0.1:{port}: "
        "Connection refused"]
    assert time.perf_counter() - t0 < 60  # not ray.init's minutes of retries
    assert not (tmp_path / "out").exists()


def test_without_ray_the_option_says_how_to_install_it(tmp_path: Path) -> None:
    hide_ray = "import sys; sys.modules['ray'] = None; from gpufleet.cli import main; main()"
    res = subprocess.run([sys.executable, "-c", hide_ray, "sweep", "--ray", "127.0.0.1:1",
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        "error: field '--ray': Ray is not installed; install it with: "
        "pip install 'gpufleet[ray]'"]
