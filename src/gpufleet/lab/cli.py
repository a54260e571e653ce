"""``gpufleet lab up|down|status``: the local Kubernetes lab (see :mod:`gpufleet.lab.cluster`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from gpufleet.cli_app import app, friendly_errors
from gpufleet.errors import InputError
from gpufleet.lab.cluster import (
    LabOptions,
    api_client,
    down,
    load_info,
    running_components,
    up,
)
from gpufleet.lab.errors import LabError
from gpufleet.lab.fleet import parse_nodes_option

DEFAULT_DIR = Path(".gpufleet-lab")

lab_app = typer.Typer(
    help="A real local Kubernetes control plane with fake GPU nodes (KWOK).",
    no_args_is_help=True,
)
app.add_typer(lab_app, name="lab")

_err = Console(stderr=True, highlight=False, soft_wrap=True)

DirOption = Annotated[
    Path,
    typer.Option("--dir", help="State directory: certificates, kubeconfig, data, logs, pids."),
]


def _fail(exc: LabError) -> typer.Exit:
    _err.print(f"[bold red]error:[/] {exc}")
    return typer.Exit(code=1)


@lab_app.command("up")
@friendly_errors
def lab_up(
    directory: DirOption = DEFAULT_DIR,
    nodes: Annotated[
        str | None,
        typer.Option(
            "--nodes",
            help="N nodes of the default type, or an openb-style node CSV "
            "(default: a small mixed fleet of A100-MIG, V100 and T4 nodes).",
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", help="Controller configuration (simulator scenario keys)."),
    ] = None,
    no_controller: Annotated[
        bool, typer.Option("--no-controller", help="Do not start the gpufleet controller.")
    ] = False,
    kube_scheduler: Annotated[
        bool, typer.Option("--kube-scheduler", help="Also run the stock kube-scheduler.")
    ] = False,
    classic: Annotated[
        bool,
        typer.Option(
            "--classic",
            help="No DRA inventory: GPUs only as Node labels and extended resources "
            "(default: also NVIDIA's DeviceClasses and a ResourceSlice pool per GPU node).",
        ),
    ] = False,
    device_plugin: Annotated[
        bool,
        typer.Option(
            "--device-plugin",
            help="With DRA: the GPU nodes also advertise nvidia.com/gpu (the device plugin's "
            "resource) — a mixed fleet no real node is, to try both paths side by side "
            "(default: GPUs as DRA devices only, nvidia.com/gpu through extended-resource "
            "claims, the gpu-fraction policy installed).",
        ),
    ] = False,
    real_node: Annotated[
        bool,
        typer.Option(
            "--real-node",
            help="Also a real node (containerd + runc + a kubelet; needs root) running the "
            "chart's controller and agent as pods, instead of the controller process.",
        ),
    ] = False,
    image: Annotated[
        Path | None,
        typer.Option("--image", help="With --real-node: the OCI archive to run "
                     "(default: `make image`'s, built if needed)."),
    ] = None,
) -> None:
    """Start the lab; the kubeconfig path is the last line printed."""
    if config is not None and not config.is_file():
        raise InputError("file not found", path=config, field="--config")
    if image is not None and not real_node:
        raise InputError("--image needs --real-node", field="--image")
    if image is not None and not image.is_file():
        raise InputError("file not found", path=image, field="--image")
    if real_node and config is not None:
        raise InputError("--config is the process controller's; with --real-node the chart's "
                         "`config:` value configures the controller", field="--config")
    if device_plugin and classic:
        raise InputError("--device-plugin is for a DRA lab; --classic has the device plugin's "
                         "resources only", field="--device-plugin")
    specs = parse_nodes_option(nodes) if nodes else None
    try:
        info = up(
            LabOptions(
                directory=directory,
                nodes=specs,
                controller=not no_controller,
                controller_config=config,
                kube_scheduler=kube_scheduler,
                dra=not classic,
                device_plugin=device_plugin,
                real_node=real_node,
                image=image,
            ),
            log=lambda m: _err.print(f"[dim]lab:[/] {m}"),
        )
    except LabError as exc:
        raise _fail(exc) from None
    typer.echo(f"API server: {info.server}")
    typer.echo(f"nodes: {len(info.nodes)}; components: {', '.join(info.components)}")
    typer.echo(f"gpufleet controller: {info.controller}")
    typer.echo("DRA inventory: " + ("off (--classic)" if not info.dra else
                                     "ResourceSlices published and nvidia.com/gpu (mixed)"
                                     if info.device_plugin else
                                     "ResourceSlices only (GPUs as devices)"))
    if info.real_node:
        typer.echo(f"real node: {info.real_node} (containerd + kubelet; chart's pods on it)")
    typer.echo(f"logs: {info.directory / 'logs'}")
    typer.echo(str(info.kubeconfig))


@lab_app.command("down")
@friendly_errors
def lab_down(directory: DirOption = DEFAULT_DIR) -> None:
    """Stop everything `lab up` started in DIR (safe to repeat)."""
    try:
        stopped = down(directory, log=lambda m: _err.print(f"[dim]lab:[/] {m}"))
    except LabError as exc:
        raise _fail(exc) from None
    typer.echo(f"stopped: {', '.join(stopped) if stopped else 'nothing was running'}")


@lab_app.command("status")
@friendly_errors
def lab_status(directory: DirOption = DEFAULT_DIR) -> None:
    """Which lab components run in DIR, as JSON."""
    info = load_info(directory)
    live = [r.name for r in running_components(directory.resolve())]
    out = {"running": live, **(info.to_json() if info else {})}
    typer.echo(json.dumps(out, indent=2))
    if not live:
        raise typer.Exit(code=3)


@lab_app.command("check")
@friendly_errors
def lab_check(directory: DirOption = DEFAULT_DIR) -> None:
    """The kubelet stand-in: every bound pod's claims exist, are allocated and reserved for it,
    on its node, with devices that exist and are not over-committed (exit 1 on any finding)."""
    from gpufleet.lab.kubelet_check import check_cluster

    info = load_info(directory)
    if info is None or not running_components(directory.resolve()):
        raise _fail(LabError(f"no lab is running in {directory} (gpufleet lab up --dir ...)"))
    report = check_cluster(api_client(info.kubeconfig))
    for line in report.lines():
        typer.echo(line)
    typer.echo(f"checked {report.pods_checked} bound pod(s), {report.claims_checked} "
               f"ResourceClaim(s): {'ok' if report.ok else f'{len(report.lines())} finding(s)'}")
    if not report.ok:
        raise typer.Exit(code=1)
