"""A small JSON file through which a training process tells its supervisor how far it got.

The supervisor names the file in ``$GPUFLEET_STATUS_FILE``; the library replaces it whole
(temp file + rename, no fsync: it is a progress report, not data) at resume, at every save and at
exit. Reading it after the child has exited gives the per-attempt summary without any IPC.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(slots=True)
class Status:
    pid: int
    attempt: int
    phase: str = "starting"  # starting | running | preempted | done
    started_at: float | None = None  # Unix time the Checkpointer was created
    resumed_at: float | None = None  # Unix time restore() finished
    resumed_step: int | None = None  # None: started fresh
    rejected: int = 0  # checkpoints newer than the resumed one that failed verification
    saved_step: int | None = None
    saved_at: float | None = None
    saves: int = 0
    stop_reason: str | None = None


def write_status(path: str | Path, status: Status) -> None:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(asdict(status)))
    os.replace(tmp, path)


def read_status(path: str | Path) -> Status | None:
    """The last status written, or None if the child never wrote one (or wrote garbage)."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict):
        return None
    try:
        return Status(**doc)
    except TypeError:
        return None
