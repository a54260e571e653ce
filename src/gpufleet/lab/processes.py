"""Start, watch and stop the lab's component processes.

Each component runs detached (its own session, so it outlives ``gpufleet lab up``), logs to
``DIR/logs/<name>.log`` and is recorded in ``DIR/run/<name>.pid`` with its start time from
``/proc``: ``lab down`` then stops exactly the processes it started, never a process that later
reused the pid. Stopping is SIGTERM, a bounded wait, then SIGKILL.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpufleet.lab.errors import LabError

STOP_GRACE_S = 10.0


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_time(pid: int) -> int | None:
    """Process start time in clock ticks since boot (field 22 of /proc/PID/stat), or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is parenthesised and may contain spaces: split after it.
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[19])


def _is_zombie(pid: int) -> bool:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return text[text.rindex(")") + 2 :].split()[0] in ("Z", "X")


def _reap(pid: int) -> None:
    """Collect the exit status when the process is our own child (no zombie left behind)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


@dataclass(frozen=True, slots=True)
class Running:
    """A started component: what to stop, and where its log is."""

    name: str
    pid: int
    start_time: int | None
    log: Path
    pidfile: Path

    def alive(self) -> bool:
        _reap(self.pid)
        if _is_zombie(self.pid):
            return False
        return _start_time(self.pid) == self.start_time


def start(
    name: str,
    argv: Sequence[str],
    *,
    run_dir: Path,
    log_dir: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> Running:
    """Start ``argv`` detached with output to ``log_dir/name.log``; record its pidfile."""
    run_dir.mkdir(parents=True, exist_ok=True)
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{name}.log"
    with log.open("ab") as out:
        out.write(f"\n==> {time.strftime('%Y-%m-%dT%H:%M:%S')} {' '.join(argv)}\n".encode())
        out.flush()
        try:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, **(env or {})},
                cwd=cwd,
            )
        except OSError as exc:
            raise LabError(f"{name}: cannot start {argv[0]}: {exc}") from exc
    running = Running(name, proc.pid, _start_time(proc.pid), log, run_dir / f"{name}.pid")
    running.pidfile.write_text(
        json.dumps({"pid": running.pid, "start_time": running.start_time, "argv": list(argv)})
    )
    return running


def read_pidfile(pidfile: Path, log_dir: Path) -> Running | None:
    try:
        data = json.loads(pidfile.read_text())
        return Running(
            pidfile.stem,
            int(data["pid"]),
            data.get("start_time"),
            log_dir / f"{pidfile.stem}.log",
            pidfile,
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def stop(running: Running, grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM, wait up to ``grace_s``, then SIGKILL; remove the pidfile. Idempotent."""
    if running.alive():
        with contextlib.suppress(ProcessLookupError):
            os.kill(running.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while running.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if running.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(running.pid, signal.SIGKILL)
            deadline = time.monotonic() + 5.0
            while running.alive() and time.monotonic() < deadline:
                time.sleep(0.05)
    running.pidfile.unlink(missing_ok=True)


def log_tail(log: Path, lines: int = 15) -> str:
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def wait_until(
    running: Running,
    check: Callable[[], bool],
    *,
    what: str,
    timeout_s: float = 90.0,
    interval_s: float = 0.2,
) -> None:
    """Poll ``check`` until true; fail naming the component and its log when it exits or hangs."""
    deadline = time.monotonic() + timeout_s
    while True:
        if not running.alive():
            raise LabError(
                f"{running.name} exited before {what}; see {running.log}\n{log_tail(running.log)}"
            )
        try:
            if check():
                return
        except Exception:  # any failure of the probe means "not yet"
            pass
        if time.monotonic() >= deadline:
            raise LabError(
                f"{running.name} not {what} after {timeout_s:.0f} s; see {running.log}\n"
                f"{log_tail(running.log)}"
            )
        time.sleep(interval_s)


def port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def run_tool(argv: Sequence[str], what: str, *, timeout_s: float = 300.0,
             env: dict[str, str] | None = None) -> str:
    """Run a short-lived tool to completion; its stdout, or a LabError of one line naming
    ``what`` and the tool's last line of output."""
    try:
        out = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s,
                             check=False, env=None if env is None else {**os.environ, **env})
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LabError(f"{what} failed: {exc}") from None
    if out.returncode != 0:
        last = (out.stderr or out.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise LabError(f"{what} failed (exit {out.returncode}): {last[0]}")
    return out.stdout
