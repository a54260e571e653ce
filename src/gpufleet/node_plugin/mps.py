"""One MPS control daemon per shared GPU (``nvidia-cuda-mps-control -d``).

A share's limits (``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``, ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``)
hold only for a process that is a client of an MPS server, and a client finds its server through
``CUDA_MPS_PIPE_DIRECTORY``. So when the first share of a GPU is prepared the plugin starts a
control daemon for that GPU alone::

    CUDA_VISIBLE_DEVICES=<uuid> CUDA_MPS_PIPE_DIRECTORY=<mps-dir>/<uuid>/pipe \\
    CUDA_MPS_LOG_DIRECTORY=<mps-dir>/<uuid>/log nvidia-cuda-mps-control -d

(the daemon starts the MPS server itself when its first client connects), and when the last
share of the GPU is unprepared it tells it ``quit`` the way an operator does, through the
control client: ``echo quit | CUDA_MPS_PIPE_DIRECTORY=<pipe> nvidia-cuda-mps-control``.

The daemon writes its pid to ``<pipe>/nvidia-cuda-mps-control.pid`` and removes it when it
stops; a pipe directory whose pid file names a running process is *live*. A restarted plugin
adopts a live daemon instead of starting a second one on the same pipe directory.

Only a GPU node has the real binary; the tests drive this module with a stand-in executable that
daemonizes, writes the pid file and reads ``quit`` from its pipe directory.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

DEFAULT_CONTROL = "nvidia-cuda-mps-control"
DEFAULT_DIR = Path("/var/run/gpufleet/mps")
PID_FILE = "nvidia-cuda-mps-control.pid"


class MpsError(RuntimeError):
    """An MPS control daemon that would not start or stop; the message names the GPU."""


def find_control(control: str) -> str | None:
    """The control binary's path: ``control`` itself when it names a file, else from PATH."""
    if os.sep in control:
        return control if os.access(control, os.X_OK) else None
    return shutil.which(control)


@dataclass
class MpsManager:
    """The node's MPS control daemons, one per GPU uuid, under ``root``. Thread-safe."""

    control: str
    root: Path = DEFAULT_DIR
    timeout_s: float = 10.0
    # the host directory that is the daemons' /dev/shm: MPS clients exchange memory with their
    # server through it, so each share's container gets it as its /dev/shm (the host's own
    # /dev/shm where the plugin runs on the host; a directory the chart mounts at the plugin
    # container's /dev/shm otherwise)
    shm_dir: Path = Path("/dev/shm")
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock)
    _running: set[str] = field(init=False, default_factory=set)

    def pipe_dir(self, uuid: str) -> Path:
        return self.root / uuid / "pipe"

    def log_dir(self, uuid: str) -> Path:
        return self.root / uuid / "log"

    def pid(self, uuid: str) -> int | None:
        """The pid of the live daemon of ``uuid``, or None."""
        try:
            pid = int((self.pipe_dir(uuid) / PID_FILE).read_text().strip())
        except (OSError, ValueError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:  # someone else's process, alive
            return pid
        return pid

    def running(self) -> int:
        """How many daemons this manager started or adopted and has not stopped."""
        with self._lock:
            return len(self._running)

    def ensure(self, uuid: str) -> int:
        """Start the daemon of ``uuid`` unless one is live (then adopt it); its pid."""
        with self._lock:
            pid = self.pid(uuid)
            if pid is not None:
                if uuid not in self._running:
                    log.info("MPS: adopted the control daemon of %s (pid %d)", uuid, pid)
                    self._running.add(uuid)
                return pid
            pipe, logs = self.pipe_dir(uuid), self.log_dir(uuid)
            pipe.mkdir(parents=True, exist_ok=True)
            logs.mkdir(parents=True, exist_ok=True)
            env = {**os.environ, "CUDA_VISIBLE_DEVICES": uuid,
                   "CUDA_MPS_PIPE_DIRECTORY": str(pipe), "CUDA_MPS_LOG_DIRECTORY": str(logs)}
            try:
                done = subprocess.run([self.control, "-d"], env=env, capture_output=True,
                                      text=True, timeout=self.timeout_s, check=False)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise MpsError(f"MPS control daemon for {uuid}: {self.control} -d: {exc}"
                               ) from None
            if done.returncode != 0:
                raise MpsError(f"MPS control daemon for {uuid}: {self.control} -d exited "
                               f"{done.returncode}: {(done.stderr or done.stdout).strip()[-300:]}")
            deadline = time.monotonic() + self.timeout_s
            while (pid := self.pid(uuid)) is None:
                if time.monotonic() > deadline:
                    raise MpsError(f"MPS control daemon for {uuid} did not write {pipe / PID_FILE}"
                                   f" within {self.timeout_s:.0f} s (log: {logs})")
                time.sleep(0.02)
            log.info("MPS: started the control daemon of %s (pid %d, pipe %s)", uuid, pid, pipe)
            self._running.add(uuid)
            return pid

    def quit(self, uuid: str) -> bool:
        """Tell the daemon of ``uuid`` to quit and wait until it has; whether one was live."""
        with self._lock:
            self._running.discard(uuid)
            pid = self.pid(uuid)
            if pid is None:
                return False
            env = {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": str(self.pipe_dir(uuid))}
            try:
                done = subprocess.run([self.control], input="quit\n", env=env,
                                      capture_output=True, text=True, timeout=self.timeout_s,
                                      check=False)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise MpsError(f"MPS control daemon of {uuid}: quit: {exc}") from None
            if done.returncode != 0:
                raise MpsError(f"MPS control daemon of {uuid}: quit exited {done.returncode}: "
                               f"{(done.stderr or done.stdout).strip()[-300:]}")
            deadline = time.monotonic() + self.timeout_s
            while self.pid(uuid) is not None:
                if time.monotonic() > deadline:
                    raise MpsError(f"MPS control daemon of {uuid} (pid {pid}) still runs "
                                   f"{self.timeout_s:.0f} s after quit")
                time.sleep(0.02)
            log.info("MPS: the control daemon of %s (pid %d) quit", uuid, pid)
            return True

    def live(self) -> list[str]:
        """The uuids under ``root`` with a live daemon (this plugin's or a previous run's)."""
        if not self.root.is_dir():
            return []
        return sorted(d.name for d in self.root.iterdir() if self.pid(d.name) is not None)
