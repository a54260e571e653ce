"""The MPS control daemon per shared GPU, against a stand-in ``nvidia-cuda-mps-control``
(tests/node_plugin/mps_stand_in.py: it daemonizes, writes the pid file and takes ``quit`` from
its pipe directory as the real one does, and records the environment it was started with).

The real binary needs an NVIDIA GPU and driver; it is exercised only on a GPU node.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from plugin_results import share_result

from gpufleet.node_plugin import DRIVER
from gpufleet.node_plugin.inventory import Gpu
from gpufleet.node_plugin.mps import PID_FILE, MpsError, MpsManager, find_control
from gpufleet.node_plugin.prepare import PrepareError, Preparer

STAND_IN = (Path(__file__).parent / "mps_stand_in.py").read_text()

GPU0 = Gpu(uuid="GPU-0000", index=0, minor=0, product="NVIDIA H100", memoryMiB=81920)
GPU1 = Gpu(uuid="GPU-1111", index=1, minor=1, product="NVIDIA H100", memoryMiB=81920)
NODE = "node-a"


@pytest.fixture
def control(tmp_path: Path) -> Path:
    path = tmp_path / "bin" / "nvidia-cuda-mps-control"
    path.parent.mkdir()
    path.write_text(f"#!{sys.executable}\n{STAND_IN}")
    path.chmod(0o755)
    return path


@pytest.fixture
def manager(tmp_path: Path, control: Path) -> Iterator[MpsManager]:
    m = MpsManager(str(control), tmp_path / "mps", timeout_s=20)
    try:
        yield m
    finally:  # no daemon outlives its test
        for starts in (tmp_path / "mps").glob("*/log/starts"):
            for pid in starts.read_text().split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)


def _starts(m: MpsManager, uuid: str) -> list[int]:
    path = m.log_dir(uuid) / "starts"
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True  # the daemon is no child of ours (it forked twice), so never a zombie here


def test_find_control_takes_a_path_or_a_name_on_path(control: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    assert find_control(str(control)) == str(control)
    assert find_control(str(control.parent / "missing")) is None
    monkeypatch.setenv("PATH", str(control.parent))
    assert find_control("nvidia-cuda-mps-control") == str(control)
    assert find_control("no-such-mps-control") is None


def test_a_daemon_starts_with_its_gpu_and_directories_and_quits(manager: MpsManager) -> None:
    pid = manager.ensure("GPU-0000")
    assert _alive(pid) and manager.pid("GPU-0000") == pid and manager.running() == 1
    env = json.loads((manager.log_dir("GPU-0000") / "env.json").read_text())
    assert env == {"CUDA_VISIBLE_DEVICES": "GPU-0000",
                   "CUDA_MPS_PIPE_DIRECTORY": str(manager.root / "GPU-0000" / "pipe"),
                   "CUDA_MPS_LOG_DIRECTORY": str(manager.root / "GPU-0000" / "log")}
    assert manager.ensure("GPU-0000") == pid  # live: not started twice
    assert _starts(manager, "GPU-0000") == [pid]
    assert manager.live() == ["GPU-0000"]
    assert manager.quit("GPU-0000") is True
    assert manager.pid("GPU-0000") is None and manager.running() == 0
    assert not (manager.pipe_dir("GPU-0000") / PID_FILE).exists()
    deadline = time.monotonic() + 20
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)
    assert manager.quit("GPU-0000") is False  # none live: nothing to tell


def test_a_restarted_manager_adopts_a_live_daemon(manager: MpsManager) -> None:
    pid = manager.ensure("GPU-0000")
    again = MpsManager(manager.control, manager.root)
    assert again.running() == 0 and again.live() == ["GPU-0000"]
    assert again.ensure("GPU-0000") == pid and again.running() == 1
    assert _starts(manager, "GPU-0000") == [pid]
    # a stale pid file (the daemon died with the node's last boot) is not live: start anew
    again.quit("GPU-0000")
    (manager.pipe_dir("GPU-0000") / PID_FILE).write_text("999999999\n")
    assert again.pid("GPU-0000") is None
    new = again.ensure("GPU-0000")
    assert new != pid and _starts(manager, "GPU-0000") == [pid, new]
    again.quit("GPU-0000")


def test_a_control_binary_that_fails_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "mps-control"
    bad.write_text("#!/bin/sh\necho 'no NVIDIA driver' >&2\nexit 3\n")
    bad.chmod(0o755)
    m = MpsManager(str(bad), tmp_path / "mps", timeout_s=5)
    with pytest.raises(MpsError, match=r"for GPU-0000: .*mps-control -d exited 3: no NVIDIA "):
        m.ensure("GPU-0000")
    silent = tmp_path / "silent"
    silent.write_text("#!/bin/sh\nexit 0\n")  # returns, but no daemon ever writes its pid file
    silent.chmod(0o755)
    m = MpsManager(str(silent), tmp_path / "mps2", timeout_s=0.5)
    with pytest.raises(MpsError, match=r"did not write .*nvidia-cuda-mps-control\.pid"):
        m.ensure("GPU-0000")


def _result(device: str, memory: str | None, cores: str | None, share: str) -> dict[str, Any]:
    return share_result(NODE, device, memory, cores, share)


@pytest.fixture
def preparer(tmp_path: Path, manager: MpsManager) -> Preparer:
    return Preparer(NODE, [GPU0, GPU1], tmp_path / "cdi", tmp_path / "state" / "checkpoint.json",
                    mps=manager)


def _edits(p: Preparer, uid: str) -> dict[str, Any]:
    spec = json.loads((p.cdi_dir / f"{DRIVER}-{uid}.json").read_text())
    return dict(spec["devices"][0]["containerEdits"])


def test_shares_run_under_their_gpus_daemon_until_the_last_goes(preparer: Preparer,
                                                                manager: MpsManager) -> None:
    pipe = str(manager.pipe_dir("GPU-0000"))
    preparer.prepare("u1", "ns", "a", [_result("gpu-0", "20Gi", "30", "s1")])
    pid = manager.pid("GPU-0000")
    assert pid is not None
    edits = _edits(preparer, "u1")
    assert edits["env"] == [
        "NVIDIA_VISIBLE_DEVICES=GPU-0000", "CUDA_VISIBLE_DEVICES=GPU-0000",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=GPU-0000=20480M",  # 20 × 1024 MiB
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30", f"CUDA_MPS_PIPE_DIRECTORY={pipe}"]
    # the pipe directory where the client finds its server, and the daemons' /dev/shm (the
    # host's, the plugin running on the host here), where they exchange memory
    assert edits["mounts"] == [
        {"hostPath": pipe, "containerPath": pipe, "options": ["rw", "nosuid", "nodev", "bind"]},
        {"hostPath": "/dev/shm", "containerPath": "/dev/shm",
         "options": ["rw", "nosuid", "nodev", "bind"]}]
    # a second share of the same GPU joins the same daemon; a retry starts nothing either
    preparer.prepare("u2", "ns", "b", [_result("gpu-0", "40Gi", "50", "s2")])
    preparer.prepare("u1", "ns", "a", [])
    assert _starts(manager, "GPU-0000") == [pid]
    # a whole GPU (no consumedCapacity: all 81920 MiB and 100 %) never uses MPS
    preparer.prepare("u3", "ns", "c", [_result("gpu-1", None, None, "s3")])
    assert manager.pid("GPU-1111") is None
    assert "mounts" not in _edits(preparer, "u3")
    assert not any(e.startswith("CUDA_MPS_PIPE") for e in _edits(preparer, "u3")["env"])
    # the first share goes: the daemon stays for the second; the second goes: it quits
    assert preparer.unprepare("u1") is True
    assert manager.pid("GPU-0000") == pid
    assert preparer.unprepare("u2") is True
    assert manager.pid("GPU-0000") is None and manager.running() == 0


def test_a_restarted_plugin_adopts_the_daemon_and_reads_older_checkpoints(
        preparer: Preparer, manager: MpsManager) -> None:
    preparer.prepare("u1", "ns", "a", [_result("gpu-0", "20Gi", "30", "s1")])
    pid = manager.pid("GPU-0000")
    restarted = Preparer(NODE, [GPU0, GPU1], preparer.cdi_dir, preparer.checkpoint,
                         mps=MpsManager(manager.control, manager.root))
    assert restarted.reconcile_mps() == []
    assert restarted.mps is not None and restarted.mps.running() == 1
    assert _starts(manager, "GPU-0000") == [pid]  # adopted, not started again
    assert restarted.claims == preparer.claims
    assert restarted.claims["u1"].shares[0].mps_pipe_dir == str(manager.pipe_dir("GPU-0000"))
    restarted.unprepare("u1")
    assert manager.pid("GPU-0000") is None
    # a checkpoint written before MPS daemons (no mpsPipeDir): read, and run without one
    old = {"version": 1, "node": NODE, "claims": {"u9": {"namespace": "ns", "name": "old",
           "shares": [{"request": "gpu", "pool": NODE, "device": "gpu-0", "shareID": "s9",
                       "uuid": "GPU-0000", "minor": 0, "memoryMiB": 10240, "cores": 20}]}}}
    preparer.checkpoint.write_text(json.dumps(old))
    older = Preparer(NODE, [GPU0, GPU1], preparer.cdi_dir, preparer.checkpoint,
                     mps=MpsManager(manager.control, manager.root))
    assert older.reconcile_mps() == []
    assert older.claims["u9"].shares[0].mps_pipe_dir is None
    assert older.unprepare("u9") is True and manager.live() == []


def test_a_daemon_left_without_shares_is_told_to_quit_at_start(preparer: Preparer,
                                                               manager: MpsManager) -> None:
    manager.ensure("GPU-1111")  # e.g. the plugin died between unprepare and quit
    assert preparer.reconcile_mps() == ["GPU-1111: no share left, quit"]
    assert manager.live() == []


def test_a_claim_sharing_two_gpus_is_refused(preparer: Preparer, manager: MpsManager) -> None:
    with pytest.raises(PrepareError, match=r"claim ns/a: shares of 2 GPUs; an MPS client uses "
                                           r"one GPU's MPS server"):
        preparer.prepare("u1", "ns", "a", [_result("gpu-0", "10Gi", "10", "s1"),
                                           _result("gpu-1", "10Gi", "10", "s2")])
    assert manager.live() == [] and preparer.claims == {}
    # two whole GPUs need no daemon: fine
    preparer.prepare("u2", "ns", "b", [_result("gpu-0", None, None, "s1"),
                                       _result("gpu-1", None, None, "s2")])
    assert manager.live() == []


def test_a_daemon_that_will_not_start_refuses_the_share(tmp_path: Path) -> None:
    bad = tmp_path / "mps-control"
    bad.write_text("#!/bin/sh\necho 'no NVIDIA driver' >&2\nexit 3\n")
    bad.chmod(0o755)
    p = Preparer(NODE, [GPU0], tmp_path / "cdi", tmp_path / "checkpoint.json",
                 mps=MpsManager(str(bad), tmp_path / "mps", timeout_s=5))
    with pytest.raises(PrepareError, match=r"claim ns/a: MPS control daemon for GPU-0000: .* "
                                           r"exited 3: no NVIDIA driver"):
        p.prepare("u1", "ns", "a", [_result("gpu-0", "10Gi", "10", "s1")])
    assert p.claims == {} and not list((tmp_path / "cdi").glob("*.json"))
