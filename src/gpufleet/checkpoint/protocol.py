"""The contract between a training process, its supervisor and whatever restarts it.

``EXIT_PREEMPTED`` is 75, ``EX_TEMPFAIL`` from BSD ``sysexits.h`` ("temporary failure; the user is
invited to retry"). We deliberately do not reuse 143 (128 + SIGTERM): 143 is also what a shell or
Kubernetes reports for a process that was *killed* by SIGTERM before it could save anything, and a
supervisor must be able to tell "saved and stopped on request, resume me" from "died".
"""

from __future__ import annotations

import signal
from typing import Final

EXIT_PREEMPTED: Final[int] = 75
"""Exit status of a job that saved a checkpoint and stopped on request: resume it."""

STOP_SIGNALS: Final[tuple[signal.Signals, ...]] = (
    signal.SIGTERM,  # Kubernetes, systemd, the clouds' shutdown path
    signal.SIGINT,  # Ctrl-C
    signal.SIGUSR1,  # schedulers such as Slurm (--signal=USR1@...) ahead of a time limit
)
"""Signals that mean: save at the next safe point, then exit with EXIT_PREEMPTED."""

SAVE_SIGNAL: Final[signal.Signals] = signal.SIGUSR2
"""Save at the next safe point and keep training (what a rebalance recommendation becomes)."""

ENV_STATUS_FILE: Final[str] = "GPUFLEET_STATUS_FILE"
"""Set by ``gpufleet run``: where the library reports resumed/saved steps (JSON, replaced whole)."""

ENV_ATTEMPT: Final[str] = "GPUFLEET_ATTEMPT"
"""Set by ``gpufleet run``: 1 for the first launch, 2 for the first restart, ..."""

ENV_TEST_HOOK: Final[str] = "GPUFLEET_CHECKPOINT_TEST_HOOK"
"""Test-only: ``pause-mid-data`` or ``pause-before-manifest`` freezes a save at that point so a
test can SIGKILL the process there deterministically. Never set it in production."""
