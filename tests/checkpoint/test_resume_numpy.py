"""A real NumPy training process, interrupted at random points, ends bit for bit where an
uninterrupted run ends; each interruption costs at most one checkpoint interval of redone work."""

from __future__ import annotations

import random
import signal
import time

import numpy as np

from gpufleet.checkpoint import EXIT_PREEMPTED

from .conftest import check_redone, run_to_end


def test_random_sigterm_and_sigkill_resume_bit_exact(make_run, numpy_reference) -> None:  # type: ignore[no-untyped-def]
    run = make_run("train_numpy.py", name="interrupted")
    rnd = random.Random(20240601)
    # SIGTERM is the graceful path (save at the next safe point); SIGKILL gives no chance to save
    # and bounds the loss by the checkpoint interval.
    plan = [
        signal.SIGTERM,
        signal.SIGTERM,
        signal.SIGKILL,
        signal.SIGTERM,
        signal.SIGKILL,
        signal.SIGTERM,
    ]
    graceful: list[bool] = []
    for sig in plan:
        proc = run.start()
        run.wait_running(proc, run.attempts)
        time.sleep(rnd.uniform(0.05, 0.35))
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        if proc.returncode == 0:  # finished before the signal landed: nothing to resume
            break
        expected = EXIT_PREEMPTED if sig == signal.SIGTERM else -signal.SIGKILL
        assert proc.returncode == expected, err.decode()
        graceful.append(sig == signal.SIGTERM)
        st = run.status(run.attempts)
        assert st is not None
        if sig == signal.SIGTERM:
            assert st["phase"] == "preempted" and st["stop_reason"] == "SIGTERM"
    assert len(graceful) >= 4, "the run finished before most interruptions: make it longer"
    run_to_end(run)

    redone = check_redone(run, graceful)
    assert sum(redone) < run.every * graceful.count(False) + 1
    ref = numpy_reference(run.total, run.every)
    with np.load(run.out) as got:
        for key in ("w", "m", "rng"):
            assert got[key].tobytes() == ref[key], key
