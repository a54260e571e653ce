"""Component processes: pidfiles, stop with SIGTERM then SIGKILL, never a stranger's pid."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from gpufleet.lab.errors import LabError
from gpufleet.lab.processes import free_port, read_pidfile, start, stop, wait_until


def test_start_records_a_pidfile_and_stop_ends_the_process(tmp_path: Path) -> None:
    r = start(
        "sleeper",
        [sys.executable, "-c", "import time; time.sleep(60)"],
        run_dir=tmp_path / "run",
        log_dir=tmp_path / "logs",
    )
    assert r.alive()
    again = read_pidfile(r.pidfile, tmp_path / "logs")
    assert again is not None and again.pid == r.pid and again.alive()
    stop(again)
    assert not r.alive()
    assert not r.pidfile.exists()
    stop(again)  # idempotent


def test_stop_escalates_to_sigkill_when_sigterm_is_ignored(tmp_path: Path) -> None:
    code = (
        "import signal, time, sys\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    r = start(
        "stubborn",
        [sys.executable, "-c", code],
        run_dir=tmp_path / "run",
        log_dir=tmp_path / "logs",
    )
    wait_until(r, lambda: "ready" in r.log.read_text(), what="ready", timeout_s=30)
    stop(r, grace_s=0.5)
    assert not r.alive()


def test_a_reused_pid_is_not_killed(tmp_path: Path) -> None:
    r = start(
        "victim",
        [sys.executable, "-c", "import time; time.sleep(60)"],
        run_dir=tmp_path / "run",
        log_dir=tmp_path / "logs",
    )
    try:
        # A pidfile naming the same pid with another start time is another process's record.
        stale = tmp_path / "run" / "stale.pid"
        stale.write_text(json.dumps({"pid": r.pid, "start_time": (r.start_time or 0) + 1}))
        other = read_pidfile(stale, tmp_path / "logs")
        assert other is not None and not other.alive()
        stop(other)
        assert r.alive()
    finally:
        stop(r)


def test_wait_until_names_the_component_and_its_log_when_it_dies(tmp_path: Path) -> None:
    r = start(
        "crasher",
        [sys.executable, "-c", "print('bad flag --x'); raise SystemExit(3)"],
        run_dir=tmp_path / "run",
        log_dir=tmp_path / "logs",
    )
    with pytest.raises(LabError) as err:
        wait_until(r, lambda: False, what="ready", timeout_s=30)
    assert "crasher exited before ready" in str(err.value)
    assert str(r.log) in str(err.value) and "bad flag --x" in str(err.value)


def test_free_port_is_bindable() -> None:
    import socket

    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
