"""``gpufleet controller``: run the scheduler/controller against a cluster."""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer
from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException
from rich.console import Console

from gpufleet.cli_app import app, bench_app, friendly_errors
from gpufleet.collector import tune_collector
from gpufleet.config import CloudSettings
from gpufleet.errors import InputError
from gpufleet.k8s.schedule.controller import Controller
from gpufleet.k8s.settings import load_config
from gpufleet.optiontypes import FormatOption
from gpufleet.tables import DataTable, OutputFormat, print_tables

console = Console(stderr=True)
SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def api_client(kubeconfig: Path | None) -> client.ApiClient:
    """From ``--kubeconfig``, else in-cluster (service account), else $KUBECONFIG / ~/.kube."""
    try:
        if kubeconfig is not None:
            if not kubeconfig.is_file():
                raise InputError("kubeconfig file not found", path=kubeconfig)
            return config.new_client_from_config(config_file=str(kubeconfig))
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            cfg = client.Configuration()
            config.load_incluster_config(client_configuration=cfg)
            return client.ApiClient(cfg)
        return config.new_client_from_config()
    except ConfigException as exc:
        raise InputError(f"cannot use this kubeconfig: {exc}", path=kubeconfig) from None


def default_lease_namespace() -> str:
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        return SA_NAMESPACE.read_text().strip() or "kube-system"
    except OSError:
        return "kube-system"


