"""Start, watch and stop the lab's component processes.

Each component runs detached (its own session, so it outlives ``gpufleet lab up``), logs to
``DIR/logs/<name>.log`` and is recorded in ``DIR/run/<name>.pid`` with its start time from
``/proc``: ``lab down`` then stops exactly the processes it started, never a process that later
reused the pid. Stopping is SIGTERM, a bounded wait, then SIGKILL. The pidfile also keeps the
command line, working directory and the environment variables the lab added (never the whole
environment), so :func:`restart` can start a component that died again exactly as it was.

Ports. A port found free and handed to a process started later can be taken in between (by any
process: every outgoing connection takes a port from the same range), so the lab never trusts a
port it did not see its own component listening on:

- a component that can bind port 0 does, and the lab reads back the port it got
  (:func:`wait_own_port`: from the component's own report in its log, or from ``/proc``);
- a component that must be told its port is started by :func:`start_on_free_ports`, which waits
  until ``/proc`` shows that very process listening on it, and when the component says the port
  is in use elsewhere (``address already in use``) stops it and starts it again on fresh ports, a
  bounded number of times (:data:`PORT_TRIES`), then fails naming the component, the port and its
  log.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpufleet.lab.errors import LabError

STOP_GRACE_S = 10.0
# How many times a component is started, on fresh ports each time, before a taken port fails it
PORT_TRIES = 5
ADDRESS_IN_USE = "address already in use"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the kernel's choice). Nothing holds it for the
    caller: start a component on it with :func:`start_on_free_ports`, which copes with losing it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports free on 127.0.0.1 right now (see :func:`free_port`)."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


def _socket_inodes(pid: int) -> set[int]:
    """The inodes of the sockets process ``pid`` has open (its ``/proc/PID/fd`` links)."""
    fd_dir = f"/proc/{pid}/fd"
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return set()
    inodes = set()
    for fd in fds:
        try:
            target = os.readlink(f"{fd_dir}/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[len("socket:[") : -1]))
    return inodes


def listening_ports(pid: int) -> set[int]:
    """The TCP ports process ``pid`` listens on, on any address (empty when it is gone): its
    sockets matched against the listening sockets of its network namespace, from ``/proc``."""
    inodes = _socket_inodes(pid)
    ports: set[int] = set()
    if not inodes:
        return ports
    for table in ("tcp", "tcp6"):
        try:
            rows = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            # sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            f = row.split()
            if len(f) > 9 and f[3] == "0A" and int(f[9]) in inodes:  # 0A: LISTEN
                ports.add(int(f[1].rsplit(":", 1)[1], 16))
    return ports


def unix_listening(path: Path) -> bool:
    """Whether a process accepts connections on the Unix socket at ``path``."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        try:
            s.connect(str(path))
        except OSError:
            return False
        return True


def port_in_use_line(line: str, ports: Iterable[int]) -> int | None:
    """The port of ``ports`` that one line of a component's output says is in use elsewhere
    (``listen tcp 127.0.0.1:PORT: bind: address already in use`` and the like), or None."""
    if ADDRESS_IN_USE not in line.lower():
        return None
    for port in ports:
        if re.search(rf":{port}(?!\d)", line):
            return port
    return None


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
    log_offset: int = 0  # where this start's output begins in ``log`` (earlier starts' before)

    def alive(self) -> bool:
        _reap(self.pid)
        if _is_zombie(self.pid):
            return False
        return _start_time(self.pid) == self.start_time

    def output(self) -> str:
        """What this start of the component has written to its log so far."""
        try:
            with self.log.open("rb") as f:
                f.seek(self.log_offset)
                return f.read().decode(errors="replace")
        except OSError:
            return ""


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
        offset = out.tell()
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
    running = Running(name, proc.pid, _start_time(proc.pid), log, run_dir / f"{name}.pid",
                      offset)
    running.pidfile.write_text(
        json.dumps({"pid": running.pid, "start_time": running.start_time, "argv": list(argv),
                    "log_offset": offset, "env": env or {},
                    "cwd": None if cwd is None else str(cwd)})
    )
    return running


