"""Spot availability traces (the "Can't Be Late" format: ``{"metadata": {"gap_seconds"}, "data"}``).

A trace is a 0/1 series sampled every ``gap_seconds``: ``data[i] == 1`` means a spot instance
could be had during tick i. The deadline benchmark and the simulator's deadline lever read the
same :class:`AvailabilityTrace`, so a malformed file fails here, once, with the file, the line
and the field named — never later as a silently wrong cost.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpufleet.errors import InputError
from gpufleet.inputfile import read_text

# A tick is at most a day: the published traces sample every 195-600 s, and a tick of 1e18 s
# turned into an absurd cost instead of an error.
MAX_GAP_SECONDS = 86_400


@dataclass(frozen=True, slots=True)
class AvailabilityTrace:
    """One zone's availability: ``data[i]`` (int8, 0/1) holds for tick i of ``gap_seconds``."""

    gap_seconds: int
    data: np.ndarray
    name: str
    path: str | None = None  # the file it came from, for error messages

    def __len__(self) -> int:
        return int(self.data.shape[0])

    @property
    def availability(self) -> float:
        """Fraction of ticks with spot available (the traces' headline number)."""
        return float(self.data.mean()) if len(self) else 0.0


def _line_of(text: str, needle: str) -> int | None:
    """1-based line of the first occurrence of a JSON key, to point the user at it."""
    pos = text.find(f'"{needle}"')
    return text.count("\n", 0, pos) + 1 if pos >= 0 else None


def parse_availability(
    text: str, *, path: str | Path, name: str | None = None
) -> AvailabilityTrace:
    """Validate the JSON text of one trace; every defect is an InputError naming where."""
    try:
        doc: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON: {exc.msg} (column {exc.colno})", path=path,
                         line=exc.lineno) from None
    except RecursionError:
        raise InputError("not valid JSON: nested too deeply", path=path) from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise InputError(f"not valid JSON: {exc}", path=path) from None
    if not isinstance(doc, dict):
        raise InputError("expected a JSON object with 'metadata' and 'data'", path=path, line=1)
    meta = doc.get("metadata")
    if not isinstance(meta, dict):
        raise InputError("missing or not an object; expected {\"gap_seconds\": <int>}", path=path,
                         line=_line_of(text, "metadata") or 1, field="metadata")
    gap = meta.get("gap_seconds")
    gap_line = _line_of(text, "gap_seconds") or _line_of(text, "metadata")
    if gap is None:
        raise InputError("missing; expected the positive tick length in seconds", path=path,
                         line=gap_line, field="metadata.gap_seconds")
    if (
        isinstance(gap, bool)
        or not isinstance(gap, int | float)
        or not math.isfinite(gap)
        or not 1 <= gap <= MAX_GAP_SECONDS
        or gap != int(gap)
    ):
        raise InputError(
            f"got {gap!r}; expected a whole number of seconds in 1..{MAX_GAP_SECONDS:,}",
            path=path, line=gap_line, field="metadata.gap_seconds",
        )
    data = doc.get("data")
    data_line = _line_of(text, "data")
    if not isinstance(data, list):
        raise InputError("missing or not a list; expected a list of 0/1 availability ticks",
                         path=path, line=data_line or 1, field="data")
    if not data:
        raise InputError("empty; expected at least one availability tick", path=path,
                         line=data_line, field="data")
    for i, v in enumerate(data):
        if isinstance(v, bool) or v not in (0, 1):
            raise InputError(f"got {v!r}; expected 0 (no spot) or 1 (spot available)", path=path,
                             line=data_line, field=f"data[{i}]")
    arr = np.asarray(data, dtype=np.int8)
    return AvailabilityTrace(
        gap_seconds=int(gap), data=arr, name=name or Path(path).stem, path=str(path)
    )


def load_availability(path: str | Path) -> AvailabilityTrace:
    """Load one availability trace file; its name is the file stem (e.g. ``us-east-1a_v100_1``)."""
    p = Path(path)
    text = read_text(p, "availability trace (JSON)")
    return parse_availability(text, path=p, name=p.stem)
