"""One writer per checkpoint folder, enforced with ``flock`` on the folder itself.

Two processes saving into one folder would each prune the other's temp files and checkpoints
(every save clears uncommitted files and ends with a prune), so the second one's saves fail or,
worse, the first one's vanish. The :class:`~gpufleet.checkpoint.checkpointer.Checkpointer` takes an
exclusive, non-blocking ``flock`` on the folder before its first save and holds it until
``close()``/``finish()`` or process exit: the kernel drops a ``flock`` with its last file
descriptor, so a SIGKILLed writer never leaves a stale lock, and locking the folder (not a file in
it) adds nothing to the folder. A second writer in another process gets :class:`LocationBusy`,
naming the holder's pid where ``/proc/locks`` tells it. Within one process the newest writer takes
the folder over (a restarted training loop building a fresh Checkpointer must not be locked out by
its abandoned predecessor), and the superseded one gets :class:`LocationBusy` at its next save.
Reading (``load_latest``/``restore``) takes no lock.

``flock`` is only as good as the filesystem: it holds on local disks; on NFS it depends on the
mount. Remote fsspec stores (s3://, gs://, ...) have no lock at all: there, one writer per prefix
is the user's responsibility (see docs/checkpoint.md).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from pathlib import Path

from gpufleet.errors import InputError


class LocationBusy(InputError):
    """Another live process (or another Checkpointer in this one) writes to this folder."""


def _holder_pid(fd: int) -> str | None:
    """The pid holding a FLOCK on the file behind ``fd``, from /proc/locks (Linux), if any."""
    st = os.fstat(fd)
    ident = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF" (blocked waiters carry "->")
        if "->" not in fields and len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == ident:
            return fields[4]
    return None


# This process's current writer per folder, by (device, inode): flock cannot tell two
# descriptors of one process apart from two processes, so in-process hand-over is kept here.
_OWNERS: dict[tuple[int, int], WriterLock] = {}
_GUARD = threading.Lock()


class WriterLock:
    """An exclusive, non-blocking ``flock`` on a folder (see the module docstring)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._fd: int | None = None
        self._key: tuple[int, int] | None = None
        self._superseded = False

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        if self._fd is not None:
            return
        if self._superseded:
            raise LocationBusy(
                "a newer Checkpointer in this process took this folder over; save through "
                "that one (one writer per folder)",
                path=self.folder,
            )
        st = os.stat(self.folder)
        key = (st.st_dev, st.st_ino)
        with _GUARD:
            owner = _OWNERS.get(key)
            if owner is not None and owner._fd is not None:  # hand-over within this process
                self._fd, owner._fd = owner._fd, None
                owner._superseded = True
            else:
                self._fd = self._flock()
            self._key = key
            _OWNERS[key] = self

    def _flock(self) -> int:
        fd = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _holder_pid(fd)
            os.close(fd)
            who = f"pid {pid}" if pid is not None else "another process"
            raise LocationBusy(
                f"another checkpoint writer ({who}) holds this folder; one writer per folder "
                "(two would delete each other's files): stop it or use another folder",
                path=self.folder,
            ) from None
        except BaseException:
            os.close(fd)
            raise
        return fd

    def release(self) -> None:
        with _GUARD:
            fd, self._fd = self._fd, None
            if self._key is not None and _OWNERS.get(self._key) is self:
                del _OWNERS[self._key]
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)  # closing the descriptor drops the flock
