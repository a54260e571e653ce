"""Replace a file so that a reader, or the next start after a crash, sees the old content or the
new, never a part: write a temporary sibling, fsync it, rename it over, fsync the directory."""

from __future__ import annotations

import os
from pathlib import Path


def write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove(path: Path) -> bool:
    """Delete ``path`` (durably); whether it was there."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return True
