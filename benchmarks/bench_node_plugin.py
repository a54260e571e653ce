"""``gpufleet node-plugin``: NodePrepareResources / NodeUnprepareResources latency and memory.

What the kubelet waits for before it starts a pod's containers (prepare) and after it stops them
(unprepare), measured as the kubelet sees it: a gRPC client of the kubelet's own stubs
(``gpufleet.node_plugin.protos``) on the plugin's real ``dra.sock``, one long-lived channel.

Setup: a lab (kine, kube-apiserver, kube-controller-manager, KWOK; two KWOK nodes, no
controller, no NVIDIA slices) and ``gpufleet node-plugin`` as its own process for the first
node, with a device file of ``max(4, ceil(N / 50))`` fake 80 GiB GPUs and temporary directories
for its sockets, CDI specs and checkpoint. N ResourceClaims (``--claims``, default 200) are
created and allocated by hand as a scheduler writes it (``status.allocation``: driver
``gpu.gpufleet.io``, pool = the node, a ``shareID`` and ``consumedCapacity`` of 1,600 MiB and
2 % of the cores), at most 50 shares a GPU, so the plugin's per-GPU sum check admits every one.
Then, each step checked (no claim refused, N CDI specs and N checkpoint entries after a
prepare, none after an unprepare):

1. *single*: one NodePrepareResources call per claim (as for a pod with one claim: the plugin
   reads the claim from the API server, writes its CDI spec and the checkpoint), then each
   claim again (the kubelet's retry: already prepared, no API read), then one
   NodeUnprepareResources call per claim;
2. *callers*: the same, one claim a call, from ``--callers`` threads at once (default 4: the
   kubelet's pod workers run per pod, so calls for different pods can overlap; the plugin
   serves 4 calls at a time);
3. *batch*: ``--batch-rounds`` times (default 3), one NodePrepareResources call with all N
   claims (the API allows several claims a request) and one NodeUnprepareResources call with
   all N.

Reported: p50 / p99 / max of the calls' latency and the step's wall time per claim; the plugin
process's memory from ``/proc/<pid>/status`` (VmRSS when idle, with N claims prepared and at the
end; VmHWM, its peak) and its CPU seconds.

Usage::

    .venv/bin/python benchmarks/bench_node_plugin.py [--claims 200] [--callers 4]
        [--batch-rounds 3] [--format table|json|csv|markdown]

Progress goes to stderr; the tables to stdout. The lab is torn down at the end, also on error.
The defaults take about 40 s on a loaded 2-core machine (lab start, claims, then about 30 s of
calls). Not part of ``make test``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from rich.console import Console

from gpufleet.lab import processes
from gpufleet.lab.cluster import LabOptions, api_client, down, up
from gpufleet.lab.fleet import uniform_fleet
from gpufleet.node_plugin import DRIVER, protos
from gpufleet.tables import DataTable, OutputFormat, print_tables

NS = "bench-node-plugin"
CLASS = "gpufleet-gpu-share"
SHARES_PER_GPU = 50
SHARE_MEMORY = "1600Mi"  # 50 × 1,600 MiB = 80,000 MiB ≤ 81,920 MiB
SHARE_CORES = "2"  # 50 × 2 % = 100 %
GPU_MEMORY_MIB = 81920
CALL_TIMEOUT_S = 120.0


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def proc_status(pid: int) -> dict[str, int]:
    """``VmRSS`` and ``VmHWM`` of ``/proc/PID/status``, in KiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def cpu_s(pid: int) -> float:
    """The process's user + system CPU seconds (``/proc/PID/stat`` fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_until(what: str, done: Callable[[], bool], timeout_s: float,
               alive: Callable[[], bool] = lambda: True) -> None:
    end = time.monotonic() + timeout_s
    while not done():
        if not alive():
            raise RuntimeError(f"the plugin exited while waiting for {what}")
        if time.monotonic() > end:
            raise TimeoutError(f"gave up after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.1)


def gpus(count: int) -> list[dict[str, Any]]:
    return [{"uuid": f"GPU-{i:08x}-0000-0000-0000-000000000000", "index": i, "minor": i,
             "product": "NVIDIA H100 80GB HBM3", "memoryMiB": GPU_MEMORY_MIB}
            for i in range(count)]


def claim_manifest(name: str) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": CLASS, "count": 1,
                "capacity": {"requests": {"memory": SHARE_MEMORY, "cores": SHARE_CORES}}}}]}}}


def allocate(custom: Any, node: str, name: str, device: str) -> dict[str, Any]:
    """Create claim ``name`` and write its allocation (a share of ``device`` on ``node``) as a
    scheduler writes it; the claim as the API server returned it."""
    claim = custom.create_namespaced_custom_object(
        "resource.k8s.io", "v1", NS, "resourceclaims", claim_manifest(name))
    claim["status"] = {"allocation": {
        "devices": {"results": [{
            "request": "gpu", "driver": DRIVER, "pool": node, "device": device,
            "shareID": str(uuid.uuid4()),
            "consumedCapacity": {"memory": SHARE_MEMORY, "cores": SHARE_CORES}}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{
            "key": "metadata.name", "operator": "In", "values": [node]}]}]},
    }}
    return dict(custom.replace_namespaced_custom_object_status(
        "resource.k8s.io", "v1", NS, "resourceclaims", name, claim))


@dataclass(frozen=True)
class Timing:
    call: str
    claims_per_call: int
    seconds: list[float]  # one per call
    wall_s: float  # the whole step


def timed(call: str, claims_per_call: int, calls: Callable[[], list[float]]) -> Timing:
    t0 = time.perf_counter()
    seconds = calls()
    return Timing(call, claims_per_call, seconds, time.perf_counter() - t0)


@dataclass(frozen=True)
class Memory:
    idle_kib: int
    prepared_kib: int
    end_kib: int
    peak_kib: int
    cpu_s: float


class Kubelet:
    """The kubelet's side of ``dra.sock``: one channel, the generated DRAPlugin stub."""

    def __init__(self, stubs: protos.Stubs, sock: Path) -> None:
        self.pb = stubs.dra
        self.channel = grpc.insecure_channel(f"unix://{sock}")
        self.stub = stubs.dra_grpc.DRAPluginStub(self.channel)

    def _claims(self, claims: Sequence[dict[str, Any]]) -> list[Any]:
        return [self.pb.Claim(namespace=c["metadata"]["namespace"], name=c["metadata"]["name"],
                              uid=c["metadata"]["uid"]) for c in claims]

    def prepare(self, claims: Sequence[dict[str, Any]]) -> float:
        t0 = time.perf_counter()
        got = self.stub.NodePrepareResources(
            self.pb.NodePrepareResourcesRequest(claims=self._claims(claims)),
            timeout=CALL_TIMEOUT_S)
        dt = time.perf_counter() - t0
        for c in claims:
            r = got.claims[c["metadata"]["uid"]]
            if r.error or len(r.devices) != 1:
                raise RuntimeError(f"prepare {c['metadata']['name']}: error {r.error!r}, "
                                   f"{len(r.devices)} device(s)")
        return dt

    def unprepare(self, claims: Sequence[dict[str, Any]]) -> float:
        t0 = time.perf_counter()
        got = self.stub.NodeUnprepareResources(
            self.pb.NodeUnprepareResourcesRequest(claims=self._claims(claims)),
            timeout=CALL_TIMEOUT_S)
        dt = time.perf_counter() - t0
        for c in claims:
            if got.claims[c["metadata"]["uid"]].error:
                raise RuntimeError(f"unprepare {c['metadata']['name']}: "
                                   f"{got.claims[c['metadata']['uid']].error}")
        return dt


