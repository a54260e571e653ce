"""How a state object becomes bytes on storage, and back.

The default codec is pickle protocol 5 with out-of-band buffers: NumPy arrays (and anything else
exposing the buffer protocol) are written as raw bytes straight from their memory, without an
intermediate copy, so saving 1 GB of arrays costs one pass over the data. Checkpoints are the
user's own files and their SHA-256 is verified before anything is unpickled, which is why pickle is
acceptable here. The layout is::

    b"GPFCKPT1" | u64 pickle length | pickle | u64 buffer count | (u64 length | bytes) * count
"""

from __future__ import annotations

import hashlib
import os
import pickle
import struct
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, BinaryIO, Protocol

from gpufleet.checkpoint.protocol import ENV_TEST_HOOK

MAGIC = b"GPFCKPT1"
_U64 = struct.Struct("<Q")


class CorruptCheckpoint(Exception):
    """The bytes on storage are not a complete checkpoint (torn write, bit rot, wrong file)."""


class Sink(Protocol):
    """Where a codec writes: a file, or the HashingWriter in front of one."""

    def write(self, data: bytes | bytearray | memoryview, /) -> int: ...

    def flush(self) -> None: ...


class Codec(Protocol):
    """Serialises a state object. ``name`` is recorded in the manifest to pick the decoder."""

    name: str

    def dump(self, obj: Any, out: Sink) -> None: ...

    def load(self, data: memoryview) -> Any: ...


class HashingWriter:
    """Forwards writes to ``raw`` while hashing them, so the manifest hash costs no second pass.

    Large writes are cut into chunks; a single helper thread hashes chunk *i* while this thread
    writes it (both release the GIL), so SHA-256 (~1 GB/s on one core) overlaps with the disk
    instead of adding to it. One worker keeps the chunks in order.
    """

    CHUNK = 8 * 1024 * 1024

    def __init__(self, raw: BinaryIO) -> None:
        self.raw = raw
        self.bytes_written = 0
        self._sha256 = hashlib.sha256()
        self._hasher: ThreadPoolExecutor | None = None
        self._pending: list[Future[None]] = []
        self._writes = 0
        self._pause_mid = os.environ.get(ENV_TEST_HOOK) == "pause-mid-data"

    def write(self, data: bytes | bytearray | memoryview) -> int:
        view = memoryview(data).cast("B")
        for start in range(0, view.nbytes, self.CHUNK):
            chunk = view[start : start + self.CHUNK]
            self._hash(chunk)
            rest = chunk
            while rest.nbytes:  # raw files may write less than asked
                n = self.raw.write(rest)
                if n is None:
                    raise OSError("non-blocking checkpoint file would block")
                rest = rest[n:]
        self.bytes_written += view.nbytes
        self._writes += 1
        if self._pause_mid and self._writes == 2:
            self.raw.flush()
            test_pause("pause-mid-data")
        return view.nbytes

    def _hash(self, chunk: memoryview) -> None:
        if chunk.nbytes < self.CHUNK // 4:  # small: a thread hop costs more than it saves
            self._drain()
            self._sha256.update(chunk)
            return
        if self._hasher is None:
            self._hasher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpufleet-sha")
        self._pending.append(self._hasher.submit(self._sha256.update, chunk))
        if len(self._pending) > 2:  # bound the memory the hasher may lag behind by
            self._pending.pop(0).result()

    def _drain(self) -> None:
        for fut in self._pending:
            fut.result()
        self._pending.clear()

    def hexdigest(self) -> str:
        """The SHA-256 of everything written; waits for the helper thread and stops it."""
        self._drain()
        if self._hasher is not None:
            self._hasher.shutdown()
            self._hasher = None
        return self._sha256.hexdigest()

    def flush(self) -> None:
        self.raw.flush()


def test_pause(stage: str) -> None:
    """Freeze here (test hook) until the test SIGKILLs us; announce it on stderr first."""
    print(f"GPUFLEET_TEST_HOOK paused {stage}", file=sys.stderr, flush=True)
    while True:
        time.sleep(3600)


class PickleCodec:
    """Pickle protocol 5 with raw out-of-band buffers (see the module docstring)."""

    name = "pickle5"

    def dump(self, obj: Any, out: Sink) -> None:
        buffers: list[pickle.PickleBuffer] = []
        head = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
        out.write(MAGIC)
        out.write(_U64.pack(len(head)))
        out.write(head)
        out.write(_U64.pack(len(buffers)))
        for buf in buffers:
            raw = buf.raw()
            out.write(_U64.pack(raw.nbytes))
            out.write(raw)

    def load(self, data: memoryview) -> Any:
        pos = 0

        def take(n: int) -> memoryview:
            nonlocal pos
            if pos + n > len(data):
                raise CorruptCheckpoint(f"truncated: need {pos + n} bytes, have {len(data)}")
            view = data[pos : pos + n]
            pos += n
            return view

        if bytes(take(len(MAGIC))) != MAGIC:
            raise CorruptCheckpoint("not a gpufleet pickle5 checkpoint (bad magic)")
        (head_len,) = _U64.unpack(take(8))
        head = take(head_len)
        (count,) = _U64.unpack(take(8))
        buffers = []
        for _ in range(count):
            (n,) = _U64.unpack(take(8))
            buffers.append(take(n))
        if pos != len(data):
            raise CorruptCheckpoint(f"{len(data) - pos} trailing bytes after the last buffer")
        return pickle.loads(head, buffers=buffers)


def get_codec(name: str) -> Codec:
    """The codec a manifest names; the torch codec imports torch only when asked for."""
    if name == PickleCodec.name:
        return PickleCodec()
    if name == "torch":
        from gpufleet.checkpoint.torch_state import TorchCodec

        return TorchCodec()
    raise CorruptCheckpoint(f"unknown codec {name!r} (known: pickle5, torch)")
