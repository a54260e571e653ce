"""The commit record of one checkpoint: written after its data, so its presence means "complete".

One manifest per checkpoint (``ckpt-<step>.json`` beside ``ckpt-<step>.bin``) rather than one shared
index: a shared index would have to be rewritten on every save, and a torn index would hide every
checkpoint at once; per-checkpoint manifests fail one at a time.
"""

from __future__ import annotations

import builtins
import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

FORMAT = "gpufleet-checkpoint/1"
_NAME = re.compile(r"^ckpt-(\d{12})\.json$")


def data_name(step: int) -> str:
    return f"ckpt-{step:012d}.bin"


def manifest_name(step: int) -> str:
    return f"ckpt-{step:012d}.json"


def step_of(name: str) -> int | None:
    """The step a manifest file name stands for, or None for any other file."""
    m = _NAME.match(name)
    return int(m.group(1)) if m else None


class BadManifest(Exception):
    """A manifest that cannot be parsed or lacks a field (e.g. torn by a crash)."""


@dataclass(frozen=True, slots=True)
class Manifest:
    step: int
    saved_at: float  # Unix time the data became durable
    sha256: str
    bytes: int
    codec: str
    data: str
    save_seconds: float
    meta: dict[str, Any] = field(default_factory=dict)
    format: str = FORMAT

    # ``bytes`` in this class body is the field above: the type is spelled builtins.bytes
    def to_json(self) -> builtins.bytes:
        return json.dumps(asdict(self), sort_keys=True, indent=1).encode()

    @classmethod
    def from_json(cls, raw: builtins.bytes | bytearray, *, expect_step: int) -> Manifest:
        try:
            doc = json.loads(bytes(raw))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BadManifest(f"not JSON ({exc})") from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise BadManifest(f"format is not {FORMAT!r}")
        kinds: dict[str, type | tuple[type, ...]] = {
            "step": int,
            "saved_at": (int, float),
            "sha256": str,
            "bytes": int,
            "codec": str,
            "data": str,
            "save_seconds": (int, float),
            "meta": dict,
        }
        for key, kind in kinds.items():
            if not isinstance(doc.get(key), kind):
                raise BadManifest(f"field {key!r} missing or not {kind}")
        if doc["step"] != expect_step:
            raise BadManifest(f"step {doc['step']} does not match its file name ({expect_step})")
        if not re.fullmatch(r"[0-9a-f]{64}", doc["sha256"]):
            raise BadManifest("sha256 is not 64 hex digits")
        return cls(**{k: doc[k] for k in (*kinds, "format")})
