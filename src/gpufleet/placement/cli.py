"""``gpufleet bench packing``: the FGD paper's openb packing benchmark."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from gpufleet.cli_app import bench_app, friendly_errors
from gpufleet.datapaths import data_dir
from gpufleet.errors import InputError, MissingDataError
from gpufleet.optiontypes import FormatOption
from gpufleet.optiontypes import parse_seeds as seed_list
from gpufleet.outputpaths import with_parent, writable_file
from gpufleet.placement.registry import DEFAULT_POLICY, describe_policies, list_policies
from gpufleet.tables import DataTable, OutputFormat, print_tables

console = Console()
err_console = Console(stderr=True)

# arrivals per seed: openb fills its 6,212 GPUs to 130% in ~11,500; a run of millions is a
# mistaken input (a fleet of huge nodes, pods of 1 milli-GPU), not a benchmark
MAX_ARRIVALS = 2_000_000

BASELINES = ["random", "dotprod", "gpuclustering", "gpupacking", "bestfit", "fgd"]


MAX_SEEDS = 1000  # one seed is a full 1,213-node packing run: 1,000 is days of work already


def parse_seeds(text: str) -> list[int]:
    """``42-51`` or ``42,43,50``: at most MAX_SEEDS seeds, each in 0..MAX_SEED
    (``optiontypes.parse_seeds``)."""
    return seed_list(text, MAX_SEEDS)


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
    fmt: FormatOption = OutputFormat.table,
) -> None:
    """Fill the 1,213-node openb cluster to 130% of its GPUs, per the FGD paper's protocol, and
    compare median unallocated GPU % with the published figures."""
    from gpufleet.placement.bench import report
    from gpufleet.placement.bench.protocol import run_seed
    from gpufleet.placement.bench.published import published_curves
    from gpufleet.placement.typical import typical_tasks_from
    from gpufleet.traces.openb import load_nodes, load_pods

    if list_only:
        t = DataTable("placement policies", ["name", "what", "published baseline"])
        for name, summary, published in describe_policies():
            mark = " (default)" if name == DEFAULT_POLICY else ""
            t.add_row(name + mark, summary, "yes" if published else "")
        print_tables([t], fmt, console)
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
    # Outputs before the work: an unwritable path must not cost a full benchmark run.
    for path, option in ((json_out, "--json"), (plot, "--plot"), (html_out, "--html")):
        if path is not None:
            writable_file(path, option)
    node_path, pod_path = (
        nodes or _default("openb_node_list_gpu_node.csv"),
        pods or _default("openb_pod_list_default.csv"),
    )
    for p in (node_path, pod_path):
        if not p.exists():
            raise MissingDataError(f"data file {p} is missing", path=p)
    node_list = load_nodes(node_path)
    requests = [p.request for p in load_pods(pod_path)]
    capacity = sum(n.num_gpu for n in node_list) * 1000
    asked = sum(r.total_gpu_milli for r in requests)
    if capacity == 0:
        raise InputError("no node has a GPU; the benchmark fills GPU capacity", path=node_path,
                         field="gpu")
    if asked == 0:
        raise InputError("no pod asks for a GPU; the benchmark fills GPU capacity",
                         path=pod_path, field="num_gpu")
    est = int(max(load_list) / 100 * capacity / (asked / len(requests)))
    if est > MAX_ARRIVALS:
        raise InputError(
            f"filling {capacity // 1000:,} GPUs to {max(load_list)}% with pods of "
            f"{asked / len(requests):.0f} milli-GPU on average takes ~{est:,} arrivals per seed; "
            f"at most {MAX_ARRIVALS:,} (fewer nodes, or larger pods)",
            path=pod_path,
        )
    typical = typical_tasks_from(requests)
    per_run = min(limit, est) if limit else est
    results = []
    info = console if fmt is OutputFormat.table else err_console  # stdout: the document alone
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=info,
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
    print_tables([report.table(results, load_list)], fmt, console)
    if json_out:
        report.write_json(with_parent(json_out), results, load_list)
        info.print(f"wrote {json_out}")
    if plot or html_out:
        base = data_dir(required=False)
        curves = (
            published_curves(base / "fgd-expected" / "openb_default_allocation_by_seed.csv")
            if base
            else {}
        )
        png = report.plot_png(results, curves)
        if plot:
            with_parent(plot).write_bytes(png)
            info.print(f"wrote {plot}")
        if html_out:
            report.write_html(with_parent(html_out), results, load_list, png)
            info.print(f"wrote {html_out}")
