"""Helpers for the recovery tests: launch the training scripts as real subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).parent / "scripts"


@dataclass
class TrainRun:
    """One training job's files; ``start`` launches an attempt of it."""

    script: str
    root: Path
    total: int
    every: int
    step_sleep_s: float
    attempts: int = 0
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def ckpt_dir(self) -> Path:
        return self.root / "ckpt"

    @property
    def out(self) -> Path:
        return self.root / ("out.pt" if "torch" in self.script else "out.npz")

    @property
    def steps_log(self) -> Path:
        return self.root / "steps.log"

    def argv(self) -> list[str]:
        return [
            sys.executable,
            str(SCRIPTS / self.script),
            str(self.ckpt_dir),
            str(self.out),
            str(self.steps_log),
            str(self.total),
            str(self.every),
            str(self.step_sleep_s),
        ]

    def status_file(self, attempt: int) -> Path:
        return self.root / f"status-{attempt}.json"

    def start(self, extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        self.attempts += 1
        env = {
            **os.environ,
            "GPUFLEET_STATUS_FILE": str(self.status_file(self.attempts)),
            "GPUFLEET_ATTEMPT": str(self.attempts),
            **(extra_env or {}),
        }
        proc = subprocess.Popen(self.argv(), env=env, stderr=subprocess.PIPE)
        self.procs.append(proc)
        return proc

    def status(self, attempt: int) -> dict[str, object] | None:
        try:
            return json.loads(self.status_file(attempt).read_text())
        except (OSError, ValueError):
            return None

    def wait_running(
        self, proc: subprocess.Popen[bytes], attempt: int, timeout_s: float = 60.0
    ) -> dict[str, object]:
        """Until restore() finished (handlers are installed by then)."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            st = self.status(attempt)
            if st is not None and st["phase"] in ("running", "done", "preempted"):
                return st
            if proc.poll() is not None:
                raise AssertionError(
                    f"attempt {attempt} exited early: "
                    f"{proc.stderr.read().decode() if proc.stderr else ''}"
                )
            time.sleep(0.01)
        raise AssertionError(f"attempt {attempt} never reported running")

    def steps_by_attempt(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for line in self.steps_log.read_text().splitlines():
            a, s = line.split()
            out.setdefault(int(a), []).append(int(s))
        return out

    def cleanup(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            if p.stderr:
                p.stderr.close()


@pytest.fixture
def make_run(tmp_path: Path):  # type: ignore[no-untyped-def]
    runs: list[TrainRun] = []

    def make(
        script: str,
        *,
        name: str = "run",
        total: int = 1500,
        every: int = 50,
        step_sleep_s: float = 0.002,
    ) -> TrainRun:
        root = tmp_path / name
        root.mkdir()
        run = TrainRun(script, root, total, every, step_sleep_s)
        runs.append(run)
        return run

    yield make
    for r in runs:
        r.cleanup()


def run_to_end(run: TrainRun, timeout_s: float = 120.0) -> None:
    proc = run.start()
    _, err = proc.communicate(timeout=timeout_s)
    assert proc.returncode == 0, err.decode()


def check_redone(run: TrainRun, graceful: Sequence[bool]) -> list[int]:
    """Per interruption: steps computed again by the next attempt; checks every step was done."""
    by_attempt = run.steps_by_attempt()
    redone = []
    for k, was_graceful in enumerate(graceful, start=1):
        nxt = run.status(k + 1)
        assert nxt is not None
        resumed = nxt["resumed_step"] or 0
        this = run.status(k)
        assert this is not None
        done = by_attempt.get(k) or [int(this["resumed_step"] or 0)]
        redo = max(done) - int(resumed)
        redone.append(redo)
        assert redo >= 0
        if was_graceful:
            assert redo == 0, f"attempt {k} saved on SIGTERM, yet {redo} steps were redone"
        else:
            # worst case: killed inside the save at step k*every -> back to (k-1)*every
            assert redo <= run.every, f"attempt {k}: {redo} steps redone > interval {run.every}"
    everything = sorted({s for steps in by_attempt.values() for s in steps})
    assert everything == list(range(1, run.total + 1))
    return redone


class MetadataState:
    """What the emulated metadata services currently say (tests flip these)."""

    def __init__(self) -> None:
        self.aws_action: str | None = None
        self.aws_rebalance: str | None = None
        self.aliyun_time: str | None = None
        self.gcp_preempted = False
        self.tokens: set[str] = set()
        self.token_puts = 0
        self.requests: list[tuple[str, str]] = []
        self.fail_with: int | None = None


def _handler(state: MetadataState) -> type:
    from http.server import BaseHTTPRequestHandler

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def _send(self, code: int, body: str = "") -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_PUT(self) -> None:
            state.requests.append(("PUT", self.path))
            ttl = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds")
            if self.path != "/latest/api/token" or not ttl or not ttl.isdigit():
                self._send(400, "missing or bad X-aws-ec2-metadata-token-ttl-seconds")
                return
            state.token_puts += 1
            token = f"tok-{state.token_puts}"
            state.tokens.add(token)
            self._send(200, token)

        def do_GET(self) -> None:
            state.requests.append(("GET", self.path))
            if state.fail_with is not None:
                self._send(state.fail_with, "boom")
                return
            p = self.path
            if p.startswith("/latest/meta-data/instance/"):  # Aliyun: no token
                if p == "/latest/meta-data/instance/spot/termination-time" and state.aliyun_time:
                    self._send(200, state.aliyun_time)
                else:
                    self._send(404, "Not Found")
                return
            if p.startswith("/latest/"):  # AWS IMDSv2: token required
                if self.headers.get("X-aws-ec2-metadata-token") not in state.tokens:
                    self._send(401, "Unauthorized")
                    return
                body = {
                    "/latest/meta-data/spot/instance-action": state.aws_action,
                    "/latest/meta-data/events/recommendations/rebalance": state.aws_rebalance,
                }.get(p)
                self._send(200, body) if body else self._send(404, "Not Found")
                return
            if p == "/computeMetadata/v1/instance/preempted":
                if self.headers.get("Metadata-Flavor") != "Google":
                    self._send(403, "Missing Metadata-Flavor:Google header")
                    return
                self._send(200, "TRUE" if state.gcp_preempted else "FALSE")
                return
            self._send(404, "Not Found")

    return Handler


@pytest.fixture
def metadata_server():  # type: ignore[no-untyped-def]
    """A real HTTP server on 127.0.0.1 speaking the AWS, Aliyun and GCP metadata protocols."""
    import threading
    from http.server import ThreadingHTTPServer

    state = MetadataState()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"  # type: ignore[attr-defined]
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="session")
def numpy_reference(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """Final arrays of the uninterrupted NumPy run, keyed by (total, every)."""
    import numpy as np

    cache: dict[tuple[int, int], dict[str, bytes]] = {}

    def get(total: int, every: int) -> dict[str, bytes]:
        if (total, every) not in cache:
            root = tmp_path_factory.mktemp("numpy-ref")
            run = TrainRun("train_numpy.py", root, total, every, 0.0)
            try:
                run_to_end(run)
            finally:
                run.cleanup()
            with np.load(run.out) as z:
                cache[(total, every)] = {k: z[k].tobytes() for k in z.files}
        return cache[(total, every)]

    return get
