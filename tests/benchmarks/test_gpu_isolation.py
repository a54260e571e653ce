"""benchmarks/gpu_isolation.py: its pure parts everywhere (the shares' limits as the node
plugin's own Preparer computes them, the isolation checks, the report table, the one-line refusal
without a GPU), and the whole run against a real GPU where ``nvidia-smi -L`` works.

The GPU run is not a live test (it needs no lab): without a GPU it skips, which CI accepts (only
live tests may never skip there, tests/support/live_skip.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from script_module import load_script

from gpufleet.node_plugin.inventory import Gpu
from gpufleet.node_plugin.prepare import PrepareError
from gpufleet.tables import OutputFormat

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_isolation.py"
UUID = "GPU-11111111-0000-0000-0000-000000000000"


@pytest.fixture(scope="module")
def iso() -> ModuleType:
    return load_script(SCRIPT, "gpu_isolation")


def gpu(memory_mib: int) -> Gpu:
    return Gpu.model_validate({"uuid": UUID, "index": 0, "minor": 0,
                               "product": "NVIDIA H100 80GB HBM3", "memoryMiB": memory_mib})


# (GPU MiB, fraction) -> (MiB, cores %) of each share: floor(fraction × MiB), fraction × 100
LIMITS = {
    "halves of 80 GiB": ((81920, 0.5), (40960, 50)),
    # NVML's H100 80GB: 81,559 MiB, published as 80 GiB; half of that, 40,960 MiB, scaled to
    # the real total: 40,960 × 81,559 / 81,920 = 40,779.5 → 40,779, so both halves fit
    "halves of an odd MiB count": ((81559, 0.5), (40779, 50)),
    "quarters of 24 GiB": ((24576, 0.25), (6144, 25)),
    "an eighth of 80 GiB": ((81920, 0.125), (10240, 12)),
}


@pytest.mark.parametrize("case", list(LIMITS))
def test_share_limits_come_from_the_plugins_preparer(iso: ModuleType, tmp_path: Path,
                                                     case: str) -> None:
    (mib, fraction), (want_mib, want_cores) = LIMITS[case]
    _, shares = iso.prepare_shares(gpu(mib), fraction, 2, tmp_path)
    assert [(s.memory_mib, s.cores) for s in shares] == [(want_mib, want_cores)] * 2
    for s in shares:  # the client's environment is its claim's CDI spec's
        assert s.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"{UUID}={want_mib}M"
        assert s.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == str(want_cores)
        assert s.env["CUDA_VISIBLE_DEVICES"] == s.env["NVIDIA_VISIBLE_DEVICES"] == UUID
        assert "CUDA_MPS_PIPE_DIRECTORY" not in s.env  # no MPS manager: no daemon
    assert len(list(tmp_path.glob("*.json"))) == 3  # two CDI specs and the checkpoint


def test_a_third_half_is_refused_by_the_plugins_overcommit_check(iso: ModuleType,
                                                                   tmp_path: Path) -> None:
    with pytest.raises(PrepareError, match="would be overcommitted: memory 81920 MiB"):
        iso.prepare_shares(gpu(81920), 0.5, 3, tmp_path)


# A stand-in nvidia-cuda-mps-control (the real one needs a GPU): `-d` daemonizes, writes its pid
# file into $CUDA_MPS_PIPE_DIRECTORY and waits for `quit` on a FIFO there; without `-d` it sends
# stdin to that FIFO.
STAND_IN = """\
import os, sys
pipe = os.environ["CUDA_MPS_PIPE_DIRECTORY"]
fifo, pidfile = os.path.join(pipe, "control"), os.path.join(pipe, "nvidia-cuda-mps-control.pid")
if sys.argv[1:] == ["-d"]:
    if os.fork():
        sys.exit(0)
    os.setsid()
    if os.fork():
        os._exit(0)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.mkfifo(fifo)
    with open(pidfile, "w") as f:
        f.write(f"{os.getpid()}\\n")
    while True:
        with open(fifo) as f:
            if any(line.strip() == "quit" for line in f):
                os.unlink(pidfile); os.unlink(fifo); os._exit(0)
else:
    fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    os.write(fd, sys.stdin.read().encode()); os.close(fd)
