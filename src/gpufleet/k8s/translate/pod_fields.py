"""The annotations and labels gpufleet reads from a pod: one table, and one way to read them.

Each :class:`PodField` in :data:`FIELDS` names where it is read (every spelling, in the order
they are looked up), what it tells gpufleet, what happens when it is absent, what a valid value
is, and the parser that turns the text into that value. A pending pod with a value that does
not parse is left pending with a reason naming the key, the value and what was expected
(:func:`refusal`; the scheduler writes it as the pod's ``PodScheduled=False`` condition and a
``FailedScheduling`` Event), for example::

    annotation scheduling.x-k8s.io/min-available: "x" is not a whole number >= 1, e.g. "4"

It is never placed as if the key were absent: a gang whose size does not parse is not bound as
single pods. A key that is absent takes its default. A field read under several spellings (a
current and a legacy key, or the same key as annotation and label) also refuses a pod whose
spellings name different values.

Only pending pods are refused. A bound pod's fields are read the same way, a malformed value as
absent: the pod runs already, and whatever it holds stays booked.

Not in the table: the GPU assignment gpufleet writes when it binds (``gpufleet.io/node``,
``gpufleet.io/gpus``, ``gpufleet.io/gpu-milli``, ``gpufleet.io/mig``; :mod:`.pods`), read back
only from bound pods — one that does not parse books the pod as one gpufleet did not annotate;
and the kubelet's ``kubernetes.io/config.mirror``, whose presence alone marks a mirror pod. Both
are rows of :mod:`.api_keys`' tables, with everything else gpufleet writes and reads.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, Generic, Literal, TypeVar

from gpufleet.config import DEFAULT_VALUE_OF_TIME
from gpufleet.k8s.translate import names

T = TypeVar("T")
Where = Literal["annotation", "label"]

# a share of one GPU as KAI scheduler writes it ("0.25", ".5", "1"); the admission policy that
# turns a share into a DRA claim (k8s.dra.shares) matches the same text
FRACTION_PATTERN = "^[0-9]*[.]?[0-9]+$"
_WHOLE = re.compile("[0-9]+")
_QUOTED_MAX = 64  # characters of a value a refusal quotes


@dataclass(frozen=True, slots=True)
class PodField(Generic[T]):
    """One annotation or label gpufleet reads from a pod (see the module docstring).

    ``keys``: (``"annotation"`` or ``"label"``, key), in lookup order — the first present wins;
    ``means``: what it tells gpufleet; ``absent``: what gpufleet does without it; ``expected``:
    what a valid value is, as it completes "… is not"; ``example``: a valid value; ``parse``:
    the value of a text, None when the text is malformed."""

    keys: tuple[tuple[Where, str], ...]
    means: str
    absent: str
    expected: str
    example: str | None
    parse: Callable[[str], T | None]

    def found(self, meta: Mapping[str, Any]) -> list[tuple[Where, str, str]]:
        """(where, key, text) of each spelling present in the pod's ``metadata``."""
        by = {"annotation": meta.get("annotations") or {}, "label": meta.get("labels") or {}}
        return [(where, key, str(by[where][key])) for where, key in self.keys
                if by[where].get(key) is not None]

    def problem(self, meta: Mapping[str, Any]) -> str | None:
        """Why the pod's value cannot be read (naming key, value and what was expected), or
        None: absent or valid."""
        seen: list[tuple[Where, str, str, T]] = []
        for where, key, text in self.found(meta):
            value = self.parse(text)
            if value is None:
                eg = f", e.g. {quote(self.example)}" if self.example is not None else ""
                return f"{where} {key}: {quote(text)} is not {self.expected}{eg}"
            seen.append((where, key, text, value))
        for where, key, text, value in seen[1:]:
            w0, k0, t0, v0 = seen[0]
            if value != v0:
                return (f"{w0} {k0}: {quote(t0)} and {where} {key}: {quote(text)} disagree; "
                        "give one value")
        return None

    def get(self, meta: Mapping[str, Any]) -> T | None:
        """The value the first spelling present gives; None when absent or malformed."""
        got = self.found(meta)
        return self.parse(got[0][2]) if got else None


def quote(text: str) -> str:
    """``text`` as a refusal quotes it: in double quotes, escaped, cut after 64 characters."""
    cut = text if len(text) <= _QUOTED_MAX else text[:_QUOTED_MAX] + "…"
    return json.dumps(cut, ensure_ascii=False)


def whole(least: int) -> Callable[[str], int | None]:
    """A parser of plain decimal digits (``"4"``; no sign, space or unit) worth ≥ ``least``."""
    def parse(text: str) -> int | None:
        if not _WHOLE.fullmatch(text):
            return None
        try:
            n = int(text)
        except ValueError:  # beyond Python's digit limit: not a count anyone means
            return None
        return n if n >= least else None
    return parse


def share(text: str) -> Decimal | None:
    """A share of one GPU: a plain decimal in (0, 1] (``"0.25"``)."""
    if not re.fullmatch(FRACTION_PATTERN, text):
        return None
    d = Decimal(text)
    return d if 0 < d <= 1 else None


def rfc3339(text: str) -> float | None:
    """Epoch seconds of an RFC 3339 time with a UTC offset (``2026-12-04T01:00:00Z``)."""
    try:
        at = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    return at.timestamp() if at.tzinfo is not None else None


def seconds(text: str) -> float | None:
    """A finite number of seconds ≥ 0 (``"3600"``, ``"90.5"``)."""
    try:
        s = float(text)
    except ValueError:
        return None
    return s if math.isfinite(s) and s >= 0 else None


