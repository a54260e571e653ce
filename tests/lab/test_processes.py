"""Component processes: pidfiles, stop with SIGTERM then SIGKILL, never a stranger's pid; ports
that another process takes before the component binds them."""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from gpufleet.lab import processes
from gpufleet.lab.errors import LabError
from gpufleet.lab.processes import (
    Running,
    free_port,
    listening_ports,
    port_in_use_line,
    port_open,
    read_pidfile,
    restart,
    start,
    start_on_free_ports,
    stop,
    wait_own_port,
    wait_until,
)


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


def test_restart_runs_the_recorded_command_again_in_its_directory_and_environment(
        tmp_path: Path) -> None:
    """A component killed with SIGKILL comes back with the same argv, cwd and extra env."""
    work = tmp_path / "work"
    work.mkdir()
    code = ("import os, sys, time; print('up', sys.argv[1], os.getcwd(), os.environ['MARK'], "
            "flush=True); time.sleep(60)")
    first = start("comp", [sys.executable, "-c", code, "flag-x"], run_dir=tmp_path / "run",
                  log_dir=tmp_path / "logs", env={"MARK": "m1"}, cwd=work)
    wait_until(first, lambda: "up" in first.output(), what="printing", timeout_s=60)
    os.kill(first.pid, 9)
    again = restart(first.pidfile, tmp_path / "logs")
    try:
        assert again.pid != first.pid and again.alive()
        wait_until(again, lambda: "up" in again.output(), what="printing", timeout_s=60)
        assert again.output().split() == ["up", "flag-x", str(work), "m1"]
        assert read_pidfile(again.pidfile, tmp_path / "logs") == again
    finally:
        stop(again)


def test_restart_without_a_recorded_command_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "x.pid").write_text(json.dumps({"pid": 1}))
    with pytest.raises(LabError, match="no recorded command"):
        restart(tmp_path / "x.pid", tmp_path)


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
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


# ------------------------------------------------------------------ ports

# A component that must be told its port: binds it or says, as Go's net and gpufleet's own
# commands do, that it is in use; ``stay`` keeps it running after that (as the kubelet's healthz).
COMPONENT = """
import socket, sys, time
port, stay = int(sys.argv[1]), len(sys.argv) > 2
s = socket.socket()
try:
    s.bind(("127.0.0.1", port))
except OSError as exc:
    print(f"listen tcp 127.0.0.1:{port}: bind: {exc.strerror}", flush=True)
    if stay:
        time.sleep(60)
    raise SystemExit(1)
s.listen()
print(f"serving on 127.0.0.1:{s.getsockname()[1]}", flush=True)
time.sleep(60)
"""


