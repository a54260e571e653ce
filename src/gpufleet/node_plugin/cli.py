"""``gpufleet node-plugin``: run the DRA kubelet plugin of driver ``gpu.gpufleet.io`` on a node.

Publishes the node's ResourceSlice (again every ``--resync-seconds``, so a slice deleted or
edited by hand comes back), serves the kubelet's registration and DRA sockets, and runs until
SIGTERM or SIGINT, when it removes its sockets (the kubelet then unregisters the plugin).
"""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from typing import Annotated

import typer

from gpufleet.cli_app import app, friendly_errors
from gpufleet.errors import InputError
from gpufleet.node_plugin import DRIVER, inventory, slices
from gpufleet.node_plugin.prepare import PrepareError, Preparer
from gpufleet.node_plugin.protos import ProtoError

log = logging.getLogger("gpufleet.node_plugin")


@app.command("node-plugin")
@friendly_errors
def node_plugin(
    node_name: Annotated[str, typer.Option(
        envvar="NODE_NAME", help="This node's name (the pool and nodeName of its slice).")],
    kubeconfig: Annotated[Path | None, typer.Option(
        help="Kubeconfig; default in-cluster, else $KUBECONFIG or ~/.kube/config.")] = None,
    device_file: Annotated[Path | None, typer.Option(
        help="GPUs from this YAML/JSON file instead of NVML (the lab's nodes have no GPU).")
    ] = None,
    kubelet_root_dir: Annotated[Path, typer.Option(
        help="The kubelet's --root-dir: its plugins_registry/ and plugins/ are under it.")
    ] = Path("/var/lib/kubelet"),
    cdi_dir: Annotated[Path, typer.Option(
        help="Where the claims' CDI specs go (the container runtime's CDI spec directory).")
    ] = Path("/var/run/cdi"),
    state_dir: Annotated[Path, typer.Option(
        help="The checkpoint of prepared claims (keep it across restarts).")
    ] = Path("/var/lib/gpufleet/node-plugin"),
    resync_seconds: Annotated[float, typer.Option(
        min=1.0, help="How often the ResourceSlice is made what the inventory says again.")
    ] = 60.0,
) -> None:
    """Run the DRA kubelet plugin for GPU shares (driver gpu.gpufleet.io) on this node."""
    from gpufleet.node_plugin import grpc_services, protos

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        gpus = inventory.load(device_file)
    except inventory.InventoryError as exc:
        raise InputError(str(exc)) from None
    try:
        stubs = protos.load()
    except ProtoError as exc:
        raise InputError(str(exc)) from None
    from gpufleet.k8s.cli import api_client  # the controller's: flag, in-cluster, kubeconfig

    api = api_client(kubeconfig)
    log.info("inventory: %s", ", ".join(f"{g.device_name}={g.uuid} ({g.memory_mib} MiB)"
                                        for g in gpus))
    log.info("ResourceSlice %s: %s", slices.slice_name(node_name),
             slices.publish(api, node_name, gpus))
    try:
        preparer = Preparer(node_name, gpus, cdi_dir, state_dir / "checkpoint.json")
    except PrepareError as exc:
        raise InputError(str(exc)) from None
    if preparer.claims:
        log.info("checkpoint: %d prepared claim(s): %s", len(preparer.claims),
                 ", ".join(sorted(preparer.claims)))
    servers = grpc_services.serve(
        stubs, preparer, grpc_services.api_claim_reader(api),
        registry_dir=kubelet_root_dir / "plugins_registry",
        plugin_dir=kubelet_root_dir / "plugins" / DRIVER)
    log.info("serving %s", ", ".join(str(p) for p in servers.sockets))
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        while not stop.wait(resync_seconds):
            try:
                outcome = slices.publish(api, node_name, gpus)
            except Exception as exc:  # the API server away for a while: try again next time
                log.warning("publishing the ResourceSlice failed: %r", exc)
                continue
            if outcome != "unchanged":
                log.info("ResourceSlice %s: %s", slices.slice_name(node_name), outcome)
    finally:
        servers.stop()
        log.info("stopped")
