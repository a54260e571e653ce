"""The DRA service (``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin``) and the two gRPC servers.

NodePrepareResources reads each claim from the API server (the kubelet sends only its namespace,
name and UID), prepares it (:class:`gpufleet.node_plugin.prepare.Preparer`) and answers with the
CDI device IDs per allocated device; a claim that cannot be prepared gets an ``error`` the kubelet
shows in the pod's events and retries. NodeUnprepareResources undoes it. Every claim of a request
has an entry in the response, as the API requires.

The same socket serves the resource-health stream (``v1alpha1.DRAResourceHealth``
NodeWatchResources, ResourceHealthStatus): the kubelet opens it once the plugin is registered
(it needs no registration entry) and gets every published device's health (pool = node name)
at once, on every change, and every :data:`HEARTBEAT_S` seconds, so its per-device timeout
(:data:`HEALTH_TIMEOUT_S`) never turns a quiet healthy device to Unknown. The kubelet writes it
into the status of the pods using the device.

The kubelet reaches the plugin on two Unix sockets: the registration socket in its
``plugins_registry`` directory and the DRA socket (``dra.sock``) in the plugin's own data
directory (``<root-dir>/plugins/gpu.gpufleet.io``), each served by its own gRPC server.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from gpufleet.node_plugin import registration
from gpufleet.node_plugin.health import HealthTracker
from gpufleet.node_plugin.metrics import Metrics
from gpufleet.node_plugin.prepare import PrepareError, Preparer, allocated_results
from gpufleet.node_plugin.protos import Stubs

log = logging.getLogger(__name__)

HEARTBEAT_S = 10.0
HEALTH_TIMEOUT_S = 60  # the kubelet's own default is 30 s

# (namespace, name) → the ResourceClaim as a dict (resource.k8s.io/v1)
ClaimReader = Callable[[str, str], dict[str, Any]]


def api_claim_reader(api_client: Any) -> ClaimReader:
    from kubernetes import client

    custom = client.CustomObjectsApi(api_client)

    def read(namespace: str, name: str) -> dict[str, Any]:
        return dict(custom.get_namespaced_custom_object(
            "resource.k8s.io", "v1", namespace, "resourceclaims", name))

    return read


def _read_error(namespace: str, name: str, exc: Exception) -> str:
    from kubernetes.client.exceptions import ApiException

    if isinstance(exc, ApiException):
        return f"reading claim {namespace}/{name}: {exc.status} {exc.reason}"
    return f"reading claim {namespace}/{name}: {exc!r}"


def dra_servicer(stubs: Stubs, preparer: Preparer, read_claim: ClaimReader,
                 metrics: Metrics | None = None) -> Any:
    pb = stubs.dra

    def count(counter: str, result: str) -> None:
        if metrics is not None:
            getattr(metrics, counter).labels(result).inc()

    base: Any = stubs.dra_grpc.DRAPluginServicer

    class DRAPlugin(base):
        def NodePrepareResources(self, request: Any, context: Any) -> Any:
            out = {}
            for c in request.claims:
                try:
                    if c.uid in preparer.claims:  # a retry: no need to ask the API again
                        results: list[dict[str, Any]] = []
                    else:
                        try:
                            claim = read_claim(c.namespace, c.name)
                        except Exception as exc:
                            raise PrepareError(_read_error(c.namespace, c.name, exc)) from None
                        results = allocated_results(claim, c.uid, preparer.node)
                    shares, ids = preparer.prepare(c.uid, c.namespace, c.name, results)
                except PrepareError as exc:
                    log.warning("prepare %s/%s (%s) failed: %s", c.namespace, c.name, c.uid, exc)
                    out[c.uid] = pb.NodePrepareResourceResponse(error=str(exc))
                    count("prepare", "error")
                    continue
                count("prepare", "ok")
                log.info("prepared %s/%s (%s): %s", c.namespace, c.name, c.uid, ", ".join(ids))
                devices = []
                for s, cdi_id in zip(shares, ids, strict=True):
                    d = pb.Device(request_names=[s.request] if s.request else [],
                                  pool_name=s.pool, device_name=s.device,
                                  cdi_device_ids=[cdi_id])
                    if s.share_id:
                        d.share_id = s.share_id
                    devices.append(d)
                out[c.uid] = pb.NodePrepareResourceResponse(devices=devices)
            return pb.NodePrepareResourcesResponse(claims=out)

        def NodeUnprepareResources(self, request: Any, context: Any) -> Any:
            out = {}
            for c in request.claims:
                try:
                    was = preparer.unprepare(c.uid)
                except OSError as exc:
                    out[c.uid] = pb.NodeUnprepareResourceResponse(
                        error=f"unpreparing claim {c.namespace}/{c.name}: {exc}")
                    count("unprepare", "error")
                    continue
                count("unprepare", "ok")
                log.info("unprepared %s/%s (%s)%s", c.namespace, c.name, c.uid,
                         "" if was else ": was not prepared")
                out[c.uid] = pb.NodeUnprepareResourceResponse()
            return pb.NodeUnprepareResourcesResponse(claims=out)

    return DRAPlugin()


def health_servicer(stubs: Stubs, tracker: HealthTracker, pool: str,
                    heartbeat_s: float = HEARTBEAT_S) -> Any:
    """NodeWatchResources: every device's health now, then again on each change or heartbeat,
    until the kubelet hangs up or the server stops."""
    pb = stubs.health
    base: Any = stubs.health_grpc.DRAResourceHealthServicer

    def snapshot() -> Any:
        now = int(time.time())
        return pb.NodeWatchResourcesResponse(devices=[
            pb.DeviceHealth(
                device=pb.DeviceIdentifier(pool_name=pool, device_name=h.device),
                health=pb.HEALTHY if h.healthy else pb.UNHEALTHY,
                last_updated_time=now, health_check_timeout_seconds=HEALTH_TIMEOUT_S,
                message="" if h.healthy else f"{h.uuid}: {h.reason}")
            for h in tracker.health()])

    class DRAResourceHealth(base):
        def NodeWatchResources(self, request: Any, context: Any) -> Iterator[Any]:
            log.info("kubelet watches the devices' health (NodeWatchResources)")
            seen = tracker.version
            yield snapshot()
            next_beat = time.monotonic() + heartbeat_s
            while context.is_active():
                # short waits: a hung-up stream or a stopping server is noticed within a second
                version = tracker.wait_change(seen, min(1.0, heartbeat_s))
                if version != seen or time.monotonic() >= next_beat:
                    seen = version
                    next_beat = time.monotonic() + heartbeat_s
                    yield snapshot()

    return DRAResourceHealth()


@dataclass
class Servers:
    registration: Any  # the Registration servicer (its ``registered`` event)
    servers: list[grpc.Server]
    sockets: list[Path]

    def stop(self, grace_s: float = 2.0) -> None:
        for s in self.servers:
            s.stop(grace_s).wait()
        for p in self.sockets:
            p.unlink(missing_ok=True)


def _bind(server: grpc.Server, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)  # a previous run's socket
    server.add_insecure_port(f"unix://{path}")
    server.start()
    os.chmod(path, 0o600)


def serve(stubs: Stubs, preparer: Preparer, read_claim: ClaimReader, registry_dir: Path,
          plugin_dir: Path, tracker: HealthTracker | None = None,
          metrics: Metrics | None = None) -> Servers:
    """Start the DRA server on ``plugin_dir/dra.sock`` (with the health stream of ``tracker``,
    default: the preparer's GPUs, all healthy), then (so the kubelet finds a working endpoint
    when it calls GetInfo) the registration server in ``registry_dir``."""
    dra_sock = plugin_dir / "dra.sock"
    # the kubelet's health stream holds one worker for as long as it is open
    dra = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    stubs.dra_grpc.add_DRAPluginServicer_to_server(
        dra_servicer(stubs, preparer, read_claim, metrics), dra)
    stubs.health_grpc.add_DRAResourceHealthServicer_to_server(
        health_servicer(stubs, tracker or HealthTracker(preparer.gpus), preparer.node), dra)
    _bind(dra, dra_sock)
    reg_sock = registry_dir / registration.socket_name()
    reg_servicer = registration.servicer(stubs, dra_sock)
    reg = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    stubs.registration_grpc.add_RegistrationServicer_to_server(reg_servicer, reg)
    _bind(reg, reg_sock)
    return Servers(reg_servicer, [reg, dra], [reg_sock, dra_sock])