def held_port() -> socket.socket:
    """A port another process took first: bound and listening (connections to it succeed)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s


def starter(tmp_path: Path, started: list[Running]) -> Callable[[str, Sequence[str]], Running]:
    def start_one(name: str, argv: Sequence[str]) -> Running:
        r = start(name, argv, run_dir=tmp_path / "run", log_dir=tmp_path / "logs")
        started.append(r)
        return r

    return start_one


def test_listening_ports_are_the_process_own(tmp_path: Path) -> None:
    other = held_port()  # this process's, not the component's
    r = start("c", [sys.executable, "-c", COMPONENT, "0"], run_dir=tmp_path / "run",
              log_dir=tmp_path / "logs")
    try:
        wait_until(r, lambda: "serving" in r.output(), what="serving", timeout_s=60)
        port = int(r.output().split(":")[-1])
        assert listening_ports(r.pid) == {port}
        assert other.getsockname()[1] in listening_ports(os.getpid())
    finally:
        stop(r)
        other.close()
    assert listening_ports(r.pid) == set()


def test_a_taken_port_is_retried_on_a_fresh_one(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    taken = held_port()
    picks = iter([taken.getsockname()[1]])
    real = processes.free_port
    monkeypatch.setattr(processes, "free_port", lambda: next(picks, None) or real())
    started: list[Running] = []
    notes: list[str] = []
    try:
        # the probe alone (something accepts connections) would take the intruder for the
        # component: only its own listening socket counts
        r, (port,) = start_on_free_ports(
            "comp", lambda ports: [sys.executable, "-c", COMPONENT, str(ports[0])],
            lambda ports: port_open(ports[0]), start=starter(tmp_path, started),
            what="serving", timeout_s=60, log=notes.append)
        assert port != taken.getsockname()[1] and port in listening_ports(r.pid)
        assert len(started) == 2 and not started[0].alive() and r is started[1]
        assert "address already in use" in started[0].output().lower()
        assert "address already in use" not in r.output().lower()
        assert notes == [f"comp: port {taken.getsockname()[1]} was taken by another process; "
                         "starting it again on another port (2 of 5)"]
        assert read_pidfile(r.pidfile, tmp_path / "logs") == r
    finally:
        for s in started:
            stop(s)
        taken.close()


def test_a_component_that_keeps_running_on_a_taken_port_is_restarted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    taken = held_port()
    picks = iter([taken.getsockname()[1]])
    real = processes.free_port
    monkeypatch.setattr(processes, "free_port", lambda: next(picks, None) or real())
    started: list[Running] = []
    try:
        r, _ = start_on_free_ports(
            "stayer", lambda ports: [sys.executable, "-c", COMPONENT, str(ports[0]), "stay"],
            lambda ports: True, start=starter(tmp_path, started), what="serving",
            timeout_s=60)
        assert len(started) == 2 and not started[0].alive() and r.alive()
    finally:
        for s in started:
            stop(s)
        taken.close()


def test_ports_taken_every_time_fail_naming_the_component_port_and_log(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    taken = held_port()
    port = taken.getsockname()[1]
    monkeypatch.setattr(processes, "free_port", lambda: port)
    started: list[Running] = []
    try:
        with pytest.raises(LabError) as err:
            start_on_free_ports(
                "unlucky", lambda ports: [sys.executable, "-c", COMPONENT, str(ports[0])],
                lambda ports: True, start=starter(tmp_path, started), what="serving",
                timeout_s=60, tries=3)
    finally:
        taken.close()
    assert len(started) == 3 and not any(s.alive() for s in started)
    msg = str(err.value)
    assert msg.startswith(f"unlucky: port {port} on 127.0.0.1 was in use by another process")
    assert "after 3 starts" in msg and str(started[-1].log) in msg
    assert f"listen tcp 127.0.0.1:{port}: bind: Address already in use" in msg  # the log's end


def test_another_failure_is_not_retried(tmp_path: Path) -> None:
    started: list[Running] = []
    with pytest.raises(LabError, match="crasher exited before serving"):
        start_on_free_ports(
            "crasher", lambda ports: [sys.executable, "-c", "raise SystemExit(3)"],
            lambda ports: True, start=starter(tmp_path, started), what="serving", timeout_s=60)
    assert len(started) == 1


def test_wait_own_port_reads_back_the_port_a_component_bound(tmp_path: Path) -> None:
    r = start("c", [sys.executable, "-c", COMPONENT, "0"], run_dir=tmp_path / "run",
              log_dir=tmp_path / "logs")
    try:
        reported = wait_own_port(r, port_open, what="serving", timeout_s=60,
                                 reported=r"serving on 127\.0\.0\.1:(\d+)")
        assert wait_own_port(r, port_open, what="serving", timeout_s=60) == reported
        assert listening_ports(r.pid) == {reported}
    finally:
        stop(r)


@pytest.mark.parametrize(("line", "port"), [
    ('E1206 run.go:72] "command failed" err="failed to create listener: failed to listen on '
     '127.0.0.1:45999: listen tcp 127.0.0.1:45999: bind: address already in use"', 45999),
    ("cannot listen on 127.0.0.1:45999: Address already in use", 45999),
    ("listen tcp 0.0.0.0:4599: bind: address already in use", None),  # another port
    ("listen tcp 127.0.0.1:459990: bind: address already in use", None),
    ("serving on 127.0.0.1:45999", None),
])
def test_port_in_use_line(line: str, port: int | None) -> None:
    assert port_in_use_line(line, [45999, 1]) == port
