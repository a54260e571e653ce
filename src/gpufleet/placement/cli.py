"""``gpufleet bench packing``: the FGD paper's openb packing benchmark."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gpufleet.cli_app import bench_app, friendly_errors
from gpufleet.datapaths import data_dir
from gpufleet.errors import InputError, MissingDataError
from gpufleet.placement.registry import DEFAULT_POLICY, describe_policies, list_policies

console = Console()

BASELINES = ["random", "dotprod", "gpuclustering", "gpupacking", "bestfit", "fgd"]


def parse_seeds(text: str) -> list[int]:
    """``42-51`` or ``42,43,50``."""
    out: list[int] = []
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part:
                lo, hi = part.split("-", 1)
                if int(hi) < int(lo):
                    raise ValueError
                out.extend(range(int(lo), int(hi) + 1))
            elif part:
                out.append(int(part))
    except ValueError:
        raise InputError(
            f"expected seeds like 42-51 or 42,43, got {text!r}", field="--seeds"
        ) from None
    if not out:
        raise InputError("no seeds given", field="--seeds")
    return out


def parse_loads(text: str) -> list[int]:
    try:
        loads = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(
            f"expected loads like 100,110,120,130, got {text!r}", field="--loads"
        ) from None
    if not loads or any(x <= 0 or x > 1000 for x in loads):
        raise InputError(f"loads must be percentages in 1..1000, got {text!r}", field="--loads")
    return sorted(set(loads))


def _default(name: str) -> Path:
    base = data_dir(required=False)
    if base is None:
        raise MissingDataError(
            f"openb data not found: pass --nodes/--pods or set GPUFLEET_DATA (need openb/{name})"
        )
    return base / "openb" / name


@bench_app.command("packing")
@friendly_errors
def packing(
    policy: Annotated[
        list[str] | None,
        typer.Option(
            "--policy",
            "-p",
            help="Policy to run (repeatable). Default: the six "
            f"published baselines and ours ({DEFAULT_POLICY}).",
        ),
    ] = None,
    seeds: Annotated[str, typer.Option(help="Seeds, e.g. 42-51 or 42,45.")] = "42-51",
    loads: Annotated[
        str, typer.Option(help="Arrived loads (% of GPU capacity) to report.")
    ] = "100,110,120,130",
    nodes: Annotated[
        Path | None, typer.Option(help="openb node CSV (default: shared data).")
    ] = None,
    pods: Annotated[Path | None, typer.Option(help="openb pod CSV (default: shared data).")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write results as JSON.")] = None,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Write allocation curves (PNG).")
    ] = None,
    html_out: Annotated[
        Path | None, typer.Option("--html", help="Write table + curves (HTML).")
    ] = None,
    limit: Annotated[
        int | None, typer.Option(help="Only the first N pods of each seed (smoke runs).")
    ] = None,
    list_only: Annotated[
        bool, typer.Option("--list-policies", help="List policy names and exit.")
    ] = False,
) -> None:
    """Fill the 1,213-node openb cluster to 130% of its GPUs, per the FGD paper's protocol, and
    compare median unallocated GPU % with the published figures."""
    from gpufleet.placement.bench import report
    from gpufleet.placement.bench.protocol import run_seed
    from gpufleet.placement.bench.published import published_curves
    from gpufleet.placement.typical import typical_tasks_from
    from gpufleet.traces.openb import load_nodes, load_pods

    if list_only:
        t = Table(title="placement policies")
        t.add_column("name")
        t.add_column("what")
        t.add_column("published baseline")
        for name, summary, published in describe_policies():
            mark = " (default)" if name == DEFAULT_POLICY else ""
            t.add_row(name + mark, summary, "yes" if published else "")
        console.print(t)
        return
    names = policy or [*BASELINES, DEFAULT_POLICY]
    valid = list_policies()
    for name in names:
        if name not in valid:
            raise InputError(
                f"unknown placement policy {name!r}; valid: {', '.join(valid)}", field="--policy"
            )
    seed_list, load_list = parse_seeds(seeds), parse_loads(loads)
    if limit is not None and limit <= 0:
        raise InputError(f"--limit must be positive, got {limit}", field="--limit")
    node_path, pod_path = (
        nodes or _default("openb_node_list_gpu_node.csv"),
        pods or _default("openb_pod_list_default.csv"),
    )
    for p in (node_path, pod_path):
        if not p.exists():
            raise MissingDataError(f"data file {p} is missing", path=p)
    node_list = load_nodes(node_path)
    requests = [p.request for p in load_pods(pod_path)]
    typical = typical_tasks_from(requests)
    capacity = sum(n.num_gpu for n in node_list) * 1000
    est = int(
        sum(r.total_gpu_milli for r in requests)
        and max(load_list)
        / 100
        * capacity
        / (sum(r.total_gpu_milli for r in requests) / len(requests))
    )
    per_run = min(limit, est) if limit else est
    results = []
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as progress:
        task = progress.add_task("placing pods", total=per_run * len(names) * len(seed_list))
        for name in names:
            for seed in seed_list:
                progress.update(task, description=f"{name} seed {seed}")
                results.append(
                    run_seed(
                        name,
                        node_list,
                        requests,
                        seed,
                        load_list,
                        typical=typical,
                        limit=limit,
                        on_progress=lambda k: progress.advance(task, k),
                    )
                )
    console.print(report.table(results, load_list))
    if json_out:
        report.write_json(json_out, results, load_list)
        console.print(f"wrote {json_out}")
    if plot or html_out:
        base = data_dir(required=False)
        curves = (
            published_curves(base / "fgd-expected" / "openb_default_allocation_by_seed.csv")
            if base
            else {}
        )
        png = report.plot_png(results, curves)
        if plot:
            plot.write_bytes(png)
            console.print(f"wrote {plot}")
        if html_out:
            report.write_html(html_out, results, load_list, png)
            console.print(f"wrote {html_out}")
