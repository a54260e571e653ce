"""Output paths a user named on the command line, checked before any work starts.

A run that computes for minutes and then fails to write its report has wasted the minutes: every
command checks its ``--out``/``--json``/``--html``/``--plot``/``--status-dir`` here first. The check
is a real probe (create and remove a file in the folder, or in its nearest existing ancestor)
rather than ``os.access``, which says yes to root even on a read-only mount.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from gpufleet.errors import InputError

_PROBE_PREFIX = ".gpufleet-write-probe-"


def _reason(exc: OSError | ValueError) -> str:
    return (exc.strerror if isinstance(exc, OSError) else None) or str(exc) or type(exc).__name__


def writable_dir(path: Path, option: str, *, named: Path | None = None) -> Path:
    """Prove that ``path`` is, or can be created as, a folder that accepts new files.

    Nothing is left behind: when ``path`` does not exist yet the probe runs in its nearest
    existing ancestor (whoever may create a file there may create the missing folders), so a run
    that then fails on bad input leaves no empty output folder. Raises :class:`InputError` naming
    the option and the path the user gave (``named``, when ``path`` is that path's folder).
    """
    shown = named if named is not None else path
    if "\0" in str(path):
        raise InputError("cannot write here: the path contains a NUL byte", path=shown,
                         field=option)
    try:
        probe_in = path
        while not probe_in.exists():
            if probe_in.parent == probe_in:
                break
            probe_in = probe_in.parent
        if not probe_in.is_dir():
            blocker = "it" if probe_in == shown else str(probe_in)
            raise InputError(f"cannot write here: {blocker} is a file, not a folder",
                             path=shown, field=option)
        fd, probe = tempfile.mkstemp(dir=probe_in, prefix=_PROBE_PREFIX)
    except (OSError, ValueError) as exc:  # ValueError: an embedded NUL byte
        if isinstance(exc, InputError):
            raise
        raise InputError(f"cannot write here: {_reason(exc)}", path=shown, field=option) from None
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(probe)
    return path


def writable_file(path: Path, option: str) -> Path:
    """Make sure ``path`` can be written later: its folder exists and accepts files, and the
    path itself is not a folder nor a read-only file. An existing file is left untouched."""
    if path.name in ("", ".", ".."):
        raise InputError("expected a file name", path=path, field=option)
    writable_dir(path.parent, option, named=path)
    if path.is_dir():
        raise InputError("expected a file name, but it is a folder", path=path, field=option)
    if path.exists():
        try:
            # append (no truncation), non-blocking (a FIFO without a reader must not hang us)
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK))
        except OSError as exc:
            raise InputError(f"cannot write this file: {_reason(exc)}", path=path,
                             field=option) from None
    return path


def with_parent(path: Path) -> Path:
    """``path`` after creating its folder: call when writing a file checked by
    :func:`writable_file` (the check itself creates nothing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return path
