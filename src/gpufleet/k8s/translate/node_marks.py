"""Reading gpufleet's marks on a Node: a JSON object in one annotation (the interruption mark,
the consolidation mark).

A mark is state the controller acts on after a restart, so reading it is tolerant: an
annotation that does not parse was not written by gpufleet and is not acted on — logged once per
node and value (the informer hands the same Node back every cycle), never a crash of the loop.
The mark types keep their own field checks; this is the part they share.
"""

from __future__ import annotations

import functools
import json
import logging
import math
from collections.abc import Callable, Mapping
from typing import Any, TypeGuard, TypeVar

log = logging.getLogger(__name__)

M = TypeVar("M")


def json_object(text: str, annotation: str) -> dict[str, Any]:
    """The annotation's JSON object; ValueError naming ``annotation`` when it is not one."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{annotation}: not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{annotation}: expected a JSON object")
    return doc


def epoch_seconds(v: object) -> TypeGuard[int | float]:
    """Whether ``v`` is a usable epoch-seconds value: a finite number, not a bool."""
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def read_mark(node: Mapping[str, Any], annotation: str, parse: Callable[[str], M],
              not_acting: str) -> M | None:
    """``parse`` of the Node's ``annotation``, or None when it has none or it does not parse
    (then logged once per node and value: "node N: why; ``not_acting``")."""
    meta = node.get("metadata") or {}
    text = (meta.get("annotations") or {}).get(annotation)
    if text is None:
        return None
    try:
        return parse(text)
    except ValueError as exc:
        _warn_malformed(str(meta.get("name")), text, str(exc), not_acting)
        return None


@functools.lru_cache(maxsize=256)
def _warn_malformed(node: str, text: str, why: str, not_acting: str) -> None:
    log.warning("node %s: %s; %s", node, why, not_acting)