def restart(pidfile: Path, log_dir: Path) -> Running:
    """Start a component again as its pidfile recorded it — the same command line (so the same
    ports and flags), working directory and extra environment — after stopping it if it still
    runs (:func:`stop`). For bringing back a component that died or was killed; waiting until
    it serves again is the caller's (:func:`wait_until`)."""
    try:
        data = json.loads(pidfile.read_text())
        argv = [str(a) for a in data["argv"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise LabError(f"cannot restart from {pidfile}: no recorded command ({exc})") from None
    old = read_pidfile(pidfile, log_dir)
    if old is not None:
        stop(old)
    cwd = data.get("cwd")
    return start(pidfile.stem, argv, run_dir=pidfile.parent, log_dir=log_dir,
                 env=dict(data.get("env") or {}), cwd=None if cwd is None else Path(cwd))


def read_pidfile(pidfile: Path, log_dir: Path) -> Running | None:
    try:
        data = json.loads(pidfile.read_text())
        return Running(
            pidfile.stem,
            int(data["pid"]),
            data.get("start_time"),
            log_dir / f"{pidfile.stem}.log",
            pidfile,
            int(data.get("log_offset", 0)),
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


class PortTaken(LabError):
    """A component found a port it was given in use by another process."""

    def __init__(self, running: Running, port: int) -> None:
        super().__init__(
            f"{running.name}: port {port} on 127.0.0.1 is in use by another process; "
            f"see {running.log}\n{log_tail(running.log)}"
        )
        self.running = running
        self.port = port


class _OutputScan:
    """Reads a component's output as it grows (each byte once) for a port-in-use line."""

    def __init__(self, running: Running, ports: Sequence[int]) -> None:
        self.running, self.ports = running, ports
        self.pos, self.partial = running.log_offset, b""

    def taken(self) -> int | None:
        try:
            with self.running.log.open("rb") as f:
                f.seek(self.pos)
                chunk = f.read()
        except OSError:
            return None
        self.pos += len(chunk)
        *lines, self.partial = (self.partial + chunk).split(b"\n")
        for line in lines:
            port = port_in_use_line(line.decode(errors="replace"), self.ports)
            if port is not None:
                return port
        return None


def wait_until(
    running: Running,
    check: Callable[[], bool],
    *,
    what: str,
    timeout_s: float = 90.0,
    interval_s: float = 0.2,
    ports: Sequence[int] = (),
) -> None:
    """Poll ``check`` until true; fail naming the component and its log when it exits or hangs.

    With ``ports`` (the ports the component was told to listen on), a line of its output saying
    one of them is in use elsewhere raises :class:`PortTaken` at once, whether the component
    exited over it or keeps running and retrying (as the kubelet's healthz server does).
    """
    deadline = time.monotonic() + timeout_s
    scan = _OutputScan(running, ports) if ports else None
    while True:
        alive = running.alive()
        if scan is not None:  # after alive(): a component that exited has written everything
            port = scan.taken()
            if port is not None:
                raise PortTaken(running, port)
        if not alive:
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


Starter = Callable[[str, Sequence[str]], Running]


def _listens_and(running: Running, ports: Sequence[int],
                 ready: Callable[[Sequence[int]], bool]) -> Callable[[], bool]:
    def check() -> bool:
        return set(ports) <= listening_ports(running.pid) and ready(ports)

    return check


def start_on_free_ports(
    name: str,
    argv: Callable[[Sequence[int]], Sequence[str]],
    ready: Callable[[Sequence[int]], bool],
    *,
    start: Starter,
    what: str,
    count: int = 1,
    timeout_s: float = 90.0,
    tries: int = PORT_TRIES,
    log: Callable[[str], None] = lambda _m: None,
) -> tuple[Running, list[int]]:
    """Start a component that must be told its ports and wait until it serves on them.

    ``argv(ports)`` is its command line for ``count`` ports free right now (it may write a
    config file naming them); ``start(name, argv)`` starts it (the lab's starter). It is ready
    once ``/proc`` shows this very process listening on every one of its ports — a probe alone
    could be answered by whatever took a port — and ``ready(ports)`` holds. When it says a port
    is in use elsewhere (see :func:`wait_until`), it is stopped and started again on fresh
    ports, ``tries`` starts in all; then a :class:`LabError` names the component, the port and
    the end of its log. Returns the running component and its ports.
    """
    for attempt in range(1, tries + 1):
        ports = free_ports(count)
        running = start(name, list(argv(ports)))
        try:
            wait_until(running, _listens_and(running, ports, ready), what=what,
                       timeout_s=timeout_s, ports=ports)
            return running, ports
        except PortTaken as exc:
            stop(running)
            if attempt == tries:
                raise LabError(
                    f"{name}: port {exc.port} on 127.0.0.1 was in use by another process; "
                    f"gave up after {tries} starts on fresh ports each time; see {running.log}\n"
                    f"{log_tail(running.log)}"
                ) from None
            log(f"{name}: port {exc.port} was taken by another process; starting it again on "
                f"another port ({attempt + 1} of {tries})")
    raise AssertionError("unreachable")  # the loop returns or raises


def wait_own_port(
    running: Running,
    ready: Callable[[int], bool],
    *,
    what: str,
    timeout_s: float = 90.0,
    reported: str | None = None,
) -> int:
    """For a component started on port 0: wait until it listens and ``ready(port)``; the port.

    The port is the one its output reports (``reported``, a regular expression whose group 1 is
    the port) when it does, else its only listening TCP port; either way ``/proc`` must show
    this process listening on it.
    """
    found: list[int] = []
    pattern = re.compile(reported) if reported is not None else None

    def check() -> bool:
        listening = listening_ports(running.pid)
        if pattern is not None:
            match = pattern.search(running.output())
            port = int(match.group(1)) if match else None
        else:
            port = next(iter(listening)) if len(listening) == 1 else None
        if port is None or port not in listening or not ready(port):
            return False
        found.append(port)
        return True

    wait_until(running, check, what=what, timeout_s=timeout_s)
    return found[-1]


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
