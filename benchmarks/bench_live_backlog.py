"""Whether a long queue of pods that cannot fit slows the live controller for the pods that can.

For each backlog size N (``--backlog``, default 0, 1,000 and 10,000) a fresh lab (kine,
kube-apiserver, kube-controller-manager, KWOK; device-plugin GPUs, no ResourceSlices) gets
``--nodes`` uniform nodes (``lab.fleet.uniform_fleet``: p3.8xlarge, 4 V100 each; an openb node
CSV such as ``../shared/data/openb/openb_node_list_gpu_node.csv``: the 1,213-node fleet of
``gpufleet bench k8s-packing``) and ``gpufleet controller`` as its own process (as
``gpufleet bench k8s-packing`` starts it: its CPU is its own). Then:

1. *fill*: one 1-GPU pod per GPU (every GPU taken), until all are bound and Running (KWOK's
   status writes done: the stream is not timed against them, whatever the backlog);
2. *backlog*: N pods asking 2 GPUs each, created by 16 threads; the run waits until every one
   is marked ``PodScheduled=False`` (the controller wrote its refusal);
3. *free room*: one filler deleted on each of ``--new`` nodes (one GPU free there, never two
   on a node: the backlog still fits nowhere), and a short settle;
4. *stream*: ``--new`` 1-GPU pods, one every ``--interval`` seconds — each fits.

Measured over the stream (from its first create to its last bind): create→bound p50/p99 of the
new pods (client-side clock: create returned → the watch saw ``nodeName``), the controller's
scheduling cycles in the window (``gpufleet_scheduling_cycle_duration_seconds``'s count), their
mean duration (its sum / count) and the controller process's CPU per cycle (``/proc``'s utime +
stime over the window / cycles). The product's aim: with 10,000 pending, the new pods' p50 and
p99 within 1.5× of the empty queue's. ``ratio`` columns compare each row with the N = 0 row.

Usage::

    .venv/bin/python benchmarks/bench_live_backlog.py [--backlog 0,1000,10000] [--nodes 64]
        [--new 50] [--interval 0.25] [--format table|json|csv|markdown]

Progress goes to stderr; the table to stdout. A run with the defaults takes a few minutes
(most of it creating the 10,000 pods and waiting for their refusals). Not part of ``make test``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from gpufleet.k8s.bench_packing import PodWatch, pod_manifest, start_controller, wait_sa
from gpufleet.k8s.translate.node_objects import GpuNodeSpec
from gpufleet.k8s.watch.connections import release
from gpufleet.lab.cluster import (
    LabOptions,
    api_client,
    down,
    up,
)
from gpufleet.lab.fleet import parse_nodes_option
from gpufleet.state import GPU_MILLI, ResourceRequest
from gpufleet.tables import DataTable, OutputFormat, print_tables

NS = "bench"
FILL = ResourceRequest(cpu_milli=100, memory_mib=128, num_gpu=1, gpu_milli=GPU_MILLI)
BACKLOG = ResourceRequest(cpu_milli=100, memory_mib=128, num_gpu=2, gpu_milli=GPU_MILLI)
NEW = FILL


@dataclass(frozen=True)
class Row:
    backlog: int
    new_bound: int
    p50_s: float
    p99_s: float
    cycles: int
    cycle_mean_ms: float
    cpu_per_cycle_ms: float
    cpu_s: float  # the controller's CPU over the whole stream
    refusal_wait_s: float  # backlog created → every backlog pod refused


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def cpu_s(pid: int) -> float:
    """The process's user + system CPU seconds (``/proc/PID/stat`` fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cycle_metric(port: int) -> tuple[float, float]:
    """(count, sum) of the controller's cycle-duration histogram."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    got = {}
    for name in ("count", "sum"):
        m = re.search(rf"^gpufleet_scheduling_cycle_duration_seconds_{name} (\S+)$", text, re.M)
        got[name] = float(m.group(1)) if m else 0.0
    return got["count"], got["sum"]


def wait_until(what: str, done: Callable[[], bool], timeout_s: float) -> None:
    end = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > end:
            raise TimeoutError(f"gave up after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.2)


def run_one(nodes: Sequence[GpuNodeSpec], backlog: int, new: int, interval_s: float) -> Row:
    from kubernetes import client

    gpus = sum(n.gpus for n in nodes)
    if new > sum(1 for n in nodes if n.gpus >= 2):
        raise SystemExit(f"--new {new}: needs as many nodes with 2+ GPUs (one GPU freed on each)")
    with tempfile.TemporaryDirectory(prefix="gpufleet-bench-backlog-") as tmp:
        d = Path(tmp)
        log(f"N={backlog}: starting the lab with {len(nodes)} nodes ({gpus} GPUs)")
        info = up(LabOptions(directory=d, nodes=nodes, controller=False, dra=False,
                             ready_timeout_s=300.0))
        try:
            api = api_client(info.kubeconfig, connections=32)
            core = client.CoreV1Api(api)
            core.create_namespace({"metadata": {"name": NS}})
            wait_sa(core, NS)
            proc, port = start_controller(d, info.kubeconfig, timeout_s=180.0)
            watch = PodWatch(core, NS)
            watch.thread.start()
            created: dict[str, float] = {}

            def create(name: str, req: ResourceRequest) -> None:
                release(core.create_namespaced_pod(NS, pod_manifest(name, req, "gpufleet"),
                                                   _preload_content=False))
                created[name] = time.monotonic()

            def create_all(names: Sequence[str], req: ResourceRequest) -> None:
                with ThreadPoolExecutor(16) as pool:
                    list(pool.map(lambda n: create(n, req), names))

            fill = [f"fill-{i:05d}" for i in range(gpus)]
            log(f"N={backlog}: filling {gpus} GPUs")
            create_all(fill, FILL)
            wait_until("the fillers bound", lambda: all(n in watch.bound_at for n in fill),
                       300 + gpus / 10)
            # and Running: KWOK's status writes for thousands of pods are a stream of watch
            # events the controller answers; the stream is not timed against them
            wait_until("the fillers Running", lambda: all(n in watch.running for n in fill),
                       300 + gpus / 10)
            names = [f"backlog-{i:05d}" for i in range(backlog)]
            t0 = time.monotonic()
            if names:
                log(f"N={backlog}: creating the backlog")
                create_all(names, BACKLOG)
                log(f"N={backlog}: created in {time.monotonic() - t0:.0f} s; waiting for "
                    "every refusal")
                wait_until("every backlog pod refused",
                           lambda: len(watch.refused) >= backlog, 300 + backlog / 10)
            refusal_wait = time.monotonic() - t0
            # one filler off each of ``new`` nodes: one free GPU there, never two on a node
            on_node: dict[str, str] = {}
            for pod in core.list_namespaced_pod(NS, label_selector="", _request_timeout=120,
                                                field_selector="status.phase!=Succeeded").items:
                if pod.metadata.name.startswith("fill-") and pod.spec.node_name:
                    on_node.setdefault(pod.spec.node_name, pod.metadata.name)
            victims = sorted(on_node.values())[:new]
            log(f"N={backlog}: freeing {len(victims)} GPUs")
            for v in victims:
                core.delete_namespaced_pod(v, NS, grace_period_seconds=0)
            time.sleep(5)  # the deletions' events and the pass they wake settle
            stream = [f"new-{i:03d}" for i in range(new)]
            c0, s0 = cycle_metric(port)
            cpu0 = cpu_s(proc.pid)
            log(f"N={backlog}: streaming {new} pods, one every {interval_s} s")
            for n in stream:
                create(n, NEW)
                time.sleep(interval_s)
            wait_until("the new pods bound", lambda: all(n in watch.bound_at for n in stream),
                       120)
            cpu1 = cpu_s(proc.pid)
            c1, s1 = cycle_metric(port)
            watch.stop.set()
        finally:
            down(d)
    lat = np.array([watch.bound_at[n] - created[n] for n in stream])
    cycles = int(c1 - c0)
    return Row(backlog, len(lat), round(float(np.percentile(lat, 50)), 3),
               round(float(np.percentile(lat, 99)), 3), cycles,
               round(1000 * (s1 - s0) / max(cycles, 1), 1),
               round(1000 * (cpu1 - cpu0) / max(cycles, 1), 1), round(cpu1 - cpu0, 2),
               round(refusal_wait, 1))


def table(rows: Sequence[Row], nodes: int) -> DataTable:
    t = DataTable(
        f"live controller: new pods' create→bound with N pending that cannot fit ({nodes} nodes)",
        ["backlog N", "new bound", "p50 s", "p99 s", "p50 ratio", "p99 ratio", "cycles",
         "cycle mean ms", "CPU/cycle ms", "CPU s", "refusals written s"],
        numeric=[True] * 11,
        caption="ratio: vs the N = 0 row (the aim: ≤ 1.5 at 10,000); CPU/cycle: the controller "
                "process's CPU over the stream / the cycles it ran (cycles with pods pending: with "
                "an empty queue only the new pods' own); CPU s: over the whole stream")
    base = next((r for r in rows if r.backlog == 0), None)
    for r in rows:
        p50r = r.p50_s / base.p50_s if base and base.p50_s else float("nan")
        p99r = r.p99_s / base.p99_s if base and base.p99_s else float("nan")
        cells: list[Any] = [r.backlog, r.new_bound, r.p50_s, r.p99_s, round(p50r, 2),
                            round(p99r, 2), r.cycles, r.cycle_mean_ms, r.cpu_per_cycle_ms,
                            r.cpu_s, r.refusal_wait_s]
        t.add_row(*(f"{c:,}" if isinstance(c, int) else f"{c}" for c in cells), values=cells)
    return t


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backlog", default="0,1000,10000",
                    help="comma-separated pending-pod counts (default 0,1000,10000)")
    ap.add_argument("--nodes", default="64",
                    help="node count (uniform p3.8xlarge), '' for the default fleet, or an "
                         "openb node CSV (default 64)")
    ap.add_argument("--new", type=int, default=50, help="pods streamed that fit (default 50)")
    ap.add_argument("--interval", type=float, default=0.25,
                    help="seconds between the streamed pods (default 0.25)")
    ap.add_argument("--format", default="table", choices=[f.value for f in OutputFormat])
    a = ap.parse_args(argv)
    try:
        sizes = [int(x) for x in a.backlog.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(
            f"--backlog: expected comma-separated integers, got {a.backlog!r}") from None
    if not sizes or any(s < 0 for s in sizes):
        raise SystemExit(f"--backlog: expected counts >= 0, got {a.backlog!r}")
    if a.new < 1 or a.interval < 0:
        raise SystemExit("--new must be >= 1 and --interval >= 0")
    nodes = parse_nodes_option(a.nodes)
    rows = [run_one(nodes, n, a.new, a.interval) for n in sizes]
    print_tables([table(rows, len(nodes))], OutputFormat(a.format), Console())


if __name__ == "__main__":
    main()
