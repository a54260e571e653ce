"""Read a user-supplied text file: bounded in size, UTF-8, every failure an InputError.

Every loader (workloads, scenarios, catalogs, openb, spot traces and prices) reads through
:func:`read_text`, so a directory given where a file is expected, an unreadable file, a file that
is not UTF-8 (a Latin-1 export, a binary) or one too large to be an input all end as one line
naming the file — and, for bad bytes, the line — instead of a traceback.
"""

from __future__ import annotations

from pathlib import Path

from gpufleet.errors import InputError

# Largest input file read (bytes). The biggest shipped input, the Philly trace, is ~5 MB; a
# 100k-job YAML workload ~10 MB. Anything larger is almost surely the wrong file (or a device).
MAX_INPUT_BYTES = 256 * 1024 * 1024


def read_text(path: Path | str, what: str = "file", max_bytes: int = MAX_INPUT_BYTES) -> str:
    """The text of ``path`` (UTF-8, an optional BOM dropped); InputError naming what went wrong.

    ``what`` names the expected content in the not-found message ("scenario file", …).
    """
    p = Path(path)
    try:
        with p.open("rb") as fh:
            raw = fh.read(max_bytes + 1)
    except FileNotFoundError:
        raise InputError(f"{what} not found (no such file)", path=p) from None
    except IsADirectoryError:
        raise InputError(f"is a directory; expected the {what}", path=p) from None
    except PermissionError:
        raise InputError(f"permission denied; cannot read the {what}", path=p) from None
    except OSError as exc:
        raise InputError(f"cannot read the {what}: {exc.strerror or exc}", path=p) from None
    if len(raw) > max_bytes:
        raise InputError(
            f"larger than {max_bytes // (1024 * 1024)} MiB; is this the {what}?", path=p
        )
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        col = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise InputError(
            f"not UTF-8 text: byte 0x{raw[exc.start]:02x} at column {col}; save the {what} as "
            "UTF-8",
            path=p,
            line=line,
        ) from None
