"""Periodic, atomic, verified checkpoints with a clean stop on SIGTERM or a preemption notice.

The training loop calls :meth:`Checkpointer.after_step` between steps: that is the only *safe
point*, where the state is consistent. Signal handlers and the notice-poller thread only set flags;
the save itself always runs on the training thread at a safe point (saving from inside a signal
handler would snapshot a half-updated state and could deadlock on locks held by the interrupted
code). After a stop request the checkpointer saves and raises ``SystemExit(EXIT_PREEMPTED)``.

Smallest complete loop::

    ckpt = Checkpointer("runs/exp1", every_steps=100)
    state = ckpt.restore(default={"step": 0, "w": np.zeros(4), "rng": np.random.default_rng(0)})
    while state["step"] < 10_000:
        train_one_step(state)
        state["step"] += 1
        ckpt.after_step(state["step"], state)
    ckpt.finish()
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import pickle
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from gpufleet.checkpoint.codec import (
    Codec,
    CorruptCheckpoint,
    HashingWriter,
    PickleCodec,
    get_codec,
    test_pause,
)
from gpufleet.checkpoint.manifest import BadManifest, Manifest, data_name, manifest_name, step_of
from gpufleet.checkpoint.notices import DEFAULT_POLL_S, Notice, NoticePoller, Watcher
from gpufleet.checkpoint.protocol import (
    ENV_ATTEMPT,
    ENV_STATUS_FILE,
    ENV_TEST_HOOK,
    EXIT_PREEMPTED,
    SAVE_SIGNAL,
    STOP_SIGNALS,
)
from gpufleet.checkpoint.status import Status, write_status
from gpufleet.checkpoint.store import TMP_PREFIX, Store, open_store
from gpufleet.errors import InputError

log = logging.getLogger("gpufleet.checkpoint")

State = Any
StateOrFactory = State | Callable[[], State]


@dataclass(frozen=True, slots=True)
class Rejected:
    """A checkpoint newer than the one resumed from that could not be used, and why."""

    step: int
    name: str
    reason: str


@dataclass(frozen=True, slots=True)
class Restored:
    step: int
    state: State
    manifest: Manifest
    rejected: tuple[Rejected, ...]


class Checkpointer:
    """Saves every ``every_steps`` steps and/or ``every_seconds`` seconds, on request and on stop.

    ``every_steps`` saves at steps that are multiples of it (so checkpoints line up across
    restarts); ``every_seconds`` counts from the end of the previous save (or from start).
    ``use_notice_time``: when a notice says when the instance goes away, keep training while the
    time left exceeds ``notice_margin_s`` + the last save's duration + one step, then save.
    """

    def __init__(
        self,
        location: str | Path,
        *,
        every_steps: int | None = None,
        every_seconds: float | None = None,
        keep: int = 3,
        codec: Codec | None = None,
        handle_signals: bool = True,
        exit_on_stop: bool = True,
        watcher: Watcher | None = None,
        poll_interval_s: float = DEFAULT_POLL_S,
        use_notice_time: bool = False,
        notice_margin_s: float = 10.0,
        meta: dict[str, Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        if every_steps is not None and (not isinstance(every_steps, int) or every_steps < 1):
            raise InputError(
                f"every_steps must be an integer >= 1, got {every_steps!r}", field="every_steps"
            )
        if every_seconds is not None and not every_seconds > 0:
            raise InputError(
                f"every_seconds must be > 0, got {every_seconds!r}", field="every_seconds"
            )
        if not isinstance(keep, int) or keep < 1:
            raise InputError(f"keep must be an integer >= 1, got {keep!r}", field="keep")
        self.store: Store = open_store(location)
        self.every_steps = every_steps
        self.every_seconds = every_seconds
        self.keep = keep
        self.codec: Codec = codec or PickleCodec()
        self.exit_on_stop = exit_on_stop
        self.use_notice_time = use_notice_time
        self.notice_margin_s = notice_margin_s
        self.meta = dict(meta or {})
        self.clock = clock
        self.wall = wall

        self.stop_reason: str | None = None
        self.stop_deadline: float | None = None
        self._save_requested: str | None = None
        self._saved_step: int | None = None
        self._last_save_end = clock()
        self._last_save_s: float | None = None
        self._last_step_at: float | None = None
        self._step_s: float | None = None
        self._hook = os.environ.get(ENV_TEST_HOOK)
        self._owns_location = False

        self._status_path = os.environ.get(ENV_STATUS_FILE) or None
        attempt = os.environ.get(ENV_ATTEMPT) or "1"
        if not attempt.isdigit():
            raise InputError(f"${ENV_ATTEMPT} must be a positive integer, got {attempt!r}")
        self.status = Status(pid=os.getpid(), attempt=int(attempt), started_at=wall())
        self._write_status()

        self._old_handlers: dict[int, Any] = {}
        if handle_signals:
            self._install_handlers()
        self._poller = (
            NoticePoller(watcher, self.on_notice, poll_interval_s).start()
            if watcher is not None
            else None
        )

    # ---- stop / save requests (signal handlers and the poller thread only set flags) ----

    def _install_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            # Python delivers signals to the main thread only; a Checkpointer made elsewhere
            # would silently never see SIGTERM, so say so instead.
            raise InputError(
                "a Checkpointer with handle_signals=True must be created on the main "
                "thread (or pass handle_signals=False)",
                field="handle_signals",
            )
        for sig in (*STOP_SIGNALS, SAVE_SIGNAL):
            self._old_handlers[sig] = signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if signum == SAVE_SIGNAL:
            self._save_requested = "SIGUSR2"
            return
        if signum == signal.SIGINT and self.stop_reason is not None:
            raise KeyboardInterrupt  # a second Ctrl-C means "now", not "after the save"
        if self.stop_reason is None:
            self.stop_reason = signal.Signals(signum).name
            self.stop_deadline = None

    def on_notice(self, notice: Notice) -> None:
        """A preemption notice takes the same path as SIGTERM; a rebalance only asks for a save."""
        if not notice.stops:
            self._save_requested = f"{notice.provider} {notice.kind}"
            return
        if self.stop_reason is None:
            self.stop_reason = f"{notice.provider} {notice.kind} notice"
            self.stop_deadline = notice.deadline
            left = notice.time_left(self.wall())
            log.warning(
                "preemption notice (%s): %s left; last save took %s",
                notice.detail,
                "unknown time" if left is None else f"{left:.0f} s",
                "n/a" if self._last_save_s is None else f"{self._last_save_s:.1f} s",
            )

    def request_stop(self, reason: str = "requested") -> None:
        if self.stop_reason is None:
            self.stop_reason = reason

    def request_save(self, reason: str = "requested") -> None:
        self._save_requested = reason

    @property
    def should_stop(self) -> bool:
        return self.stop_reason is not None

    # ---- the safe point ----

    def after_step(self, step: int, state: StateOrFactory) -> bool:
        """Call between steps with the number of completed steps; returns True if it saved.

        ``state`` may be a zero-argument callable, evaluated only when a save happens.
        """
        now = self.clock()
        if self._last_step_at is not None:
            dt = now - self._last_step_at
            self._step_s = dt if self._step_s is None else 0.8 * self._step_s + 0.2 * dt
        self._last_step_at = now
        if self.stop_reason is not None and self._stop_now():
            saved = False
            if self._saved_step != step:
                self.save(step, state)
                saved = True
            self.status.phase = "preempted"
            self.status.stop_reason = self.stop_reason
            self._write_status()
            if self.exit_on_stop:
                self.close()
                raise SystemExit(EXIT_PREEMPTED)
            return saved
        if self._due(step, now):
            self.save(step, state)
            return True
        return False

    def _due(self, step: int, now: float) -> bool:
        if self._saved_step == step:
            self._save_requested = None  # this very step is already on storage
            return False
        if self._save_requested is not None:
            return True
        if self.every_steps is not None and step % self.every_steps == 0:
            return True
        return self.every_seconds is not None and now - self._last_save_end >= self.every_seconds

    def _stop_now(self) -> bool:
        if not self.use_notice_time or self.stop_deadline is None or self._last_save_s is None:
            return True
        needed = self.notice_margin_s + self._last_save_s + (self._step_s or 0.0)
        return self.stop_deadline - self.wall() <= needed

    # ---- save ----

    def save(self, step: int, state: StateOrFactory) -> Manifest:
        """Write a checkpoint now: data, then its manifest (the commit record), then prune."""
        if not isinstance(step, int) or step < 0:
            raise InputError(f"step must be an integer >= 0, got {step!r}", field="step")
        self._own_location()
        t0 = self.clock()
        obj = state() if callable(state) else state
        written: list[tuple[str, int]] = []

        def fill(raw: Any) -> None:
            w = HashingWriter(raw)
            try:
                self.codec.dump(obj, w)
            finally:
                digest = w.hexdigest()  # also stops the hashing thread if dump failed
            written.append((digest, w.bytes_written))

        self.store.write(data_name(step), fill)
        if self._hook == "pause-before-manifest":
            test_pause("pause-before-manifest")
        saved_at = self.wall()
        manifest = Manifest(
            step=step,
            saved_at=saved_at,
            sha256=written[-1][0],
            bytes=written[-1][1],
            codec=self.codec.name,
            data=data_name(step),
            save_seconds=self.clock() - t0,
            meta=self.meta,
        )
        body = manifest.to_json()
        try:
            self.store.write(manifest_name(step), lambda f: f.write(body))
        except BaseException:
            # The data never committed: drop it now, or on a full disk it would hold the space
            # the next save needs (and every later save would fail the same way).
            with contextlib.suppress(Exception):
                self.store.delete(data_name(step))
            raise
        self._saved_step = step
        self._save_requested = None
        self._last_save_end = self.clock()
        self._last_save_s = self._last_save_end - t0
        self.prune(step)
        self.status.saved_step = step
        self.status.saved_at = saved_at
        self.status.saves += 1
        self._write_status()
        return manifest

    def _own_location(self) -> None:
        """Before the first write: become the folder's only writer, then clear what earlier
        saves left uncommitted (temp files, data without a manifest), so their space is free.

        Safe only because of the lock: without it these could be another writer's files in
        flight.
        """
        self.store.lock()  # every time: a newer writer in this process may have taken over
        if self._owns_location:
            return
        self._owns_location = True
        names = self.store.names()
        committed = {data_name(s) for n in names if (s := step_of(n)) is not None}
        for name in names:
            if name.startswith(TMP_PREFIX) or (
                name.startswith("ckpt-") and name.endswith(".bin") and name not in committed
            ):
                log.warning("removing %s: left by a save that did not commit", name)
                self.store.delete(name)

    def prune(self, current: int) -> None:
        """Keep the ``keep`` newest checkpoints up to ``current``; drop everything else.

        Checkpoints newer than ``current`` belong to a timeline that was abandoned (they failed
        verification at resume, or the run was restarted from an older one) and would otherwise
        be mistaken for the newest. Manifests go before data so no manifest outlives its data.
        """
        self._own_location()
        names = self.store.names()
        steps = sorted((s for s in map(step_of, names) if s is not None), reverse=True)
        kept = {s for s in steps if s <= current}
        kept = set(sorted(kept, reverse=True)[: self.keep])
        for s in steps:
            if s not in kept:
                self.store.delete(manifest_name(s))
        keep_data = {data_name(s) for s in kept}
        for name in names:
            if name.startswith(TMP_PREFIX) or (name.endswith(".bin") and name not in keep_data):
                self.store.delete(name)

    # ---- resume ----

    def load_latest(self) -> tuple[Restored | None, tuple[Rejected, ...]]:
        """The newest checkpoint that verifies, and every newer one that did not (pure read)."""
        names = self.store.names()
        manifests = {s: n for n in names if (s := step_of(n)) is not None}
        rejected: list[Rejected] = []
        for name in names:  # leftovers of saves that never committed
            base = name[len(TMP_PREFIX) :] if name.startswith(TMP_PREFIX) else name
            if base.startswith("ckpt-") and ".bin" in base:
                step = int(base[5:17]) if base[5:17].isdigit() else -1
                if step not in manifests or name.startswith(TMP_PREFIX):
                    rejected.append(
                        Rejected(step, name, "data without a manifest: the save did not commit")
                    )
        for step in sorted(manifests, reverse=True):
            why, restored = self._try_load(step, manifests[step])
            if restored is not None:
                newer = tuple(r for r in rejected if r.step > step)
                return Restored(restored[0].step, restored[1], restored[0], newer), newer
            rejected.append(Rejected(step, manifests[step], why))
        return None, tuple(rejected)

    def _try_load(self, step: int, name: str) -> tuple[str, tuple[Manifest, State] | None]:
        try:
            manifest = Manifest.from_json(self.store.read(name), expect_step=step)
        except (BadManifest, OSError) as exc:
            return f"manifest unreadable: {exc}", None
        if manifest.data != data_name(step):
            # The digest alone would accept another step's file (e.g. a manifest copied or
            # restored from elsewhere): the data must be this step's own.
            return (
                f"manifest names data {manifest.data!r}, expected {data_name(step)!r} for "
                f"step {step}",
                None,
            )
        size = self.store.size(manifest.data)
        if size != manifest.bytes:
            return f"data is {size} bytes, manifest says {manifest.bytes}", None
        try:
            data = self.store.read(manifest.data)
        except OSError as exc:
            return f"data unreadable: {exc}", None
        digest = hashlib.sha256(data).hexdigest()
        if digest != manifest.sha256:
            return f"sha256 {digest[:12]}… does not match manifest {manifest.sha256[:12]}…", None
        try:
            state = get_codec(manifest.codec).load(memoryview(data))
        except (CorruptCheckpoint, pickle.UnpicklingError, EOFError) as exc:
            return f"decode failed: {exc}", None
        return "", (manifest, state)

    def restore(self, default: StateOrFactory = None) -> State:
        """The newest verified checkpoint's state, else ``default`` (called if callable)."""
        restored, rejected = self.load_latest()
        for r in rejected:
            log.warning("checkpoint %s rejected: %s", r.name, r.reason)
        self.status.rejected = len(rejected)
        self.status.resumed_at = self.wall()
        self.status.phase = "running"
        self._last_save_end = self.clock()
        if restored is None:
            if rejected:
                log.error("no checkpoint in %s verifies; starting from scratch", self.store.url)
            self._write_status()
            return default() if callable(default) else default
        self._saved_step = restored.step
        self.status.resumed_step = restored.step
        self.status.saved_step = restored.step
        self.status.saved_at = restored.manifest.saved_at
        self._write_status()
        log.info("resumed from step %d (%s)", restored.step, self.store.url)
        return restored.state

    # ---- lifecycle ----

    def _write_status(self) -> None:
        if self._status_path is not None:
            write_status(self._status_path, self.status)

    def finish(self) -> None:
        """The run completed: report it and release the signal handlers."""
        self.status.phase = "done"
        self._write_status()
        self.close()

    def close(self) -> None:
        if self._poller is not None:
            self._poller.stop()
            self._poller = None
        for sig, old in self._old_handlers.items():
            signal.signal(sig, old)
        self._old_handlers.clear()
        if self._owns_location:
            self.store.unlock()
            self._owns_location = False

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
