"""The plugin's Prometheus metrics and its HTTP endpoint (``--metrics-port``, default 9402).

- ``gpufleet_node_plugin_device_unhealthy{device,uuid,reason}``: 1 while the device is
  unhealthy for ``reason`` (``lost``, ``xid-79``), 0 with ``reason=""`` while it is healthy: one
  series per published device;
- ``gpufleet_node_plugin_prepare_total{result}`` / ``gpufleet_node_plugin_unprepare_total
  {result}``: claims prepared / unprepared, ``result`` ``ok`` or ``error``;
- ``gpufleet_node_plugin_prepared_claims``: the claims prepared now (the checkpoint's);
- ``gpufleet_node_plugin_mps_daemons``: the MPS control daemons this plugin runs now.

``/metrics`` serves them in the text format, ``/healthz`` answers ``ok`` (the process serves).
The metrics live in their own registry, so two plugins in one process (tests) do not collide.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import ThreadingHTTPServer

from prometheus_client import CollectorRegistry, Counter, Gauge

from gpufleet.k8s.schedule import telemetry
from gpufleet.node_plugin.health import DeviceHealth

DEFAULT_PORT = 9402


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.unhealthy = Gauge(
            "gpufleet_node_plugin_device_unhealthy",
            "1 while the published GPU device is unhealthy for reason, 0 (reason \"\") when not",
            ["device", "uuid", "reason"], registry=self.registry)
        self.prepare = Counter("gpufleet_node_plugin_prepare", "Claims prepared, by result",
                               ["result"], registry=self.registry)
        self.unprepare = Counter("gpufleet_node_plugin_unprepare",
                                 "Claims unprepared, by result", ["result"],
                                 registry=self.registry)
        self.prepared = Gauge("gpufleet_node_plugin_prepared_claims",
                              "Claims prepared on this node now", registry=self.registry)
        self.mps_daemons = Gauge("gpufleet_node_plugin_mps_daemons",
                                 "MPS control daemons this plugin runs now",
                                 registry=self.registry)
        self._labels: dict[str, tuple[str, str, str]] = {}  # device → its series' labels
        self._lock = threading.Lock()
        for result in ("ok", "error"):  # present from the start, at 0
            self.prepare.labels(result)
            self.unprepare.labels(result)

    def device(self, h: DeviceHealth) -> None:
        """Make ``h.device``'s one series say its health now."""
        labels = (h.device, h.uuid, h.reason or "")
        with self._lock:
            old = self._labels.get(h.device)
            if old is not None and old != labels:
                self.unhealthy.remove(*old)
            self._labels[h.device] = labels
            self.unhealthy.labels(*labels).set(0 if h.healthy else 1)

    def track(self, prepared: Callable[[], float], mps: Callable[[], float]) -> None:
        self.prepared.set_function(prepared)
        self.mps_daemons.set_function(mps)


def serve(metrics: Metrics, port: int, host: str = "") -> ThreadingHTTPServer:
    """Serve ``/metrics`` and ``/healthz`` on ``port`` (0 picks a free one: see
    ``server.server_port``) in a daemon thread, with the controller's and the agent's server;
    ``shutdown()`` stops it."""
    return telemetry.serve(metrics.registry, host, port, healthy=lambda: True,
                           ready=lambda: True)