def check_state(cdi_dir: Path, checkpoint: Path, claims: Sequence[dict[str, Any]],
                prepared: bool) -> None:
    """Every claim's CDI spec and checkpoint entry there (``prepared``), or none."""
    uids = {c["metadata"]["uid"] for c in claims}
    specs = {p.name for p in cdi_dir.glob(f"{DRIVER}-*.json")}
    entries = set(json.loads(checkpoint.read_text())["claims"]) if checkpoint.exists() else set()
    want = {f"{DRIVER}-{u}.json" for u in uids} if prepared else set()
    if specs != want or entries != (uids if prepared else set()):
        raise RuntimeError(f"after {'prepare' if prepared else 'unprepare'}: {len(specs)} CDI "
                           f"spec(s), {len(entries)} checkpoint entries for {len(uids)} claims")


def run(n: int, callers: int, batch_rounds: int) -> tuple[list[Timing], Memory, int]:
    from kubernetes import client

    stubs = protos.load()
    gpu_count = max(4, math.ceil(n / SHARES_PER_GPU))
    # a short directory: the plugin's Unix socket paths live under it (at most 107 bytes)
    d = Path(tempfile.mkdtemp(prefix="gfnpb-"))
    proc = None
    try:
        log("starting the lab (2 KWOK nodes, no controller)")
        info = up(LabOptions(directory=d, nodes=uniform_fleet(2), controller=False, dra=False))
        node = info.nodes[0]
        api = api_client(info.kubeconfig)
        core = client.CoreV1Api(api)
        custom = client.CustomObjectsApi(api)
        core.create_namespace({"metadata": {"name": NS}})
        custom.create_cluster_custom_object("resource.k8s.io", "v1", "deviceclasses", {
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": CLASS},
            "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]}})
        log(f"creating and allocating {n} claims on {gpu_count} GPUs of {node}")
        with ThreadPoolExecutor(8) as pool:
            claims = list(pool.map(
                lambda i: allocate(custom, node, f"share-{i:04d}",
                                   f"gpu-{i // SHARES_PER_GPU}"), range(n)))

        device_file = d / "gpus.json"
        device_file.write_text(json.dumps({"gpus": gpus(gpu_count)}))
        root, cdi_dir, state = d / "kubelet", d / "cdi", d / "state"
        checkpoint = state / "checkpoint.json"
        proc = processes.start("node-plugin", [
            sys.executable, "-m", "gpufleet", "node-plugin", "--node-name", node,
            "--kubeconfig", str(info.kubeconfig), "--device-file", str(device_file),
            "--kubelet-root-dir", str(root), "--cdi-dir", str(cdi_dir),
            "--state-dir", str(state), "--no-mps-daemon", "--metrics-port", "0"],
            run_dir=d / "run", log_dir=d / "logs",
            env={"PYTHONUNBUFFERED": "1"})
        sock = root / "plugins" / DRIVER / "dra.sock"
        running = proc
        wait_until("the plugin's dra.sock", lambda: processes.unix_listening(sock), 120,
                   running.alive)
        kubelet = Kubelet(stubs, sock)
        # the kubelet's connection is long-lived: set it up outside the measurement (unpreparing
        # an unknown claim succeeds and changes nothing)
        kubelet.stub.NodeUnprepareResources(kubelet.pb.NodeUnprepareResourcesRequest(
            claims=[kubelet.pb.Claim(namespace=NS, name="warm-up", uid="warm-up")]),
            timeout=CALL_TIMEOUT_S)
        idle = proc_status(proc.pid)["VmRSS"]
        cpu0 = cpu_s(proc.pid)

        timings = []
        log(f"single: {n} NodePrepareResources calls")
        timings.append(timed("NodePrepareResources", 1,
                             lambda: [kubelet.prepare([c]) for c in claims]))
        check_state(cdi_dir, checkpoint, claims, prepared=True)
        prepared = proc_status(proc.pid)["VmRSS"]
        log(f"single: {n} NodePrepareResources calls again (already prepared)")
        timings.append(timed("NodePrepareResources (retry)", 1,
                             lambda: [kubelet.prepare([c]) for c in claims]))
        log(f"single: {n} NodeUnprepareResources calls")
        timings.append(timed("NodeUnprepareResources", 1,
                             lambda: [kubelet.unprepare([c]) for c in claims]))
        check_state(cdi_dir, checkpoint, claims, prepared=False)

        if callers > 1:
            log(f"single, {callers} callers at once: {n} calls each way")
            with ThreadPoolExecutor(callers) as pool:
                timings.append(timed(f"NodePrepareResources ({callers} callers)", 1, lambda: list(
                    pool.map(lambda c: kubelet.prepare([c]), claims))))
                check_state(cdi_dir, checkpoint, claims, prepared=True)
                timings.append(timed(f"NodeUnprepareResources ({callers} callers)", 1,
                                     lambda: list(pool.map(lambda c: kubelet.unprepare([c]),
                                                           claims))))
                check_state(cdi_dir, checkpoint, claims, prepared=False)

        batch_prep: list[float] = []
        batch_unprep: list[float] = []
        for r in range(batch_rounds):
            log(f"batch {r + 1}/{batch_rounds}: one call with {n} claims each way")
            batch_prep.append(kubelet.prepare(claims))
            check_state(cdi_dir, checkpoint, claims, prepared=True)
            batch_unprep.append(kubelet.unprepare(claims))
            check_state(cdi_dir, checkpoint, claims, prepared=False)
        if batch_rounds:
            timings.append(Timing("NodePrepareResources", n, batch_prep, sum(batch_prep)))
            timings.append(Timing("NodeUnprepareResources", n, batch_unprep, sum(batch_unprep)))
        kubelet.channel.close()
        end = proc_status(proc.pid)
        memory = Memory(idle, prepared, end["VmRSS"], end["VmHWM"],
                        round(cpu_s(proc.pid) - cpu0, 2))
        if not proc.alive():
            raise RuntimeError(f"the plugin exited: {processes.log_tail(proc.log)}")
        return timings, memory, gpu_count
    except BaseException:
        if proc is not None:
            log(f"node-plugin log tail:\n{processes.log_tail(proc.log)}")
        raise
    finally:
        if proc is not None:
            processes.stop(proc)
        log("stopping the lab")
        down(d)
        shutil.rmtree(d, ignore_errors=True)


def latency_table(timings: Sequence[Timing], n: int, gpu_count: int) -> DataTable:
    t = DataTable(
        f"gpufleet node-plugin over dra.sock: {n} claims (shares of {gpu_count} fake GPUs)",
        ["call", "claims / call", "calls", "p50 ms", "p99 ms", "max ms", "ms / claim"],
        numeric=[False] + [True] * 6,
        caption="latency of one gRPC call as the kubelet sees it (client side, one channel); "
                "prepare reads the claim from the API server, writes its CDI spec and the "
                "checkpoint (both fsynced); retry: the claim already prepared (no API read, no "
                "checkpoint write; its CDI spec written again); callers: that many kubelet "
                "threads calling at once; ms / claim: the step's wall time / its claims")
    first_batch = next((i for i, tm in enumerate(timings) if tm.claims_per_call > 1), -1)
    for i, tm in enumerate(timings):
        ms = np.array(tm.seconds) * 1000
        cells: list[Any] = [tm.call, tm.claims_per_call, len(ms),
                            round(float(np.percentile(ms, 50)), 2),
                            round(float(np.percentile(ms, 99)), 2), round(float(ms.max()), 2),
                            round(1000 * tm.wall_s / (len(ms) * tm.claims_per_call), 2)]
        t.add_row(*(f"{c:,}" if isinstance(c, int) else f"{c}" for c in cells), values=cells,
                  section=i == first_batch)
    return t


def memory_table(m: Memory, n: int) -> DataTable:
    t = DataTable("gpufleet node-plugin process: memory and CPU",
                  ["VmRSS idle MiB", f"VmRSS {n} prepared MiB", "VmRSS end MiB",
                   "VmHWM (peak) MiB", "CPU s"], numeric=[True] * 5,
                  caption="/proc/<pid>/status of the plugin process; idle: started, before the "
                          "first claim; CPU: user + system over all the calls")
    cells = [round(m.idle_kib / 1024, 1), round(m.prepared_kib / 1024, 1),
             round(m.end_kib / 1024, 1), round(m.peak_kib / 1024, 1), m.cpu_s]
    t.add_row(*(f"{c}" for c in cells), values=cells)
    return t


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--claims", type=int, default=200, help="claims (default 200)")
    ap.add_argument("--callers", type=int, default=4,
                    help="also one claim a call from this many threads at once, as calls for "
                         "different pods can overlap (default 4; 1 leaves it out)")
    ap.add_argument("--batch-rounds", type=int, default=3,
                    help="rounds of one call with every claim each way (default 3)")
    ap.add_argument("--format", default="table", choices=[f.value for f in OutputFormat])
    a = ap.parse_args(argv)
    if a.claims < 1:
        raise SystemExit(f"--claims must be >= 1, got {a.claims}")
    if a.callers < 1:
        raise SystemExit(f"--callers must be >= 1, got {a.callers}")
    if a.batch_rounds < 0:
        raise SystemExit(f"--batch-rounds must be >= 0, got {a.batch_rounds}")
    # SIGTERM unwinds like an error, so the lab is torn down
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    t0 = time.monotonic()
    timings, memory, gpu_count = run(a.claims, a.callers, a.batch_rounds)
    log(f"done in {time.monotonic() - t0:.0f} s")
    print_tables([latency_table(timings, a.claims, gpu_count), memory_table(memory, a.claims)],
                 OutputFormat(a.format), Console())


if __name__ == "__main__":
    main()
