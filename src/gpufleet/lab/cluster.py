"""Bring the lab cluster up and down.

Order matters and each step waits for the previous one to be ready: kine (storage) → kube-apiserver
(``/readyz``) → kube-controller-manager (``/healthz``) → kube-scheduler (optional) → KWOK
(``/healthz``) → the ``default`` ServiceAccount (the controller-manager is really working) → the
chart's CRDs, Established (:mod:`gpufleet.lab.crds`) → nodes (Ready through KWOK) → the gpufleet
controller (when its command exists). With ``real_node`` (``--real-node``), instead of that
controller process: a real node (containerd + kubelet, :mod:`gpufleet.lab.real_node`), the image
imported into it, and the chart installed with the controller and agent as pods there
(:mod:`gpufleet.lab.release`). A failure stops what was started and names the component and its log.
All state is under one directory: ``pki/``, the kubeconfigs, ``kine/state.db``,
``logs/<component>.log``, ``run/<component>.pid``, ``lab.json``, and the API server's audit log of
ServiceAccounts' requests, ``audit/audit.log`` (AUDIT_LOG).

Ports (see :mod:`gpufleet.lab.processes`): kine serves the API server on a Unix socket in its
directory, no port at all; KWOK and the gpufleet controller bind port 0 and the lab reads back
the port each got; the API server, the controller-manager, the scheduler and the real node's
kubelet must be told their ports, so each is started on free ones and, when another process took
one first, again on others (:func:`gpufleet.lab.processes.start_on_free_ports`); the chart's pods
on the real node use the host's network on free ports, and the release is upgraded to another
port for a pod that found its own taken (:func:`gpufleet.lab.release.install_for_lab`). So
several labs run side by side, each in its own directory (a real node, one per machine).
"""

from __future__ import annotations

import importlib.util
import json
import ssl
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from gpufleet.k8s.translate.node_objects import KWOK_SELECTOR, GpuNodeSpec
from gpufleet.lab import crds, dra, processes, real_node, release
from gpufleet.lab.binaries import BUILD_SCRIPT, bin_dir, binary, missing_binaries
from gpufleet.lab.errors import LabError
from gpufleet.lab.fleet import create_nodes, default_fleet, wait_nodes_ready
from gpufleet.lab.kubeconfig import write_kubeconfig
from gpufleet.lab.node_liveness import kwok_configuration, liveness_for
from gpufleet.lab.pki import Pki, ensure_pki

# Start order; ``down`` stops in reverse.
COMPONENTS = (
    "kine",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    *real_node.COMPONENTS,
    "gpufleet-controller",
)
SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = "10.64.0.1/10"  # KWOK's pod IP pool: room for the openb benchmark's pods
FAKE_NODE_IP = "10.200.0.1"
CLIENT_QPS = 200
CLIENT_BURST = 400
STATE_FILE = "lab.json"
# kine's socket, relative to kine's directory (the working directory of kine and the API server):
# a socket's path is limited to 107 bytes, however deep the lab's directory is.
KINE_SOCKET = "kine.sock"
# what `gpufleet controller` prints once it serves: its real port when started with --port 0
CONTROLLER_SERVING = r"http://127\.0\.0\.1:(\d+)/metrics"


@dataclass(frozen=True, slots=True)
class LabOptions:
    """What ``lab up`` starts; every field has the CLI's default."""

    directory: Path
    nodes: Sequence[GpuNodeSpec] | None = None  # None → the default mixed fleet
    controller: bool = True
    controller_config: Path | None = None
    kube_scheduler: bool = False
    # Extra KubeSchedulerConfiguration fields (e.g. ``profiles``) for the benchmark.
    scheduler_config: dict[str, Any] = field(default_factory=dict)
    ready_timeout_s: float = 90.0
    # DRA inventory: NVIDIA's DeviceClasses and every GPU node's ResourceSlices (lab/dra.py);
    # False is ``--classic``, GPUs only as Node labels and extended resources.
    dra: bool = True
    # With DRA, whether the GPU nodes also advertise the device plugin's ``nvidia.com/gpu``
    # (``--device-plugin``): a mixed fleet no real node is (NVIDIA's DRA driver and device
    # plugin are not run on the same GPUs), kept for tests of both paths side by side. False
    # (the default): GPUs are devices only, ``nvidia.com/gpu`` requests reach them through
    # extended-resource claims, and the lab installs the gpu-fraction policy (lab/dra.py).
    device_plugin: bool = False
    # A real node with the chart's controller and agent as pods on it (instead of the controller
    # process); ``image`` the OCI archive to run, else the one ``make image`` builds.
    real_node: bool = False
    image: Path | None = None


