"""SIGKILL in the middle of a save: the previous checkpoint still loads, the torn one is rejected,
and the job then finishes bit for bit like an uninterrupted run."""

from __future__ import annotations

import signal

import numpy as np
import pytest

from gpufleet.checkpoint import Checkpointer
from gpufleet.checkpoint.protocol import ENV_TEST_HOOK, EXIT_PREEMPTED

from .conftest import run_to_end


@pytest.mark.parametrize(
    ("stage", "reason_part"),
    [
        ("pause-mid-data", "did not commit"),  # temp file half written, never renamed
        ("pause-before-manifest", "did not commit"),  # data in place, commit record missing
    ],
)
def test_sigkill_mid_save(make_run, numpy_reference, stage: str, reason_part: str) -> None:  # type: ignore[no-untyped-def]
    run = make_run("train_numpy.py", total=400, every=100, step_sleep_s=0.001)
    # attempt 1: stop gracefully right away -> a good checkpoint at some step s1
    proc = run.start()
    run.wait_running(proc, 1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_PREEMPTED, err.decode()
    first = run.status(1)
    assert first is not None
    s1 = int(first["saved_step"])  # type: ignore[arg-type]
    torn = (s1 // 100 + 1) * 100
    assert torn < run.total, "attempt 1 ran too far before its SIGTERM landed"

    # attempt 2: the next periodic save (step `torn`) freezes at `stage`; kill it there
    proc = run.start({ENV_TEST_HOOK: stage})
    assert proc.stderr is not None
    line = proc.stderr.readline().decode()
    while line and "GPUFLEET_TEST_HOOK" not in line:
        line = proc.stderr.readline().decode()
    assert f"paused {stage}" in line
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    leftovers = sorted(p.name for p in run.ckpt_dir.iterdir())
    assert any(f"{torn:012d}.bin" in n for n in leftovers), leftovers

    with Checkpointer(run.ckpt_dir, every_steps=100, handle_signals=False) as ck:
        restored, rejected = ck.load_latest()
    assert restored is not None and restored.step == s1
    assert restored.state["step"] == s1
    assert [r.step for r in rejected] == [torn]
    assert reason_part in rejected[0].reason

    run_to_end(run)  # attempt 3 resumes from s1, rewrites step `torn` and finishes
    last = run.status(3)
    assert last is not None and last["resumed_step"] == s1 and last["rejected"] == 1
    assert not any(p.name.startswith(".tmp-") for p in run.ckpt_dir.iterdir())

    with np.load(run.out) as got:
        assert got["w"].tobytes() == numpy_reference(400, 100)["w"]