@app.command("controller")
@friendly_errors
def controller(
    kubeconfig: Annotated[Path | None, typer.Option(
        help="Kubeconfig file (default: in-cluster service account, else $KUBECONFIG).")] = None,
    config_file: Annotated[Path | None, typer.Option(
        "--config", help="A simulator scenario file (same keys as `gpufleet simulate`).")] = None,
    port: Annotated[int, typer.Option(
        help="Port for /metrics, /healthz, /readyz (0: any free port).")] = 10260,
    bind_address: Annotated[str, typer.Option(help="Address the HTTP endpoints listen on.")] = (
        "127.0.0.1"),
    leader_elect: Annotated[bool, typer.Option(
        help="Act only while holding the Lease (run two replicas for failover).")] = True,
    lease_namespace: Annotated[str | None, typer.Option(
        help="Namespace of the Lease (default: the pod's, else kube-system).")] = None,
    lease_name: Annotated[str, typer.Option(help="Name of the Lease.")] = "gpufleet-scheduler",
    lease_duration: Annotated[float, typer.Option(help="Lease duration, seconds.")] = 15.0,
    renew_deadline: Annotated[float, typer.Option(
        help="Stop acting when no renewal succeeded for this long, seconds.")] = 10.0,
    retry_period: Annotated[float, typer.Option(help="Renew/acquire period, seconds.")] = 2.0,
    identity: Annotated[str | None, typer.Option(
        help="Holder identity in the Lease (default: host_pid).")] = None,
    log_level: Annotated[str, typer.Option(help="DEBUG, INFO, WARNING.")] = "INFO",
    cloud: Annotated[str | None, typer.Option(
        help="Run the capacity loop on this cloud (kwok: the lab's) when the config names "
        "none.")] = None,
    kube_api_qps: Annotated[float, typer.Option(
        help="Client-side limit on API writes a second, as client-go's --kube-api-qps "
             "(0: none).")] = 0.0,
    kube_api_burst: Annotated[int, typer.Option(help="Burst of that limit.")] = 1,
    cloud_config: Annotated[Path | None, typer.Option(
        help="With --cloud aws|aliyun: the provider's config file (docs/cloud.md).")] = None,
    queue_spend_interval: Annotated[float, typer.Option(
        help="Write a GpuQueue's status for a change of its spend alone at most this often, "
             "seconds (docs/teams.md).")] = 10.0,
) -> None:
    """Schedule pods with `spec.schedulerName: gpufleet` using gpufleet's policies."""
    logging.basicConfig(level=log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not (math.isfinite(kube_api_qps) and kube_api_qps >= 0):
        raise InputError(f"expected a finite number >= 0, got {kube_api_qps}",
                         field="--kube-api-qps")
    if not (math.isfinite(queue_spend_interval) and queue_spend_interval >= 0):
        raise InputError(f"expected a finite number >= 0, got {queue_spend_interval}",
                         field="--queue-spend-interval")
    if kube_api_burst < 1:
        raise InputError(f"expected a burst >= 1, got {kube_api_burst}", field="--kube-api-burst")
    scenario = load_config(config_file)
    if cloud is not None and scenario.cloud is None:
        if cloud not in ("kwok", "aws", "aliyun"):
            raise InputError(f"expected kwok, aws or aliyun, got {cloud!r}", field="--cloud")
        if cloud != "kwok" and cloud_config is None:
            raise InputError(f"--cloud {cloud} needs --cloud-config (the provider's config "
                             "file)", field="--cloud-config")
        settings = {cloud: str(cloud_config)} if cloud != "kwok" else {}
        scenario = scenario.model_copy(
            update={"cloud": CloudSettings.model_validate({"name": cloud, **settings})})
    if not retry_period < renew_deadline < lease_duration:
        raise InputError("expected retry-period < renew-deadline < lease-duration",
                         field="lease-duration")
    ctl = Controller(
        api_client(kubeconfig), scenario, identity=identity,
        lease_namespace=lease_namespace or default_lease_namespace(), lease_name=lease_name,
        leader_elect=leader_elect, lease_s=lease_duration, renew_deadline_s=renew_deadline,
        retry_s=retry_period, qps=kube_api_qps, burst=kube_api_burst,
        queue_spend_interval_s=queue_spend_interval,
    )
    stop = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    try:
        bound = ctl.serve_http(bind_address, port)
    except OSError as exc:
        raise InputError(f"cannot listen on {bind_address}:{port}: {exc.strerror}",
                         field="port") from None
    tune_collector()
    ctl.start()
    console.print(f"gpufleet controller {ctl.identity}: policy {ctl.policy.name}, "
                  f"http://{bind_address}:{bound}/metrics", highlight=False, soft_wrap=True)
    stop.wait()
    ctl.stop()


@bench_app.command("k8s-packing")
@friendly_errors
def bench_k8s_packing(
    scheduler: Annotated[list[str] | None, typer.Option(
        "--scheduler", help="gpufleet and/or kube-scheduler (default: both).")] = None,
    nodes: Annotated[Path | None, typer.Option(
        help="openb node CSV (default: shared data, GPU nodes).")] = None,
    pods: Annotated[Path | None, typer.Option(
        help="openb pod CSV (default: shared data, default pods).")] = None,
    limit: Annotated[int | None, typer.Option(help="Submit at most this many pods.")] = None,
    seed: Annotated[int, typer.Option(help="Arrival-order seed (packing protocol).")] = 42,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write results here.")] = None,
    dra: Annotated[bool, typer.Option(
        "--dra", help="Nodes as ResourceSlices, every GPU pod's GPUs as a ResourceClaim "
        "both schedulers allocate (Dynamic Resource Allocation).")] = False,
    fmt: FormatOption = OutputFormat.table,
) -> None:
    """gpufleet vs kube-scheduler binding openb pods on the real lab cluster (KWOK nodes)."""
    import json

    from gpufleet.k8s.bench_packing import SCHEDULERS, run_bench
    from gpufleet.lab.binaries import missing_reason
    from gpufleet.lab.errors import LabError
    from gpufleet.placement.cli import _default
    from gpufleet.traces.openb import load_nodes, load_pods

    chosen = scheduler or list(SCHEDULERS)
    bad = [s for s in chosen if s not in SCHEDULERS]
    if bad:
        raise InputError(f"unknown scheduler {bad[0]!r}; valid: {', '.join(SCHEDULERS)}",
                         field="--scheduler")
    if limit is not None and limit < 1:
        raise InputError("expected a positive number", field="--limit")
    node_rows = load_nodes(nodes or _default("openb_node_list_gpu_node.csv"))
    pod_reqs = [p.request for p in load_pods(pods or _default("openb_pod_list_default.csv"))]
    reason = missing_reason()
    if reason is not None:
        raise InputError(reason, field="lab binaries")
    try:
        out = run_bench(chosen, node_rows, pod_reqs, limit=limit, seed=seed,
                        log=lambda m: console.print(m, highlight=False), dra=dra)
    except LabError as exc:
        raise InputError(str(exc), field="lab") from None
    cols = (("pods_submitted", "submitted", "{}"), ("pods_bound", "bound", "{}"),
            ("unallocated_pct", "unallocated %", "{:.2f}"), ("pods_per_s", "pods/s", "{:.1f}"),
            ("latency_p50_s", "p50 s", "{:.3f}"), ("latency_p99_s", "p99 s", "{:.3f}"),
            ("overcommitted_gpus", "over-committed GPUs", "{}"))
    table = DataTable("k8s packing", ["scheduler", *(label for _, label, _ in cols)],
                      numeric=[False, *(True for _ in cols)],
                      caption=f"{out['nodes']} nodes, {out['gpus']} GPUs"
                      f"{' (DRA)' if dra else ''}, arrived GPU load {out['arrived_gpu_pct']} %, "
                      f"client qps/burst {out['client_qps']}/{out['client_burst']} for both")
    for r in out["results"]:
        table.add_row(r["scheduler"], *(f.format(r[k]) for k, _, f in cols),
                      values=[r["scheduler"], *(r[k] for k, _, _ in cols)])
    print_tables([table], fmt, Console())
    if json_out is not None:
        json_out.write_text(json.dumps(out, indent=2))
