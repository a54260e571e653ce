"""The pickle5 container and the hashing writer, byte level."""

from __future__ import annotations

import hashlib
import io
import struct

import numpy as np
import pytest

from gpufleet.checkpoint.codec import (
    MAGIC,
    CorruptCheckpoint,
    HashingWriter,
    PickleCodec,
    get_codec,
)


@pytest.mark.parametrize(
    "sizes",
    [
        [0],
        [1, 2, 3],
        [HashingWriter.CHUNK - 1, HashingWriter.CHUNK + 1],  # thread path, uneven chunks
        [3 * HashingWriter.CHUNK + 12345, 17, 5 * HashingWriter.CHUNK],  # mixed small/large
    ],
)
def test_hashing_writer_digest_matches_hashlib(sizes: list[int]) -> None:
    rng = np.random.default_rng(sum(sizes))
    parts = [rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in sizes]
    sink = io.BytesIO()
    w = HashingWriter(sink)
    for p in parts:
        assert w.write(p) == len(p)
    joined = b"".join(parts)
    assert w.hexdigest() == hashlib.sha256(joined).hexdigest()
    assert sink.getvalue() == joined and w.bytes_written == len(joined)


def test_pickle_codec_layout_and_roundtrip() -> None:
    arr = np.arange(10, dtype=np.int16)
    out = io.BytesIO()
    PickleCodec().dump({"a": arr, "b": "x"}, out)
    raw = out.getvalue()
    assert raw.startswith(MAGIC)
    (head_len,) = struct.unpack("<Q", raw[8:16])
    (count,) = struct.unpack("<Q", raw[16 + head_len : 24 + head_len])
    assert count == 1  # the array travelled out of band, as raw bytes
    assert raw.endswith(arr.tobytes())
    got = PickleCodec().load(memoryview(bytearray(raw)))
    assert got["b"] == "x" and np.array_equal(got["a"], arr) and got["a"].dtype == np.int16


@pytest.mark.parametrize(
    ("mangle", "message"),
    [
        (lambda raw: b"NOTMAGIC" + raw[8:], "bad magic"),
        (lambda raw: raw[:-3], "truncated"),
        (lambda raw: raw + b"\x00", "trailing bytes"),
        (lambda raw: raw[:12], "truncated"),
    ],
)
def test_pickle_codec_rejects_damaged_containers(mangle, message: str) -> None:  # type: ignore[no-untyped-def]
    out = io.BytesIO()
    PickleCodec().dump({"a": np.ones(4)}, out)
    with pytest.raises(CorruptCheckpoint, match=message):
        PickleCodec().load(memoryview(bytearray(mangle(out.getvalue()))))


def test_unknown_codec_is_corrupt() -> None:
    with pytest.raises(CorruptCheckpoint, match="unknown codec 'zip'"):
        get_codec("zip")