"""


def test_the_shares_run_under_the_plugins_mps_daemon_and_it_stops(iso: ModuleType,
                                                                   tmp_path: Path) -> None:
    """With the plugin's MpsManager the first share starts the GPU's daemon and both claims'
    environments name its pipe directory; the script's cleanup unprepares them and the daemon
    is gone."""
    from gpufleet.node_plugin.mps import MpsManager

    control = tmp_path / "nvidia-cuda-mps-control"
    control.write_text(f"#!{sys.executable}\n{STAND_IN}")
    control.chmod(0o755)
    manager = MpsManager(str(control), tmp_path / "mps")
    preparer, shares = iso.prepare_shares(gpu(81920), 0.5, 2, tmp_path / "cdi", manager)
    pid = manager.pid(UUID)
    assert pid is not None
    try:
        assert {s.env["CUDA_MPS_PIPE_DIRECTORY"] for s in shares} == {
            str(manager.pipe_dir(UUID))}
    finally:
        iso._stop_mps(preparer, manager, UUID)
    # the daemon removed its pid file on `quit`: no live daemon for the GPU
    assert manager.pid(UUID) is None and not preparer.claims
    assert not (manager.pipe_dir(UUID) / "control").exists()


def report(iso: ModuleType, a: dict[str, Any], b: dict[str, Any],
           a_running: bool = True) -> Any:
    shares = [{"claim": c, "memory_mib": 40960, "cores": 50, "env": {}}
              for c in ("share-a", "share-b")]
    r = iso.Report(gpu={"uuid": UUID, "product": "NVIDIA H100 80GB HBM3", "memoryMiB": 81920},
                   fraction=0.5, shares=shares, clients={"A": a, "B": b},
                   a_running_when_b_refused=a_running)
    r.checks = iso.verdict(r)
    return r


A_OK = {"event": "done", "allocated_mib": 20480, "error": None, "mem_total_mib": 40960,
        "iters": 400, "iters_per_s": 20.0, "tflops": 2.749}
B_OK = {"event": "done", "allocated_mib": 40704, "oom": True, "mem_total_mib": 40960,
        "error": "OutOfMemoryError: out of memory allocating 268,435,456 bytes",
        "iters": 200, "iters_per_s": 20.0, "tflops": 2.749}


def test_verdict(iso: ModuleType) -> None:
    assert report(iso, A_OK, B_OK).held
    # B got past its limit (40,960 MiB) before it was refused: the limit did not hold
    over = report(iso, A_OK, {**B_OK, "allocated_mib": 41216})
    assert not over.checks["B refused at or below its limit"] and not over.held
    # B never refused: no MPS limit in force
    free = report(iso, A_OK, {**B_OK, "oom": False, "error": None})
    assert not free.checks["B refused with out-of-memory"]
    # A ended with B's failure: one fault domain
    assert not report(iso, A_OK, B_OK, a_running=False).held
    assert not report(iso, {**A_OK, "event": "ready"}, B_OK).checks["A finished its loop"]


def test_report_table(iso: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    t, checks = iso.tables(report(iso, A_OK, B_OK))
    assert t.text == [
        ("A", "40,960", "50", "40,960", "20,480", "", "20.0", "2.749"),
        ("B", "40,960", "50", "40,960", "40,704",
         "OutOfMemoryError: out of memory allocating 268,435,456 bytes", "20.0", "2.749")]
    assert all(row[1] == "yes" for row in checks.text) and len(checks.text) == 6
    from rich.console import Console

    from gpufleet.tables import print_tables

    print_tables([t, checks], OutputFormat.csv, Console())
    out = capsys.readouterr().out
    assert ",B,allocated MiB,40704\n" in out


def test_without_a_gpu_one_line_and_exit_2(tmp_path: Path) -> None:
    """No nvidia-smi on PATH: exit 2 with one line saying why, no traceback."""
    env = {**os.environ, "PATH": str(tmp_path)}  # an empty directory: no nvidia-smi
    res = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True,
                         timeout=120, env=env, cwd=ROOT, check=False)
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().splitlines() == [
        "gpu_isolation: cannot run here: no NVIDIA GPU on this machine: nvidia-smi not found"]
    assert res.stdout == ""


def _gpu_or_skip() -> None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        pytest.skip("no NVIDIA GPU on this machine: nvidia-smi not found")
    res = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=60, check=False)
    if res.returncode != 0:
        pytest.skip(f"no NVIDIA GPU on this machine: nvidia-smi -L exited {res.returncode}")


def test_two_mps_shares_on_gpu_0(tmp_path: Path) -> None:
    """The whole run on a real GPU: B refused past its limit while A keeps computing."""
    _gpu_or_skip()
    out = tmp_path / "isolation.json"
    res = subprocess.run([sys.executable, str(SCRIPT), "--seconds", "5", "--output", str(out)],
                         capture_output=True, text=True, timeout=600, cwd=ROOT, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    got = json.loads(out.read_text())
    assert got["held"] is True, got["checks"]
    assert got["clients"]["B"]["allocated_mib"] <= got["shares"][1]["memory_mib"]


def test_the_client_program_compiles(iso: ModuleType) -> None:
    compile(iso.CLIENT, "gpu_isolation client", "exec")
    assert "BLOCK_MIB" not in iso.CLIENT and f" + {iso.BLOCK_MIB} <=" in iso.CLIENT


def test_a_client_that_dies_is_reported_with_its_stderr(iso: ModuleType, tmp_path: Path) -> None:
    err = tmp_path / "client-B.stderr"
    with err.open("w") as f:
        proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit('CUDA init failed')"],
                                stdout=subprocess.PIPE, stderr=f, text=True)
    with pytest.raises(RuntimeError, match="client-B: exited 1: CUDA init failed"):
        iso._line(proc, err, 60)
    quiet = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                             stdout=subprocess.PIPE, text=True)
    try:
        with pytest.raises(RuntimeError, match="client-B: no line in 1 s"):
            iso._line(quiet, err, 1)
    finally:
        quiet.kill()
        quiet.wait()
