"""A gpufleet Controller for unit tests of its cycle: its informers filled through their own
list path from hand-written objects (no API server is reached), its writes made to a recorder
that answers as the API server would (201 for a Binding, an Eviction, a status patch, an
Event)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from kubernetes import client

from gpufleet.config import default_scenario
from gpufleet.k8s.schedule.controller import Controller


class RecordingCore:
    """The writes the Applier makes: Bindings (pod name, node), Evictions, PodScheduled status
    patches and Events (the pod each names)."""

    def __init__(self) -> None:
        self.binds: list[tuple[str, str]] = []
        self.evictions: list[str] = []
        self.status: list[str] = []
        self.events: list[str] = []

    def create_namespaced_binding(self, ns: str, body: dict, **_: Any) -> None:
        self.binds.append((body["metadata"]["name"], body["target"]["name"]))

    def create_namespaced_pod_eviction(self, name: str, ns: str, body: dict, **_: Any) -> None:
        self.evictions.append(name)

    def patch_namespaced_pod_status(self, name: str, *_: Any, **__: Any) -> None:
        self.status.append(name)

    def create_namespaced_event(self, ns: str, body: dict, **_: Any) -> None:
        self.events.append(body["involvedObject"]["name"])


def listed(objs: list[dict]) -> Any:
    """A list call answering ``objs`` as the API's JSON (what the informers' list path reads)."""
    def call(**_: Any) -> Any:
        return SimpleNamespace(data=json.dumps(
            {"items": objs, "metadata": {"resourceVersion": "1"}}))
    return call


def inform(ctl: Controller, nodes: list[dict], pods: list[dict]) -> None:
    """What the informers hold now: a fresh list, through their own list path."""
    ctl.nodes._list = listed(nodes)
    ctl.pods._list = listed(pods)
    ctl.nodes.relist()
    ctl.pods.relist()


def controller(nodes: list[dict], pods: list[dict], async_binds: bool = False
               ) -> tuple[Controller, RecordingCore]:
    """A controller whose writes go to a recorder; binds answered within ``run_cycle`` unless
    ``async_binds`` (then by the binding threads, as in production)."""
    cfg = client.Configuration()
    cfg.host = "http://127.0.0.1:9"  # never reached: the informers are filled by ``inform``
    ctl = Controller(client.ApiClient(cfg), default_scenario(), leader_elect=False, workers=1,
                     async_binds=async_binds)
    rec = RecordingCore()
    ctl.applier.core = rec
    inform(ctl, nodes, pods)
    return ctl, rec
