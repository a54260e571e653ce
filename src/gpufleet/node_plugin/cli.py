"""``gpufleet node-plugin``: run the DRA kubelet plugin of driver ``gpu.gpufleet.io`` on a node.

Publishes the node's ResourceSlice (again every ``--resync-seconds``, so a slice deleted or
edited by hand comes back), serves the kubelet's registration and DRA sockets (with the devices'
health stream), and runs until SIGTERM or SIGINT, when it removes its sockets (the kubelet then
unregisters the plugin).

Every resync it reads the GPUs again (the device file, or NVML) and, on a GPU node, takes the
XIDs NVML reported (a critical XID wakes it at once): an unhealthy GPU's device is tainted in the
slice (:mod:`.health`), the metric ``gpufleet_node_plugin_device_unhealthy`` follows, and the Node
gets an Event per transition. With ``--mps-daemon`` (the default) shares run under an MPS control
daemon per GPU (:mod:`.mps`); the binary must be there, or the plugin stops at once. With
``--hami-core PATH`` shares are limited by the HAMi-core library at PATH instead (:mod:`.hami`):
it turns the MPS daemon off unless ``--mps-daemon`` is also given, which is refused (one or the
other); the library must be there, or the plugin stops at once.
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
from gpufleet.node_plugin import DRIVER, events, hami, inventory, mps, slices
from gpufleet.node_plugin.health import DeviceHealth, HealthTracker, XidWatcher
from gpufleet.node_plugin.metrics import DEFAULT_PORT, Metrics
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
    metrics_port: Annotated[int, typer.Option(
        min=0, max=65535, help="Serve /metrics and /healthz on this port; 0: off.")
    ] = DEFAULT_PORT,
    mps_daemon: Annotated[bool | None, typer.Option(
        "--mps-daemon/--no-mps-daemon",
        help="Run an MPS control daemon per shared GPU (the default without --hami-core); "
             "--no-mps-daemon: the env limits only (the lab, or MPS run by something else).",
        show_default=False)] = None,
    mps_control: Annotated[str, typer.Option(
        help="The MPS control binary (a path, or a name on PATH).")] = mps.DEFAULT_CONTROL,
    mps_dir: Annotated[Path, typer.Option(
        help="The MPS daemons' directories: <mps-dir>/<GPU uuid>/pipe and .../log.")
    ] = mps.DEFAULT_DIR,
    mps_shm_dir: Annotated[Path, typer.Option(
        help="The host directory that is the MPS daemons' /dev/shm (where this plugin runs in "
             "a container: the host directory mounted at its /dev/shm); mounted as /dev/shm "
             "into each share's container, where MPS clients meet their server.")
    ] = Path("/dev/shm"),
    hami_core: Annotated[Path | None, typer.Option(
        help="Limit shares with the HAMi-core library (libvgpu.so) at this host path instead of "
             "MPS: preloaded into the share's containers with its memory and SM limits. "
             "Excludes --mps-daemon.")] = None,
    hami_dir: Annotated[Path, typer.Option(
        help="With --hami-core: the claims' shared cache directories "
             "(<hami-dir>/claims/<claim UID>) and the lock directory (<hami-dir>/vgpulock).")
    ] = hami.DEFAULT_DIR,
) -> None:
    """Run the DRA kubelet plugin for GPU shares (driver gpu.gpufleet.io) on this node."""
    from gpufleet.node_plugin import grpc_services, metrics, protos

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if hami_core is not None and mps_daemon:
        raise InputError("--hami-core and --mps-daemon are exclusive: a share runs under one; "
                         "leave one out")
    core = None
    if hami_core is not None:
        core = hami.HamiCore(hami_core, hami_dir)
        why = core.check()
        if why is not None:
            raise InputError(f"{why}: install HAMi-core's libvgpu.so there (the host path) or "
                             "leave --hami-core out")
    try:
        gpus = inventory.load(device_file)
    except inventory.InventoryError as exc:
        raise InputError(str(exc)) from None
    manager = None
    if core is None and mps_daemon is not False:
        control = mps.find_control(mps_control)
        if control is None:
            raise InputError(f"MPS control binary {mps_control!r} not found: install it (it "
                             "comes with the NVIDIA driver's utilities) or pass --no-mps-daemon")
        manager = mps.MpsManager(control, mps_dir, shm_dir=mps_shm_dir)
    try:
        stubs = protos.load()
    except ProtoError as exc:
        raise InputError(str(exc)) from None
    from gpufleet.k8s.cli import api_client  # the controller's: flag, in-cluster, kubeconfig

    api = api_client(kubeconfig)
    log.info("inventory: %s", ", ".join(f"{g.device_name}={g.uuid} ({g.memory_mib} MiB)"
                                        for g in gpus))
    if core is not None:
        log.info("shares limited by HAMi-core %s (directories under %s)", core.library, core.root)
    try:
        preparer = Preparer(node_name, gpus, cdi_dir, state_dir / "checkpoint.json",
                            mps=manager, hami=core)
    except PrepareError as exc:
        raise InputError(str(exc)) from None
    if preparer.claims:
        log.info("checkpoint: %d prepared claim(s): %s", len(preparer.claims),
                 ", ".join(sorted(preparer.claims)))
    for line in preparer.reconcile_mps():
        log.info("MPS: %s", line)
    stats = Metrics()
    stats.track(lambda: len(preparer.claims), lambda: manager.running() if manager else 0)
    http = None
    if metrics_port:
        try:
            http = metrics.serve(stats, metrics_port)
        except OSError as exc:
            raise InputError(f"--metrics-port {metrics_port}: {exc.strerror}; pass another "
                             "port or 0 (off)") from None
        log.info("metrics on :%d/metrics", metrics_port)
    wake = threading.Event()
    watcher = XidWatcher(on_xid=wake.set).start() if device_file is None else None
    tracker = HealthTracker([])

    def observe(present: list[inventory.Gpu]) -> None:
        for new, old in tracker.observe(present, watcher.xids() if watcher else {}):
            stats.device(new)
            _log_health(new, old)
            if not (new.healthy and (old is None or old.healthy)):
                events.post(api, node_name, new)
        preparer.set_gpus(tracker.gpus())

    observe(gpus)
    log.info("ResourceSlice %s: %s", slices.slice_name(node_name),
             slices.publish(api, node_name, tracker.gpus(), tracker.taints()))
    servers = grpc_services.serve(
        stubs, preparer, grpc_services.api_claim_reader(api),
        registry_dir=kubelet_root_dir / "plugins_registry",
        plugin_dir=kubelet_root_dir / "plugins" / DRIVER, tracker=tracker, metrics=stats)
    log.info("serving %s", ", ".join(str(p) for p in servers.sockets))
    stop = threading.Event()

    def on_signal(*_: object) -> None:
        stop.set()
        wake.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    try:
        while True:
            wake.wait(resync_seconds)
            wake.clear()
            if stop.is_set():
                break
            try:
                gpus = inventory.load(device_file)
            except inventory.InventoryError as exc:  # keep the last good inventory
                log.warning("reading the GPUs again failed (kept the last inventory): %s", exc)
            observe(gpus)
            try:
                outcome = slices.publish(api, node_name, tracker.gpus(), tracker.taints())
            except Exception as exc:  # the API server away for a while: try again next time
                log.warning("publishing the ResourceSlice failed: %r", exc)
                continue
            if outcome != "unchanged":
                log.info("ResourceSlice %s: %s", slices.slice_name(node_name), outcome)
    finally:
        servers.stop()
        if watcher is not None:
            watcher.stop()
        if http is not None:
            http.shutdown()
        log.info("stopped")


def _log_health(new: DeviceHealth, old: DeviceHealth | None) -> None:
    if not new.healthy:
        log.warning("%s (%s) unhealthy: %s, tainted %s", new.device, new.uuid, new.reason,
                    new.effect)
    elif old is not None and not old.healthy:
        log.info("%s (%s) healthy again (was %s)", new.device, new.uuid, old.reason)
