"""A ``GpuQueue`` object → the simulator's queue settings, or why not.

The spec's keys are a scenario ``teams:`` queue's (``queueing.teams.settings.QueueSettings``) and
the queue's name is the object's, so the object is validated by that same pydantic model — one
set of rules for both drivers. The CRD's OpenAPI schema catches most mistakes at the API server;
what it cannot express (a name that is too long to be the ``gpufleet.io/queue`` label's value,
say) is caught here and reported on the object, naming the field, never by a crash.

Each object is parsed once per ``metadata.generation`` (the spec's version; status writes do not
move it), so the controller's cycles do not re-validate unchanged queues.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from gpufleet.k8s.translate import names
from gpufleet.queueing.teams.settings import QueueSettings

GROUP = "gpufleet.io"
VERSION = "v1alpha1"
PLURAL = "gpuqueues"
KIND = "GpuQueue"
API_VERSION = f"{GROUP}/{VERSION}"
# a Namespace joins a queue with this label; its value is the GpuQueue's name
QUEUE_LABEL = names.QUEUE_LABEL


@dataclass(frozen=True, slots=True)
class Parsed:
    """One object's parse: ``settings`` when valid, else ``error`` (field: message)."""

    name: str
    uid: str
    generation: int
    settings: QueueSettings | None
    error: str | None = None


def field_error(exc: ValidationError) -> str:
    """The first problem as ``<field path>: <message>`` in the object's terms (``spec.x.y``;
    the queue's name is ``metadata.name``)."""
    err = exc.errors()[0]
    loc = [str(p) for p in err["loc"]]
    path = "metadata.name" if loc[:1] == ["name"] else ".".join(["spec", *loc])
    return f"{path}: {err['msg']}"


def parse_queue(obj: Mapping[str, Any]) -> Parsed:
    """Validate one ``GpuQueue`` (see the module docstring)."""
    meta = obj.get("metadata") or {}
    name = str(meta.get("name") or "")
    uid, gen = str(meta.get("uid") or ""), int(meta.get("generation") or 0)
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return Parsed(name, uid, gen, None, "spec: expected an object")
    if "name" in spec:
        return Parsed(name, uid, gen, None,
                      "spec.name: not allowed; the queue's name is metadata.name")
    try:
        return Parsed(name, uid, gen, QueueSettings.model_validate({"name": name, **spec}))
    except ValidationError as exc:
        return Parsed(name, uid, gen, None, field_error(exc))


class QueueParses:
    """Parses by (name, uid, generation), pruned to the objects still listed."""

    def __init__(self) -> None:
        self._got: dict[str, Parsed] = {}

    def parse_all(self, objs: Iterable[Mapping[str, Any]]) -> list[Parsed]:
        out: list[Parsed] = []
        for obj in objs:
            meta = obj.get("metadata") or {}
            name = str(meta.get("name") or "")
            hit = self._got.get(name)
            if hit is None or hit.uid != meta.get("uid") or hit.generation != int(
                    meta.get("generation") or 0):
                hit = self._got[name] = parse_queue(obj)
            out.append(hit)
        listed = {p.name for p in out}
        for gone in [n for n in self._got if n not in listed]:
            del self._got[gone]
        return out


def namespace_queues(namespaces: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Namespace name → the queue its ``gpufleet.io/queue`` label names."""
    out: dict[str, str] = {}
    for ns in namespaces:
        meta = ns.get("metadata") or {}
        q = (meta.get("labels") or {}).get(QUEUE_LABEL)
        if q:
            out[str(meta.get("name"))] = str(q)
    return out
