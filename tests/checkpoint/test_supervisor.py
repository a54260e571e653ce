"""``gpufleet run`` end to end: real CLI process, real child processes, real signals, real HTTP."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from gpufleet.checkpoint.protocol import EXIT_PREEMPTED

from .conftest import TrainRun

CLI = [sys.executable, "-c", "from gpufleet.cli import main; main()", "run"]


def child_status(status_dir: Path, attempt: int) -> dict[str, object] | None:
    try:
        return json.loads((status_dir / f"attempt-{attempt}.json").read_text())
    except (OSError, ValueError):
        return None


def wait_child_running(
    status_dir: Path, attempt: int, sup: subprocess.Popen[str], timeout_s: float = 60
) -> dict[str, object]:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        st = child_status(status_dir, attempt)
        if st is not None and st["phase"] == "running":
            return st
        assert sup.poll() is None, sup.communicate()[1]
        time.sleep(0.01)
    raise AssertionError(f"attempt {attempt} never ran")


def start_supervisor(args: list[str], cmd: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CLI, *args, "--", *cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_restart_after_random_sigterms_is_bit_exact(make_run, numpy_reference, tmp_path) -> None:  # type: ignore[no-untyped-def]
    run: TrainRun = make_run("train_numpy.py", total=1000, every=50)
    status_dir = tmp_path / "status"
    sup = start_supervisor(
        ["--restart", "--max-restarts", "5", "--status-dir", str(status_dir)], run.argv()
    )
    rnd = random.Random(7)
    for attempt in (1, 2, 3):
        st = wait_child_running(status_dir, attempt, sup)
        time.sleep(rnd.uniform(0.1, 0.4))
        os.kill(int(st["pid"]), signal.SIGTERM)  # e.g. a node drain hitting the trainer
    _, err = sup.communicate(timeout=120)
    assert sup.returncode == 0, err
    lines = [ln for ln in err.splitlines() if ln.startswith("gpufleet run: attempt")]
    assert len(lines) == 4, err
    for n, line in enumerate(lines[:3], start=1):
        st = child_status(status_dir, n)
        nxt = child_status(status_dir, n + 1)
        assert st is not None and nxt is not None
        assert f"attempt {n} · preempted, checkpoint saved (exit 75)" in line
        assert f"saved step {st['saved_step']}" in line
        assert nxt["resumed_step"] == st["saved_step"]  # graceful: nothing redone
        assert f"resumed step {nxt['resumed_step']}" in lines[n]
    assert "attempt 4 · completed" in lines[3] and "lost 0.0 s" in lines[3]
    assert "4 attempts" in err
    with np.load(run.out) as got:
        assert got["w"].tobytes() == numpy_reference(run.total, run.every)["w"]


@pytest.mark.parametrize("provider", ["aws", "aliyun", "gcp"])
def test_notice_stops_job_with_saved_checkpoint(
    make_run, metadata_server, tmp_path, provider: str
) -> None:  # type: ignore[no-untyped-def]
    run: TrainRun = make_run("train_numpy.py", total=100_000, every=100_000)
    status_dir = tmp_path / "status"
    sup = start_supervisor(
        [
            "--restart",
            "--notice-url",
            metadata_server.url,
            "--provider",
            provider,
            "--poll",
            "0.05",
            "--status-dir",
            str(status_dir),
        ],
        run.argv(),
    )
    wait_child_running(status_dir, 1, sup)
    time.sleep(0.2)
    soon = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 120))
    metadata_server.aws_action = json.dumps({"action": "terminate", "time": soon})
    metadata_server.aliyun_time = soon
    metadata_server.gcp_preempted = True
    _, err = sup.communicate(timeout=60)
    assert sup.returncode == EXIT_PREEMPTED, err  # no restart: the machine is going away
    st = child_status(status_dir, 2)
    assert st is None, "restarted after a cloud notice"
    st = child_status(status_dir, 1)
    assert st is not None and st["phase"] == "preempted" and st["stop_reason"] == "SIGTERM"
    assert f"stop: {provider}" in err and "notice" in err
    saved = int(st["saved_step"])  # type: ignore[arg-type]
    assert saved > 0 and (run.ckpt_dir / f"ckpt-{saved:012d}.json").exists()


IGNORES_SIGTERM = (
    "import json, os, signal, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "p = os.environ['GPUFLEET_STATUS_FILE']\n"
    "open(p, 'w').write(json.dumps({'pid': os.getpid(), 'attempt': 1, 'phase': 'running',"
    " 'resumed_at': time.time()}))\n"
    "time.sleep(60)\n"
)


def test_grace_expiry_escalates_to_sigkill(tmp_path: Path) -> None:
    status_dir = tmp_path / "s"
    sup = start_supervisor(
        ["--grace", "0.5", "--status-dir", str(status_dir)], [sys.executable, "-c", IGNORES_SIGTERM]
    )
    wait_child_running(status_dir, 1, sup)
    t0 = time.monotonic()
    sup.send_signal(signal.SIGTERM)  # the pod is being deleted: forward, wait grace, kill
    _, err = sup.communicate(timeout=30)
    assert time.monotonic() - t0 < 10
    assert sup.returncode == 128 + signal.SIGKILL, err
    assert "killed by SIGKILL" in err and "grace expired" in err


def test_gives_up_after_max_restarts(tmp_path: Path) -> None:
    sup = start_supervisor(
        ["--restart", "--max-restarts", "2"],
        [sys.executable, "-c", f"raise SystemExit({EXIT_PREEMPTED})"],
    )
    _, err = sup.communicate(timeout=60)
    assert sup.returncode == EXIT_PREEMPTED
    assert err.count("gpufleet run: attempt") == 3 and "giving up after 2 restarts" in err


def test_crash_is_not_restarted(tmp_path: Path) -> None:
    sup = start_supervisor(["--restart"], [sys.executable, "-c", "raise SystemExit(3)"])
    _, err = sup.communicate(timeout=60)
    assert sup.returncode == 3 and err.count("gpufleet run: attempt") == 1
    assert "failed (exit 3)" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--provider", "azure", "--", "true"], "unknown provider 'azure'"),
        (["--notice-url", "ftp://x", "--", "true"], "must start with http"),
        (["--max-restarts", "-1", "--", "true"], "--max-restarts must be >= 0"),
        (["--poll", "0", "--", "true"], "--poll must be > 0"),
        (["--", "/nonexistent/trainer"], "cannot start '/nonexistent/trainer'"),
    ],
)
def test_bad_input_is_one_line_exit_2(args: list[str], message: str) -> None:
    from gpufleet.checkpoint import cli  # noqa: F401  (registers `run`)
    from gpufleet.cli import app

    res = CliRunner().invoke(app, ["run", *args])
    assert res.exit_code == 2, res.output
    assert message in res.output and "Traceback" not in res.output


def test_grace_is_capped_by_the_notice_deadline(metadata_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from gpufleet.checkpoint import AwsWatcher
    from gpufleet.checkpoint.supervisor import RunConfig, Supervisor

    lines: list[str] = []
    cfg = RunConfig(
        cmd=(sys.executable, "-c", IGNORES_SIGTERM),
        grace_s=60.0,
        watcher=AwsWatcher(metadata_server.url),
        poll_s=0.05,
        status_dir=tmp_path / "s",
    )
    sup = Supervisor(cfg, out=lines.append, handle_signals=False)
    notice_at: list[float] = []

    def notice_once_child_ignores_sigterm() -> None:
        # the child writes its status only after installing SIG_IGN: a notice sent earlier
        # would kill it with the forwarded SIGTERM on a loaded machine (exit 143, not 137)
        end = time.monotonic() + 60
        while time.monotonic() < end:
            st = child_status(tmp_path / "s", 1)
            if st is not None and st["phase"] == "running":
                break
            time.sleep(0.01)
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3))
        notice_at.append(time.monotonic())
        metadata_server.aws_action = json.dumps({"action": "terminate", "time": when})

    noticer = threading.Thread(target=notice_once_child_ignores_sigterm, daemon=True)
    noticer.start()
    rc = sup.run()
    noticer.join(timeout=5)
    assert time.monotonic() - notice_at[0] < 15  # 60 s grace, but the instance is gone in ~3 s
    assert rc == 128 + signal.SIGKILL
    assert "aws terminate notice" in lines[-1] and "grace expired" in lines[-1]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--poll", "nan"], "--poll must be > 0 s: a finite number"),  # flooded the endpoint
        (["--poll", "inf"], "--poll must be > 0 s: a finite number"),  # killed the watcher
        (["--poll", "1e-9"], "from 0.01 to 60 s"),
        (["--grace", "nan"], "--grace must be >= 0 s: a finite number"),  # never SIGKILLed
        (["--grace", "inf"], "--grace must be >= 0 s: a finite number"),
        (["--notice-url", "http://127.0.0.1:99999"], "Port out of range"),
        (["--notice-url", "http:///latest"], "has no host"),
    ],
)
def test_bad_values_refused_before_the_job_starts(
    tmp_path: Path, args: list[str], message: str
) -> None:
    from gpufleet.checkpoint import cli  # noqa: F401  (registers `run`)
    from gpufleet.cli import app

    marker = tmp_path / "started"
    cmd = [sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    res = CliRunner().invoke(app, ["run", *args, "--", *cmd])
    assert res.exit_code == 2, res.output
    assert message in res.output and "Traceback" not in res.output
    assert not marker.exists()


def test_unwritable_status_dir_refused_before_the_job_starts(tmp_path: Path) -> None:
    from gpufleet.checkpoint import cli  # noqa: F401  (registers `run`)
    from gpufleet.cli import app

    blocker = tmp_path / "file"
    blocker.write_text("")
    marker = tmp_path / "started"
    res = CliRunner().invoke(
        app,
        ["run", "--status-dir", str(blocker / "s"), "--", sys.executable, "-c",
         f"open({str(marker)!r}, 'w')"],
    )
    assert res.exit_code == 2, res.output
    assert "--status-dir" in res.output and "is a file, not a folder" in res.output
    assert not marker.exists()


def test_grace_must_be_finite_in_the_library_too() -> None:
    from gpufleet.checkpoint.supervisor import RunConfig
    from gpufleet.errors import InputError

    for grace in (float("nan"), float("inf"), -1.0):
        with pytest.raises(InputError, match="finite number"):
            RunConfig(cmd=("true",), grace_s=grace)


class FlakyWatcher:
    """Raises twice (as urllib does for a URL it cannot use), then reports a termination."""

    provider = "aws"
    last_error: str | None = None

    def __init__(self) -> None:
        self.polls = 0

    def poll(self):  # type: ignore[no-untyped-def]
        from gpufleet.checkpoint.notices import Notice

        self.polls += 1
        if self.polls <= 2:
            raise ValueError("nonnumeric port")
        return Notice("aws", "terminate", None, "{}")


def test_watcher_errors_are_reported_and_notices_still_stop_the_job(tmp_path: Path) -> None:
    from gpufleet.checkpoint.supervisor import RunConfig, Supervisor

    lines: list[str] = []
    cfg = RunConfig(
        cmd=(sys.executable, "-c", "import time; time.sleep(60)"),
        grace_s=5.0,
        watcher=FlakyWatcher(),
        poll_s=0.05,
        status_dir=tmp_path / "s",
    )
    rc = Supervisor(cfg, out=lines.append, handle_signals=False).run()
    assert rc == 128 + signal.SIGTERM  # the watcher outlived its errors and the notice landed
    assert "gpufleet run: aws notice watcher: poll failed (ValueError: nonnumeric port)" in lines[0]
    assert "aws terminate notice" in lines[-1]