MAX_VALUE_OF_TIME = 1e6  # $ per GPU-hour: the scenario's and the trace's bound


def dollars_per_gpu_hour(text: str) -> float | None:
    """A finite number of dollars per GPU-hour in [0, 1e6] (``"10"``, ``"2.5"``)."""
    s = seconds(text)
    return s if s is not None and s <= MAX_VALUE_OF_TIME else None


def nonempty(text: str) -> str | None:
    return text or None


def boolean(text: str) -> bool | None:
    return {"true": True, "false": False}.get(text)


def spellings(where: tuple[Where, ...], keys: tuple[str, ...]) -> tuple[tuple[Where, str], ...]:
    """Every key read as each of ``where``, key by key: the lookup order of a field's keys."""
    return tuple((w, k) for k in keys for w in where)


def _index(text: str) -> str | None:
    return text if whole(0)(text) is not None else None


GPU_FRACTION: PodField[Decimal] = PodField(
    (("annotation", names.GPU_FRACTION),),
    "a share of one GPU (KAI scheduler's convention), packed with other shares; the pod asks "
    f"for no {names.GPU_RESOURCE}",
    "no share: the pod's GPUs are its extended resources or claims",
    "a share of one GPU in (0, 1]", "0.5", share)
GPU_MEMORY: PodField[int] = PodField(
    (("annotation", names.GPU_MEMORY_REQUEST),),
    f"with {names.GPU_FRACTION}: the GPU memory (MiB) the share needs on its GPU",
    "no memory constraint beyond the share",
    "a whole number of MiB >= 1", "4096", whole(1))
POD_GROUP: PodField[str] = PodField(
    spellings(("label",), names.POD_GROUP_LABELS),
    "the pod group (coscheduling plugin): pods of one group in a namespace are a gang, bound "
    "all together or not at all",
    "the pod is scheduled on its own",
    "a pod group name (a label value that is not empty)", "train", nonempty)
MIN_AVAILABLE: PodField[int] = PodField(
    spellings(("annotation", "label"), names.MIN_AVAILABLE_KEYS),
    "how many of the pod group's pods must be bound together",
    "1: each member may be bound as it fits",
    "a whole number >= 1", "4", whole(1))
DEADLINE: PodField[float] = PodField(
    (("annotation", names.ANN_DEADLINE),),
    "when the pod must be done; with spot and a capacity loop, it moves to on-demand once a "
    "rerun from zero would miss it (k8s.translate.deadlines)",
    "no deadline",
    "an RFC 3339 time with a UTC offset", "2026-12-04T01:00:00Z", rfc3339)
DURATION: PodField[float] = PodField(
    (("annotation", names.ANN_DURATION),),
    "the seconds of work the pod needs (its deadline guard, gang room, right-sized nodes)",
    "unknown: the deadline guard counts no work",
    "a number of seconds >= 0", "3600", seconds)
DO_NOT_DISRUPT: PodField[bool] = PodField(
    (("annotation", names.DO_NOT_DISRUPT),),
    "\"true\": consolidation never moves the pod (Karpenter's convention)",
    "the pod may be moved if a controller recreates it",
    "\"true\" or \"false\"", None, boolean)
VALUE_OF_TIME: PodField[float] = PodField(
    (("annotation", names.ANN_VALUE_OF_TIME),),
    "what a GPU-hour of the pod's delay costs its owner, $: the spot, swap and gang-room rules "
    "price its delay at the on-demand rate plus this (control.value_of_time)",
    "its team's value (the queue's value_of_time_usd_per_gpu_hour), else the scenario's "
    f"({DEFAULT_VALUE_OF_TIME:g} by default)",
    "a number of dollars per GPU-hour in [0, 1e6]", "10", dollars_per_gpu_hour)
LATENCY_SENSITIVE: PodField[bool] = PodField(
    (("annotation", names.ANN_LATENCY_SENSITIVE),),
    "\"true\": never swapped to spot, consolidated or evicted for a gang; on spot only where "
    "its expected cost there, its delay priced at its value of time, beats on-demand — never "
    "with a value of time of 0 or without gpufleet.io/duration (control.value_of_time)",
    "its team's setting (the queue's latency_sensitive), else not latency-sensitive",
    "\"true\" or \"false\"", "true", boolean)
COMPLETION_INDEX: PodField[str] = PodField(
    (("annotation", names.JOB_COMPLETION_INDEX),),
    "an Indexed Job's completion index (written by the Job controller): the pod that replaces "
    "an interrupted pod of the same index is queued as requeued work",
    "not an Indexed Job's pod",
    "a whole number >= 0", "0", _index)
IGNORED_FAILURES: PodField[int] = PodField(
    (("annotation", names.JOB_INDEX_IGNORED_FAILURES),),
    "the failures of its index the Job controller ignored: > 0 queues the pod as requeued work",
    "0",
    "a whole number >= 0", "0", whole(0))

FIELDS: tuple[PodField[Any], ...] = (
    GPU_FRACTION, GPU_MEMORY, POD_GROUP, MIN_AVAILABLE, DEADLINE, DURATION, DO_NOT_DISRUPT,
    VALUE_OF_TIME, LATENCY_SENSITIVE, COMPLETION_INDEX, IGNORED_FAILURES)


def refusal(meta: Mapping[str, Any]) -> str | None:
    """Why a pod with this ``metadata`` cannot be scheduled as written: the first field in
    :data:`FIELDS` that does not parse; None when every field is absent or valid."""
    return next((why for f in FIELDS if (why := f.problem(meta)) is not None), None)