@dataclass(frozen=True, slots=True)
class LabInfo:
    """A running lab: where to reach it. Saved as ``lab.json`` in the state directory."""

    directory: Path
    kubeconfig: Path
    server: str
    nodes: tuple[str, ...]
    components: tuple[str, ...]
    controller: str  # "started" | "disabled" | "unavailable: <why>"
    dra: bool = True  # nodes get ResourceSlices (not ``--classic``)
    real_node: str | None = None  # the real node's name, when ``--real-node``
    device_plugin: bool = False  # nodes advertise nvidia.com/gpu (classic, --device-plugin)

    def to_json(self) -> dict[str, Any]:
        return {
            "directory": str(self.directory),
            "kubeconfig": str(self.kubeconfig),
            "server": self.server,
            "nodes": list(self.nodes),
            "components": list(self.components),
            "controller": self.controller,
            "dra": self.dra,
            "real_node": self.real_node,
            "device_plugin": self.device_plugin,
        }


def _https_ok(url: str, ctx: ssl.SSLContext) -> bool:
    with urllib.request.urlopen(url, context=ctx, timeout=2) as resp:
        return bool(resp.status == 200)


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as resp:
        return bool(resp.status == 200)


def _admin_context(pki: Pki) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca.cert))
    ctx.load_cert_chain(str(pki.admin.cert), str(pki.admin.key))
    return ctx


def _insecure_context() -> ssl.SSLContext:
    # The controller-manager and scheduler serve /healthz on a self-signed cert they make up.
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _stages_file(directory: Path) -> Path:
    """The packaged KWOK Stage documents and the KwokConfiguration as one ``--config`` file."""
    pkg = resources.files("gpufleet.lab") / "stages"
    docs = [
        (pkg / name).read_text()
        for name in sorted(p.name for p in pkg.iterdir() if p.name.endswith(".yaml"))
    ]
    docs.append(yaml.safe_dump(kwok_configuration(), sort_keys=False))
    path = directory / "kwok" / "stages.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n---\n".join(d.strip() for d in docs) + "\n")
    return path


# The API server's audit log: Metadata-level events of requests made by ServiceAccounts outside
# kube-system (the chart's controller and agent run as such; the controller-manager's own
# per-controller accounts, all in kube-system, would dominate the log and are left out), in
# ``audit/audit.log`` under the lab's directory, rotated at AUDIT_MAX_MB. Tests read it to show
# which API calls a ServiceAccount made and which were denied.
AUDIT_LOG = Path("audit") / "audit.log"
AUDIT_MAX_MB = 20


def audit_policy_file(directory: Path) -> Path:
    """Write the audit policy (see AUDIT_LOG) into ``directory/audit/`` and return its path."""
    policy = {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [
            {"level": "None", "userGroups": ["system:serviceaccounts:kube-system"]},
            {"level": "Metadata", "userGroups": ["system:serviceaccounts"]},
            {"level": "None"},
        ],
    }
    path = directory / "audit" / "policy.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(policy, sort_keys=False))
    return path


def controller_command_available() -> str | None:
    """None when ``gpufleet controller`` exists in this install, else why it does not.

    The command lives in ``gpufleet.k8s.cli``; looking the module up (not importing the CLI
    table) keeps the lab free of the command-line layer.
    """
    if importlib.util.find_spec("gpufleet.k8s.cli") is None:
        return "the gpufleet controller command is not installed (gpufleet.k8s.cli missing)"
    return None


