"""The controller's own metrics and its ``/metrics``, ``/healthz``, ``/readyz`` endpoints.

Names follow the project's convention (``gpufleet_*``, base units): scheduling attempts by
result, pod scheduling latency (creation → bound, seconds) and cycle duration, pending pods by
reason, binds and evictions, re-lists per informer, and whether this replica leads; the pods
it evicted and the running GPU-seconds they held, by queue and cause (``decisions.Cause``). One
registry per controller, so two controllers in one test process do not collide.

``/healthz`` is 200 while the worker threads live; ``/readyz`` is 200 once both informers have
listed (a standby replica is ready too: its cache is warm for a takeover).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
# Interruption notice → replacement Running: a restart on warm capacity takes tens of seconds, a
# replacement that waits for a new node minutes, one that waits for capacity up to an hour.
RECOVERY_BUCKETS = (10, 20, 30, 45, 60, 90, 120, 180, 300, 600, 900, 1800, 2700, 3600)


class ControllerMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.attempts = Counter("gpufleet_scheduling_attempts_total",
                                "Pods tried in a scheduling cycle, by result", ["result"],
                                registry=r)
        self.latency = Histogram("gpufleet_pod_scheduling_duration_seconds",
                                 "Pod creation to binding", buckets=LATENCY_BUCKETS, registry=r)
        self.cycle = Histogram("gpufleet_scheduling_cycle_duration_seconds",
                               "One snapshot + placement + apply cycle",
                               buckets=LATENCY_BUCKETS, registry=r)
        self.pending = Gauge("gpufleet_pending_pods", "Pending gpufleet pods by reason",
                             ["reason"], registry=r)
        self.binds = Counter("gpufleet_binds_total", "Pods bound", registry=r)
        self.evictions = Counter("gpufleet_evictions_total",
                                 "Pods evicted (preemption, or the drain of an interrupted node)",
                                 registry=r)
        self.conflicts = Counter("gpufleet_bind_conflicts_total",
                                 "Bindings the API server refused with 409 (already bound)",
                                 registry=r)
        self.relists = Counter("gpufleet_informer_relists_total",
                               "Full lists (startup and after 410 Gone)", ["resource"],
                               registry=r)
        self.recovery = Histogram("gpufleet_interruption_recovery_seconds",
                                  "Interruption notice to the owner's replacement pod Running on "
                                  "another node", buckets=RECOVERY_BUCKETS, registry=r)
        self.drained = Counter("gpufleet_interrupted_nodes_drained_total",
                               "Interrupted nodes handed to termination (emptied or out of time)",
                               registry=r)
        self.assumed = Gauge("gpufleet_assumed_pods",
                             "This replica's binds and evictions the informer has not shown yet "
                             "at the last cycle, by kind", ["kind"], registry=r)
        self.assumed_expired = Counter("gpufleet_assumed_expired_total",
                                       "Assumed binds and evictions dropped at their TTL, never "
                                       "seen by the informer", registry=r)
        self.assumed_cycles = Counter("gpufleet_cycles_with_assumed_binds_total",
                                      "Cycles that held at least one bind the informer had not "
                                      "shown yet", registry=r)
        self.unaccounted = Gauge("gpufleet_snapshot_unaccounted",
                                 "Bound pods and allocated DRA claims the last snapshot could not "
                                 "book as written (over-committed, or on a node not in the "
                                 "fleet), by kind; should stay 0", ["kind"], registry=r)
        self.leader = Gauge("gpufleet_leader", "1 while this replica holds the lease",
                            registry=r)
        self.gang_room = Counter("gpufleet_gang_room_choices_total",
                                 "Pending pod groups priced (control.gang_room), by the choice "
                                 "that won: wait, scale-up or preempt", ["choice"], registry=r)
        # the delay gpufleet's own moves cause, counted when the Eviction is accepted
        self.disruptions = Counter(
            "gpufleet_pod_disruptions_total",
            "Pods gpufleet evicted, by queue (the GpuQueue their namespace names; empty: none) "
            "and cause (preemption, gang-room, quota-reclaim, budget-drain, deadline-move, swap, "
            "interruption, consolidation)", ["queue", "cause"], registry=r)
        self.caused_delay = Counter(
            "gpufleet_caused_delay_gpu_seconds_total",
            "Running work the evicted pods held: their GPUs (a share or MIG instance as its "
            "compute share) x the seconds since they started (status.startTime), by queue and "
            "cause; what a pod that does not checkpoint runs again, an upper bound for one that "
            "does", ["queue", "cause"], registry=r)

    def set_pending(self, by_reason: dict[str, int]) -> None:
        self.pending.clear()
        for reason, n in by_reason.items():
            self.pending.labels(reason=reason).set(n)


def pending_reason(message: str) -> str:
    """A low-cardinality label from a refusal message ("insufficient GPU", "gang", …)."""
    if message.startswith("0/"):
        parts = message.split(": ", 1)[-1].split(", ")
        last = parts[-1].split(" (")[0]
        return last.split(" ", 1)[-1] if last[:1].isdigit() else last
    if message.startswith("pod group"):
        return "gang"
    if message.startswith("team "):  # queueing.teams.quota's verdicts
        return "quota"
    return "other"


def serve(registry: CollectorRegistry, host: str, port: int, healthy: Callable[[], bool],
          ready: Callable[[], bool]) -> ThreadingHTTPServer:
    """``/metrics`` of ``registry``, ``/healthz`` and ``/readyz`` on a daemon thread (the
    controller's and the node agent's)."""
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.startswith("/metrics"):
                body, ctype, code = generate_latest(registry), CONTENT_TYPE_LATEST, 200
            elif self.path.startswith(("/healthz", "/readyz")):
                ok = healthy() if self.path.startswith("/healthz") else ready()
                body, ctype, code = (b"ok\n" if ok else b"not ready\n"), "text/plain", (
                    200 if ok else 503)
            else:
                body, ctype, code = b"not found\n", "text/plain", 404
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:  # quiet: requests are not news
            return

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="gpufleet-http", daemon=True).start()
    return server
