"""Lab start-up at scale: how long ``gpufleet lab up`` takes until N openb GPU nodes are Ready.

The k8s-packing benchmark needs all 1,213 openb GPU nodes Ready through KWOK before it submits a
pod; this measures that step alone (control plane start, node creation, KWOK marking them Ready)
and, once they are, how many API writes per second KWOK keeps making to keep them alive (node
Lease renewals and status heartbeats), sampled from the API server's own request counters.
Needs the built Kubernetes binaries (``make k8s-binaries``) and the shared data.

Usage: ``python benchmarks/bench_lab_nodes.py [--nodes 1213] [--steady-s 30] [--timeout-s 600]``
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

from gpufleet.datapaths import data_dir
from gpufleet.k8s.translate.node_objects import spec_from_openb
from gpufleet.lab.binaries import missing_reason
from gpufleet.lab.cluster import LabOptions, api_client, down, up
from gpufleet.traces.openb import load_nodes

WRITE = re.compile(
    r'^apiserver_request_total\{.*?resource="(leases|nodes)".*?verb="(PATCH|PUT|UPDATE|POST)"'
    r'.*?\} (\S+)$', re.M)


def kwok_writes(api: object) -> dict[str, float]:
    """Writes to Leases and Nodes so far, from the API server's /metrics (all clients)."""
    resp = api.call_api("/metrics", "GET",  # type: ignore[attr-defined]
                        _preload_content=False, _return_http_data_only=True)
    out: dict[str, float] = {}
    for res, _verb, val in WRITE.findall(resp.data.decode()):
        out[res] = out.get(res, 0.0) + float(val)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1213, help="first N openb GPU nodes")
    ap.add_argument("--steady-s", type=float, default=30.0,
                    help="seconds to sample KWOK's keep-alive writes once Ready")
    ap.add_argument("--timeout-s", type=float, default=600.0)
    args = ap.parse_args()
    why = missing_reason()
    base = data_dir(required=False)
    if why is not None or base is None:
        print(f"nothing to measure: {why or 'shared data absent (set GPUFLEET_DATA)'}")
        return 0
    rows = load_nodes(base / "openb" / "openb_node_list_gpu_node.csv")[: args.nodes]
    specs = [spec_from_openb(n) for n in rows]
    print(f"load before: {os.getloadavg()[0]:.2f} (1-min), {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="gpufleet-bench-lab-") as tmp:
        d = Path(tmp)
        t0 = time.monotonic()
        marks: list[tuple[str, float]] = []

        def log(msg: str) -> None:
            marks.append((msg, time.monotonic() - t0))
            print(f"  {time.monotonic() - t0:7.1f} s  {msg}", flush=True)

        try:
            # classic (no ResourceSlices): the node start-up this benchmark has always timed
            info = up(LabOptions(directory=d, nodes=specs, controller=False, dra=False,
                                 ready_timeout_s=args.timeout_s), log=log)
            ready = time.monotonic() - t0
            api = api_client(info.kubeconfig)
            w0, s0 = kwok_writes(api), time.monotonic()
            time.sleep(args.steady_s)
            w1, s1 = kwok_writes(api), time.monotonic()
            rate = {k: (w1.get(k, 0.0) - w0.get(k, 0.0)) / (s1 - s0) for k in ("leases", "nodes")}
        finally:
            down(d)
    created = next((t for m, t in marks if m.startswith("creating")), 0.0)
    print(f"{len(specs)} nodes: lab up (all Ready) in {ready:.1f} s; nodes Ready "
          f"{ready - created:.1f} s after their creation began")
    print(f"steady state writes/s: leases {rate['leases']:.1f}, nodes {rate['nodes']:.1f} "
          f"(load now {os.getloadavg()[0]:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