def running_components(directory: Path) -> list[processes.Running]:
    run_dir = directory / "run"
    out = []
    for name in COMPONENTS:
        r = processes.read_pidfile(run_dir / f"{name}.pid", directory / "logs")
        if r is not None and r.alive():
            out.append(r)
    return out


def down(directory: Path, log: Callable[[str], None] = lambda _m: None) -> list[str]:
    """Stop every component ``up`` started in ``directory`` (reverse order). Idempotent."""
    directory = directory.resolve()
    stopped = real_node.stop_node(directory, log)  # before the API server: pods, mounts, bridge
    run_dir = directory / "run"
    for name in reversed(COMPONENTS):
        r = processes.read_pidfile(run_dir / f"{name}.pid", directory / "logs")
        if r is None:
            continue
        if r.alive():
            log(f"stopping {name} (pid {r.pid})")
            stopped.append(name)
        processes.stop(r)
    (directory / STATE_FILE).unlink(missing_ok=True)
    return stopped


def load_info(directory: Path) -> LabInfo | None:
    try:
        data = json.loads((directory.resolve() / STATE_FILE).read_text())
        return LabInfo(
            Path(data["directory"]),
            Path(data["kubeconfig"]),
            data["server"],
            tuple(data["nodes"]),
            tuple(data["components"]),
            data["controller"],
            bool(data.get("dra", False)),
            data.get("real_node"),
            bool(data.get("device_plugin", True)),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def up(opts: LabOptions, log: Callable[[str], None] = lambda _m: None) -> LabInfo:
    """Start the lab in ``opts.directory`` and return how to reach it."""
    d = opts.directory.resolve()
    live = running_components(d)
    if live:
        raise LabError(
            f"a lab is already running in {d} ({', '.join(r.name for r in live)}); "
            f"run `gpufleet lab down --dir {d}` first"
        )
    if opts.real_node:  # root first: without it nothing else matters
        why = real_node.missing_prerequisite()
        if why is not None:
            raise LabError(why)
    missing = missing_binaries()
    if missing:
        raise LabError(
            f"missing Kubernetes test binaries in {bin_dir()}: {', '.join(missing)}; "
            f"build them with `bash {BUILD_SCRIPT}` (or set GPUFLEET_K8S_BIN)"
        )
    image: Path | None = None
    if opts.real_node:
        release.chart_dir()
        if opts.image is not None and not opts.image.is_file():
            raise LabError(f"--image {opts.image}: file not found")
        image = opts.image or release.image_archive(log)
    d.mkdir(parents=True, exist_ok=True)
    run_dir, log_dir = d / "run", d / "logs"
    started: list[processes.Running] = []

    def start(name: str, argv: Sequence[str], **kw: Any) -> processes.Running:
        log(f"starting {name}")
        r = processes.start(name, argv, run_dir=run_dir, log_dir=log_dir, **kw)
        # started again on other ports: this start replaces the first, which was stopped
        started[:] = [s for s in started if s.name != name]
        started.append(r)
        return r

    def start_on_free_ports(name: str, argv: Callable[[Sequence[int]], Sequence[str]],
                            ready: Callable[[Sequence[int]], bool], what: str,
                            **kw: Any) -> tuple[processes.Running, list[int]]:
        return processes.start_on_free_ports(
            name, argv, ready, start=lambda n, a: start(n, a, **kw), what=what,
            timeout_s=opts.ready_timeout_s, log=log)

    t0 = time.monotonic()
    plugin = opts.device_plugin or not opts.dra
    specs = list(default_fleet(dra_only=not plugin) if opts.nodes is None else opts.nodes)
    liveness = liveness_for(len(specs))
    try:
        pki = ensure_pki(d / "pki")

        kine_dir = d / "kine"
        kine_dir.mkdir(exist_ok=True)
        (kine_dir / KINE_SOCKET).unlink(missing_ok=True)  # a stopped lab's
        kine = start(
            "kine",
            [
                str(binary("kine")),
                f"--listen-address=unix://{KINE_SOCKET}",
                "--endpoint=sqlite://"
                + str(kine_dir / "state.db")
                + "?_journal_mode=WAL&_busy_timeout=30000&_synchronous=NORMAL&cache=shared",
                "--metrics-bind-address=0",
            ],
            cwd=kine_dir,
        )
        processes.wait_until(
            kine,
            lambda: processes.unix_listening(kine_dir / KINE_SOCKET),
            what="listening",
            timeout_s=opts.ready_timeout_s,
        )

        audit_policy = audit_policy_file(d)

        def apiserver_argv(ports: Sequence[int]) -> list[str]:
            return [
                str(binary("kube-apiserver")),
                f"--etcd-servers=unix://{KINE_SOCKET}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={ports[0]}",
                f"--cert-dir={d / 'pki'}",
                f"--tls-cert-file={pki.apiserver.cert}",
                f"--tls-private-key-file={pki.apiserver.key}",
                f"--client-ca-file={pki.ca.cert}",
                f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                "--authorization-mode=RBAC",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--endpoint-reconciler-type=none",
                "--allow-privileged=true",
                "--profiling=false",
                f"--feature-gates={dra.FEATURE_GATES}",
                # the real node's kubelet (--real-node), for logs and exec: by the address it
                # reports (its hostname resolves nowhere), with a client pair of the lab's CA
                "--kubelet-preferred-address-types=InternalIP,Hostname",
                f"--kubelet-client-certificate={pki.admin.cert}",
                f"--kubelet-client-key={pki.admin.key}",
                # audit: ServiceAccounts' requests only, metadata only (audit_policy_file)
                f"--audit-policy-file={audit_policy}",
                f"--audit-log-path={d / AUDIT_LOG}",
                f"--audit-log-maxsize={AUDIT_MAX_MB}",
                "--audit-log-maxbackup=1",
                "--audit-log-format=json",
            ]

        admin_ctx = _admin_context(pki)
        _, (api_port,) = start_on_free_ports(
            "kube-apiserver",
            apiserver_argv,
            lambda ports: _https_ok(f"https://127.0.0.1:{ports[0]}/readyz", admin_ctx),
            "ready (/readyz)",
            cwd=kine_dir,  # where kine's socket is
        )
        server = f"https://127.0.0.1:{api_port}"

        kubeconfig = write_kubeconfig(
            d / "kubeconfig", server, pki.ca.cert, pki.admin, "gpufleet-lab-admin"
        )
        kcm_kc = write_kubeconfig(
            d / "kubeconfigs" / "controller-manager.kubeconfig",
            server,
            pki.ca.cert,
            pki.controller_manager,
            "system:kube-controller-manager",
        )
        kwok_kc = write_kubeconfig(
            d / "kubeconfigs" / "kwok.kubeconfig", server, pki.ca.cert, pki.kwok, "kwok-controller"
        )

        def kcm_argv(ports: Sequence[int]) -> list[str]:
            return [
                str(binary("kube-controller-manager")),
                f"--kubeconfig={kcm_kc}",
                f"--authentication-kubeconfig={kcm_kc}",
                f"--authorization-kubeconfig={kcm_kc}",
                "--bind-address=127.0.0.1",
                f"--secure-port={ports[0]}",
                f"--cert-dir={d / 'pki' / 'controller-manager-serving'}",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={pki.sa_key}",
                f"--root-ca-file={pki.ca.cert}",
                f"--cluster-signing-cert-file={pki.ca.cert}",
                f"--cluster-signing-key-file={pki.ca.key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--leader-elect=false",
                # The TTL controller annotates every Node with a kubelet cache TTL each time the
                # fleet crosses a size step (0/15/30/60 s at 100/500/1000 nodes): ~3.4 writes
                # per node while 1,213 nodes come up, for kubelets that do not exist here.
                "--controllers=*,-ttl-controller",
                f"--kube-api-qps={CLIENT_QPS}",
                f"--kube-api-burst={CLIENT_BURST}",
                f"--node-monitor-grace-period={liveness.grace_s}s",
                f"--node-startup-grace-period={liveness.startup_grace_s}s",
                "--profiling=false",
                f"--feature-gates={dra.FEATURE_GATES}",
            ]

        insecure = _insecure_context()
        kcm, _ = start_on_free_ports(
            "kube-controller-manager",
            kcm_argv,
            lambda ports: _https_ok(f"https://127.0.0.1:{ports[0]}/healthz", insecure),
            "healthy (/healthz)",
        )

        # the real node's pods (the chart's) use the default scheduler
        if opts.kube_scheduler or opts.real_node:
            sched_kc = write_kubeconfig(
                d / "kubeconfigs" / "scheduler.kubeconfig",
                server,
                pki.ca.cert,
                pki.scheduler,
                "system:kube-scheduler",
            )
            sched_cfg = {
                "apiVersion": "kubescheduler.config.k8s.io/v1",
                "kind": "KubeSchedulerConfiguration",
                "clientConnection": {
                    "kubeconfig": str(sched_kc),
                    "qps": CLIENT_QPS,
                    "burst": CLIENT_BURST,
                },
                "leaderElection": {"leaderElect": False},
                **opts.scheduler_config,
            }
            sched_cfg_path = d / "kube-scheduler.yaml"
            sched_cfg_path.write_text(yaml.safe_dump(sched_cfg, sort_keys=False))
            start_on_free_ports(
                "kube-scheduler",
                lambda ports: [
                    str(binary("kube-scheduler")),
                    f"--config={sched_cfg_path}",
                    f"--authentication-kubeconfig={sched_kc}",
                    f"--authorization-kubeconfig={sched_kc}",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={ports[0]}",
                    f"--cert-dir={d / 'pki' / 'scheduler-serving'}",
                    f"--feature-gates={dra.FEATURE_GATES}",
                ],
                lambda ports: _https_ok(f"https://127.0.0.1:{ports[0]}/healthz", insecure),
                "healthy (/healthz)",
            )

        kwok = start(
            "kwok",
            [
                str(binary("kwok")),
                f"--kubeconfig={kwok_kc}",
                f"--config={_stages_file(d)}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={KWOK_SELECTOR}",
                f"--node-ip={FAKE_NODE_IP}",
                f"--node-lease-duration-seconds={liveness.lease_s}",
                f"--cidr={POD_CIDR}",
                "--server-address=127.0.0.1:0",  # its only listener: /healthz, /metrics
            ],
        )
        processes.wait_own_port(
            kwok,
            lambda port: _http_ok(f"http://127.0.0.1:{port}/healthz"),
            what="healthy (/healthz)",
            timeout_s=opts.ready_timeout_s,
        )

        api = api_client(kubeconfig)
        processes.wait_until(
            kcm,
            lambda: _default_service_account(api),
            what="serving (no default ServiceAccount)",
            timeout_s=opts.ready_timeout_s,
        )
        # what the chart installs cluster-wide, so a controller and teams work on the lab as on
        # a cluster with the chart (lab/crds.py)
        if crds.CRD_DIR.is_dir():
            t_crds = time.monotonic()
            installed = crds.install_crds(api, crds.chart_crds(), timeout_s=opts.ready_timeout_s)
            log(f"installed CRDs {', '.join(installed)} (Established in "
                f"{time.monotonic() - t_crds:.2f} s)")
        else:
            log(f"not installing the chart's CRDs: {crds.CRD_DIR} not found "
                "(`lab up` from a source checkout installs them)")
        if opts.dra:
            dra.check_served(api)
            classes = dra.install_device_classes(api)
            log(f"installed DeviceClasses {', '.join(classes)}")
        if not plugin:
            got = dra.install_share_policy(api)
            log(f"installed the gpu-fraction policy ({got})")
        log(f"creating {len(specs)} node(s) (node lease {liveness.lease_s} s"
            f"{'' if plugin else '; GPUs as DRA devices only'})")
        names = create_nodes(api, specs, device_plugin=plugin)
        if opts.dra:
            t_slices = time.monotonic()
            n_slices = dra.publish_slices(api, specs)
            log(f"published {n_slices} ResourceSlice(s) for the GPU nodes in "
                f"{time.monotonic() - t_slices:.1f} s")
        log(f"created {len(names)} node(s) at {time.monotonic() - t0:.1f} s; waiting for Ready")
        wait_nodes_ready(api, names, timeout_s=max(opts.ready_timeout_s, len(names) * 0.1))

        controller_state = "disabled"
        node = None
        if image is not None:
            node = real_node.start_node(d, kubeconfig, pki.ca.cert, api, start,
                                        timeout_s=max(opts.ready_timeout_s, 120.0), log=log)
            log(f"real node {node} Ready at {time.monotonic() - t0:.1f} s; importing {image}")
            ref = real_node.import_image(d, image)
            leader = release.install_for_lab(
                api, kubeconfig, server, node, ref,
                pod_logs=real_node.work_dir(d) / real_node.POD_LOGS,
                timeout_s=max(opts.ready_timeout_s, 120.0), log=log)
            controller_state = (f"in-cluster: chart {release.RELEASE} in {release.NAMESPACE}, "
                                f"leader {leader} on {node}")
            log(f"chart installed; {leader} leads at {time.monotonic() - t0:.1f} s")
        elif opts.controller:
            why = controller_command_available()
            if why is not None:
                controller_state = f"unavailable: {why}"
                log(f"not starting the gpufleet controller: {why}")
            else:
                argv = [
                    sys.executable,
                    "-m",
                    "gpufleet",
                    "controller",
                    "--kubeconfig",
                    str(kubeconfig),
                    "--bind-address",
                    "127.0.0.1",
                    "--port",
                    "0",
                ]
                if opts.controller_config is not None:
                    # a config turns on the capacity loop on the lab's cloud (kwok) unless
                    # it names another cloud itself
                    argv += ["--config", str(opts.controller_config.resolve()),
                             "--cloud", "kwok"]
                ctl = start("gpufleet-controller", argv, env={"PYTHONUNBUFFERED": "1"})
                port = processes.wait_own_port(
                    ctl,
                    lambda port: _http_ok(f"http://127.0.0.1:{port}/healthz"),
                    what="healthy (/healthz)",
                    timeout_s=opts.ready_timeout_s,
                    reported=CONTROLLER_SERVING,
                )
                controller_state = f"started (http://127.0.0.1:{port}/metrics)"
    except BaseException:
        if image is not None:
            real_node.stop_node(d)
        for r in reversed(started):
            processes.stop(r)
        raise

    info = LabInfo(
        directory=d,
        kubeconfig=kubeconfig,
        server=server,
        nodes=tuple(names),
        components=tuple(r.name for r in started),
        controller=controller_state,
        dra=opts.dra,
        real_node=node,
        device_plugin=plugin,
    )
    (d / STATE_FILE).write_text(json.dumps(info.to_json(), indent=2))
    log(f"lab up in {time.monotonic() - t0:.1f} s: {server}, {len(names)} node(s)")
    return info


def api_client(kubeconfig: Path, connections: int = 32) -> Any:
    """A ``kubernetes.client.ApiClient`` for the lab (admin credentials), with ``connections``
    pooled so that the benchmark's and tests' client threads reuse their TLS connections."""
    from kubernetes import config

    from gpufleet.k8s.watch.connections import client_with_pool

    return client_with_pool(config.new_client_from_config(config_file=str(kubeconfig)),
                            connections)


def _default_service_account(api: Any) -> bool:
    from kubernetes import client

    client.CoreV1Api(api).read_namespaced_service_account("default", "default")
    return True
