"""``gpufleet run``: run a training command, turn preemption notices into SIGTERM, restart it.

Why a separate process: the training process may be stuck in a long step or in native code when
the notice arrives; the supervisor stays responsive, enforces the grace period (SIGKILL when it
expires) and sees the exit code. The child runs in its own process group so a terminal's Ctrl-C
reaches only the supervisor, which forwards a single SIGTERM to the whole group (covering a launcher
that spawns the real trainer).

Restart rules: exit ``EXIT_PREEMPTED`` with ``--restart`` and restarts left → launch again (it
resumes from its checkpoint). No restart after a cloud notice (the machine itself is going away;
exit 75 lets the orchestrator reschedule elsewhere), after the supervisor itself was told to stop,
nor after any other exit code (a crash loop would burn money without progress).
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from gpufleet.checkpoint.notices import (
    DEFAULT_POLL_S,
    Notice,
    NoticePoller,
    Watcher,
    check_poll_interval,
)
from gpufleet.checkpoint.protocol import ENV_ATTEMPT, ENV_STATUS_FILE, EXIT_PREEMPTED, SAVE_SIGNAL
from gpufleet.checkpoint.status import Status, read_status
from gpufleet.errors import InputError

MAX_GRACE_S = 3600.0  # no cloud gives more than 2 min of notice; an hour covers any local use

# What signal.signal takes and hands back: a function, SIG_DFL/SIG_IGN, or None (not set by Python)
_Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


@dataclass(frozen=True, slots=True)
class RunConfig:
    cmd: tuple[str, ...]
    restart: bool = False
    max_restarts: int = 10
    grace_s: float = 30.0
    watcher: Watcher | None = None
    poll_s: float = DEFAULT_POLL_S
    status_dir: Path | None = None

    def __post_init__(self) -> None:
        if not self.cmd:
            raise InputError(
                "no command given: use `gpufleet run [OPTIONS] -- CMD...`", field="CMD"
            )
        if self.max_restarts < 0:
            raise InputError(
                f"--max-restarts must be >= 0, got {self.max_restarts}", field="max-restarts"
            )
        if not (math.isfinite(self.grace_s) and 0 <= self.grace_s <= MAX_GRACE_S):
            # nan compares false with everything: the SIGKILL deadline would never arrive
            raise InputError(
                f"--grace must be >= 0 s: a finite number up to {MAX_GRACE_S:g} s, "
                f"got {self.grace_s}",
                field="grace",
            )
        check_poll_interval(self.poll_s, field="poll", name="--poll")


@dataclass(frozen=True, slots=True)
class Attempt:
    number: int
    rc: int
    started_at: float  # Unix time of launch
    ended_at: float
    status: Status | None
    cause: str | None  # why the supervisor signalled it, if it did
    killed: bool  # the grace period ran out and it got SIGKILL

    @property
    def outcome(self) -> str:
        if self.rc == 0:
            return "completed"
        if self.rc == EXIT_PREEMPTED:
            return f"preempted, checkpoint saved (exit {EXIT_PREEMPTED})"
        if self.rc < 0:
            return f"killed by {signal.Signals(-self.rc).name}"
        return f"failed (exit {self.rc})"

    @property
    def startup_s(self) -> float | None:
        """Launch to training resumed: interpreter start, imports, checkpoint read."""
        if self.status is None or self.status.resumed_at is None:
            return None
        return self.status.resumed_at - self.started_at

    @property
    def lost_s(self) -> float:
        """Work done after the last durable checkpoint: redone by the next attempt."""
        if self.rc == 0:
            return 0.0
        if self.status is None:
            return self.ended_at - self.started_at
        since = self.status.saved_at if self.status.saves else self.status.resumed_at
        return max(0.0, self.ended_at - (since or self.started_at))

    def summary(self) -> str:
        st = self.status
        parts = [
            f"attempt {self.number}",
            self.outcome,
            f"ran {self.ended_at - self.started_at:.1f} s",
        ]
        if self.cause:
            parts.append(
                f"stop: {self.cause}" + (" (grace expired, SIGKILL)" if self.killed else "")
            )
        if st is None:
            parts.append("no status (command does not use gpufleet.checkpoint?)")
        else:
            if self.startup_s is not None:
                parts.append(f"startup {self.startup_s:.1f} s")
            resumed = (
                "fresh start" if st.resumed_step is None else f"resumed step {st.resumed_step}"
            )
            if st.rejected:
                resumed += f" ({st.rejected} newer rejected)"
            parts.append(resumed)
            parts.append("saved step " + ("-" if st.saved_step is None else str(st.saved_step)))
        parts.append(f"lost {self.lost_s:.1f} s")
        return " · ".join(parts)


class Supervisor:
    def __init__(
        self, cfg: RunConfig, *, out: Callable[[str], None] = print, handle_signals: bool = True
    ) -> None:
        self.cfg = cfg
        self.out = out
        self.handle_signals = handle_signals
        self.attempts: list[Attempt] = []
        self._lock = threading.Lock()
        self._stop_cause: str | None = None  # set => signal the child and do not restart
        self._stop_deadline: float | None = None
        self._notice: Notice | None = None
        self._save_wanted = False
        self._interrupts = 0
        self._poller: NoticePoller | None = None
        self._poller_death_told = False

    # flags set from signal handlers / the poller thread
    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._interrupts += 1
        with self._lock:
            if self._stop_cause is None:
                self._stop_cause = f"supervisor got {signal.Signals(signum).name}"

    def _on_notice(self, notice: Notice) -> None:
        with self._lock:
            if not notice.stops:
                self._save_wanted = True
                self.out(f"gpufleet run: {notice.provider} {notice.kind}: asking for a checkpoint")
                return
            self._notice = notice
            if self._stop_cause is None:
                left = notice.time_left(time.time())
                self._stop_cause = f"{notice.provider} {notice.kind} notice" + (
                    "" if left is None else f", {left:.0f} s left"
                )
                self._stop_deadline = notice.deadline

    def _on_problem(self, message: str) -> None:
        with self._lock:
            self.out(f"gpufleet run: {message}")

    def _check_poller(self) -> None:
        """A watcher thread that ended unasked means the job runs unwatched: say so, once."""
        poller = self._poller
        if poller is not None and not poller.alive and not self._poller_death_told:
            self._poller_death_told = True
            self.out("gpufleet run: the notice watcher stopped; preemption notices are NOT "
                     "being watched")

    def run(self) -> int:
        old: dict[signal.Signals, _Handler] = {}
        if self.handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                old[sig] = signal.signal(sig, self._on_signal)
        poller = (
            NoticePoller(
                self.cfg.watcher, self._on_notice, self.cfg.poll_s, on_problem=self._on_problem
            ).start()
            if self.cfg.watcher is not None
            else None
        )
        self._poller = poller
        tmp = None
        status_dir = self.cfg.status_dir
        if status_dir is None:
            tmp = tempfile.TemporaryDirectory(prefix="gpufleet-run-")
            status_dir = Path(tmp.name)
        status_dir.mkdir(parents=True, exist_ok=True)
        try:
            return self._loop(status_dir)
        finally:
            if poller is not None:
                poller.stop()
            for sig, handler in old.items():
                signal.signal(sig, handler)
            if tmp is not None:
                tmp.cleanup()

    def _loop(self, status_dir: Path) -> int:
        restarts = 0
        while True:
            attempt = self._run_once(len(self.attempts) + 1, status_dir)
            self.attempts.append(attempt)
            self.out("gpufleet run: " + attempt.summary())
            again = (
                attempt.rc == EXIT_PREEMPTED
                and self.cfg.restart
                and self._stop_cause is None
                and restarts < self.cfg.max_restarts
            )
            if not again:
                if attempt.rc == EXIT_PREEMPTED and self.cfg.restart and self._stop_cause is None:
                    self.out(f"gpufleet run: giving up after {restarts} restarts")
                if len(self.attempts) > 1:
                    self.out(self._total())
                return attempt.rc if attempt.rc >= 0 else 128 - attempt.rc
            restarts += 1

    def _total(self) -> str:
        wall = self.attempts[-1].ended_at - self.attempts[0].started_at
        lost = sum(a.lost_s for a in self.attempts)
        startup = sum(a.startup_s or 0.0 for a in self.attempts[1:])
        return (
            f"gpufleet run: {len(self.attempts)} attempts · wall {wall:.1f} s · "
            f"lost {lost:.1f} s after last checkpoints · restart startup {startup:.1f} s"
        )

    def _signal_group(self, child: subprocess.Popen[bytes], sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, sig)

    def _run_once(self, number: int, status_dir: Path) -> Attempt:
        status_file = status_dir / f"attempt-{number}.json"
        status_file.unlink(missing_ok=True)
        env = {**os.environ, ENV_STATUS_FILE: str(status_file), ENV_ATTEMPT: str(number)}
        started = time.time()
        try:
            child = subprocess.Popen(list(self.cfg.cmd), env=env, start_new_session=True)
        except OSError as exc:
            raise InputError(
                f"cannot start {self.cfg.cmd[0]!r}: {exc.strerror}", field="CMD"
            ) from None
        termed = False
        kill_at: float | None = None
        killed = False
        cause_seen: str | None = None
        while True:
            try:
                rc = child.wait(timeout=0.05)
                break
            except subprocess.TimeoutExpired:
                pass
            self._check_poller()
            with self._lock:
                cause, deadline, save = self._stop_cause, self._stop_deadline, self._save_wanted
                self._save_wanted = False
            if save:
                self._signal_group(child, SAVE_SIGNAL)
            if cause is not None and not termed:
                termed, cause_seen = True, cause
                grace = self.cfg.grace_s
                if deadline is not None:
                    grace = max(0.0, min(grace, deadline - time.time()))
                self._signal_group(child, signal.SIGTERM)
                kill_at = time.monotonic() + grace
            if (kill_at is not None and time.monotonic() >= kill_at) or self._interrupts >= 2:
                self._signal_group(child, signal.SIGKILL)
                killed, kill_at = True, None
                self._interrupts = 0
        return Attempt(
            number, rc, started, time.time(), read_status(status_file), cause_seen, killed
        )


def run_command(cmd: Sequence[str], **kwargs: object) -> int:
    """Convenience for callers outside the CLI."""
    return Supervisor(RunConfig(cmd=tuple(cmd), **kwargs)).run()  # type: ignore[arg-type]
