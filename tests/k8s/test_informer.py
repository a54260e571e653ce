"""``Informer.take``: what changed since the last take, by key, or the whole store after a list.

The informer is driven by its own paths: ``relist`` over a list call that answers one page of
pods (what ``list_pod_for_all_namespaces`` returns with ``_preload_content=False``), and
``_apply`` with watch events as the API sends them."""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace
from typing import Any

from gpufleet.k8s.watch.informer import Informer


def obj(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}}


def informer(*listed: dict[str, Any]) -> Informer:
    def list_call(**_: Any) -> SimpleNamespace:
        body = {"items": list(listed), "metadata": {"resourceVersion": "10"}}
        return SimpleNamespace(data=json.dumps(body).encode())

    return Informer("pods", list_call, threading.Event())


def test_take_hands_over_what_changed_and_everything_after_a_list() -> None:
    inf = informer(obj("a", "1"), obj("b", "2"))
    inf.relist()
    got, everything = inf.take()
    assert everything and set(got) == {"ns/a", "ns/b"}
    assert inf.take() == ({}, False)  # nothing since
    inf._apply({"type": "MODIFIED", "object": obj("a", "11")})
    inf._apply({"type": "ADDED", "object": obj("c", "12")})
    inf._apply({"type": "DELETED", "object": obj("b", "13")})
    inf._apply({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "14"}}})
    got, everything = inf.take()
    assert not everything
    assert got == {"ns/a": obj("a", "11"), "ns/c": obj("c", "12"), "ns/b": None}
    inf._apply({"type": "ADDED", "object": obj("d", "15")})
    inf.relist()  # a list replaces the store: the next take is everything again
    got, everything = inf.take()
    assert everything and set(got) == {"ns/a", "ns/b"}
    assert inf.objects() == [obj("a", "1"), obj("b", "2")]
