"""Where checkpoint files live: a local directory (full atomicity and durability) or any fsspec URL.

Guarantees, by backend (see docs/checkpoint.md):

* **local path / file://** — ``write`` goes to a temp file in the same directory, is flushed and
  fsynced, ``os.replace``-d onto its name and the directory is fsynced. When ``write`` returns the
  file is complete under its final name and survives a power cut; a crash before that leaves only a
  ``.tmp-*`` file, which is never read and is removed by the next save. One writer per folder is
  enforced with ``flock`` (:mod:`gpufleet.checkpoint.writerlock`).
* **object stores (s3://, gs://, oss://, ...)** — the object is written under its final name in one
  upload; these stores publish an object whole when the upload completes, so readers never see a
  partial object. Rename would be a server-side copy, so none is done. Durability is the
  provider's. There is no lock: running one writer per prefix is the caller's responsibility.
* **memory://** — a process-local dict, nothing is durable; a file becomes visible when it is
  closed. Meant for tests.

On every backend the checkpoint's manifest is written only after its data, and reading verifies the
data's SHA-256 against the manifest, so a partial or corrupt file is rejected rather than loaded.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, Protocol

import fsspec
from fsspec.implementations.local import LocalFileSystem

from gpufleet.checkpoint.writerlock import WriterLock

TMP_PREFIX = ".tmp-"


class Store(Protocol):
    """The few operations the checkpointer needs from a storage location."""

    url: str
    durable: bool

    def write(self, name: str, fill: Callable[[BinaryIO], object]) -> None: ...

    def read(self, name: str) -> bytearray: ...

    def size(self, name: str) -> int | None: ...

    def names(self) -> list[str]: ...

    def delete(self, name: str) -> None: ...

    def lock(self) -> None:
        """Become this location's only writer, or raise LocationBusy (no-op where unsupported)."""
        ...

    def unlock(self) -> None: ...


class LocalStore:
    """A directory on a local (POSIX) filesystem."""

    durable = True

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.url = str(self.root)
        self._lock = WriterLock(self.root)

    def write(self, name: str, fill: Callable[[BinaryIO], object]) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=TMP_PREFIX + name + ".")
        try:
            with os.fdopen(fd, "wb", buffering=0) as raw:
                fill(raw)
                os.fsync(raw.fileno())
            os.replace(tmp, self.root / name)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self._fsync_dir()

    def _fsync_dir(self) -> None:
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def read(self, name: str) -> bytearray:
        path = self.root / name
        with open(path, "rb", buffering=0) as f:
            size = os.fstat(f.fileno()).st_size
            buf = bytearray(size)
            view = memoryview(buf)
            got = 0
            while got < size:
                n = f.readinto(view[got:])
                if not n:
                    break
                got += n
        return buf if got == size else buf[:got]

    def size(self, name: str) -> int | None:
        try:
            return (self.root / name).stat().st_size
        except FileNotFoundError:
            return None

    def delete(self, name: str) -> None:
        (self.root / name).unlink(missing_ok=True)

    def lock(self) -> None:
        self._lock.acquire()

    def unlock(self) -> None:
        self._lock.release()

    def names(self) -> list[str]:
        return sorted(p.name for p in self.root.iterdir() if p.is_file())


class FsspecStore:
    """Any fsspec filesystem without atomic rename: objects are written under their final name."""

    def __init__(self, url: str) -> None:
        fs, root = fsspec.core.url_to_fs(url)
        self.fs = fs
        self.root = root.rstrip("/")
        self.url = url
        self.durable = fs.protocol not in ("memory", ("memory",))
        self.fs.makedirs(self.root, exist_ok=True)

    def _path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def write(self, name: str, fill: Callable[[BinaryIO], object]) -> None:
        try:
            with self.fs.open(self._path(name), "wb") as f:
                fill(f)
        except BaseException:
            with contextlib.suppress(Exception):  # a failed upload must not leave a partial object
                self.fs.rm(self._path(name))
            raise

    def read(self, name: str) -> bytearray:
        with self.fs.open(self._path(name), "rb") as f:
            return bytearray(f.read())

    def size(self, name: str) -> int | None:
        try:
            return int(self.fs.size(self._path(name)))
        except FileNotFoundError:
            return None

    def names(self) -> list[str]:
        try:
            entries = self.fs.ls(self.root, detail=True)
        except FileNotFoundError:
            return []
        return sorted(
            e["name"].rstrip("/").rsplit("/", 1)[-1] for e in entries if e.get("type") == "file"
        )

    def delete(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(self._path(name))

    def lock(self) -> None:
        """Object stores offer no lock: one writer per prefix is the caller's job (documented)."""

    def unlock(self) -> None:
        pass


def open_store(location: str | Path) -> Store:
    """A local path (or file:// URL) gets LocalStore's guarantees; other URLs go through fsspec."""
    text = str(location)
    if "://" not in text:
        return LocalStore(text)
    fs, root = fsspec.core.url_to_fs(text)
    if isinstance(fs, LocalFileSystem):
        return LocalStore(root)
    return FsspecStore(text)
