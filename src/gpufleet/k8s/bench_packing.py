"""``gpufleet bench k8s-packing``: gpufleet vs kube-scheduler placing openb pods on a real cluster.

For each scheduler a fresh lab (kine, kube-apiserver, kube-controller-manager, KWOK; plus
kube-scheduler for its run) gets the openb GPU nodes as KWOK Nodes; the openb default pods are
submitted in the packing protocol's order (``placement.bench.protocol.arrival_sequence``, seed
42) until the arrived GPU requests reach 100 % of capacity (or ``--limit`` pods), eight
creating threads at a time. The run ends when every pod is bound or marked Unschedulable and
no bind happened for ``settle_s``.

* kube-scheduler runs its ``NodeResourcesFit`` ``MostAllocated`` profile (cpu, memory and
  ``nvidia.com/gpu`` weight 1, ``percentageOfNodesToScore: 100``); it cannot share a GPU, so a
  fractional pod asks for one whole ``nvidia.com/gpu``.
* gpufleet runs its default policy with fractions (KAI's ``gpu-fraction`` annotation), as its
  own ``gpufleet controller`` process — kube-scheduler is a process of its own too.
* Both get the lab's client limit (``gpufleet.lab.cluster.CLIENT_QPS``/``CLIENT_BURST``): kube-
  scheduler through its ``clientConnection``, gpufleet through the same token bucket on every
  write it makes (one per bind: the binding carries the GPU annotations).

Measured per scheduler: pods submitted and bound; unallocated GPU % = 100 − (GPU milli the
*bound pods asked for in the trace*) / capacity — a fraction rounded up to a whole GPU wastes the
rest, as in the packing benchmark; bind throughput = pods bound / (last bind − first create);
p50/p99 of create → bound (client-side clocks: create returned → watch saw ``nodeName``);
and, at the end of each run, the GPUs over-committed on any node, read from the Pods and Nodes
the API holds (:mod:`gpufleet.k8s.translate.overcommit`: milli per GPU, MIG slots, whole GPUs,
indices; kube-scheduler's pods by their whole-GPU count) — it must be 0.

``--dra``: the nodes are also published as NVIDIA-shaped ResourceSlices and every GPU
pod gets a ResourceClaim (:func:`claim_manifest`) that the scheduler allocates — kube-scheduler
with its own DRA allocator (the MostAllocated profile weighs cpu, memory and ``nvidia.com/gpu``,
which these pods do not request), gpufleet through ``k8s.schedule.claim_writes``; both write
finalizer, allocation and reservation before the Binding. Over-commits are then also read from
the claims, exactly against the slices (``find_overcommits(…, claims=…, slices=…)``).
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpufleet.k8s.watch.connections import release
from gpufleet.state import GPU_MILLI, ResourceRequest
from gpufleet.traces.openb import OpenbNode

SCHEDULERS = ("gpufleet", "kube-scheduler")
MOST_ALLOCATED = {
    "percentageOfNodesToScore": 100,
    "profiles": [{
        "schedulerName": "default-scheduler",
        "pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {
            "type": "MostAllocated",
            "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1},
                          {"name": "nvidia.com/gpu", "weight": 1}]}}}],
    }],
}


@dataclass(frozen=True)
class BenchResult:
    scheduler: str
    pods_submitted: int
    pods_bound: int
    unallocated_pct: float
    pods_per_s: float
    latency_p50_s: float
    latency_p99_s: float
    wall_s: float
    load_1m_start: float  # the machine's 1-minute load average when pods started arriving
    load_1m_end: float
    # GPUs given out beyond what they have at the end (translate.overcommit, from the API's
    # Pods and Nodes); anything but 0 is a scheduler bug
    overcommitted_gpus: int = 0
    # create→bound by when the pod was created: per ``TIMELINE_S`` window of the submission,
    # [window start s, pods, p50 s, p99 s] — whether latency grows as the cluster fills
    timeline: tuple[tuple[float, int, float, float], ...] = ()


TIMELINE_S = 10.0


def timeline(created: Mapping[str, float], bound: Mapping[str, float], t0: float,
             window_s: float = TIMELINE_S) -> tuple[tuple[float, int, float, float], ...]:
    """[start, pods, p50, p99] of create→bound for the bound pods created in each window of
    ``window_s`` from ``t0`` (a window with no bound pod is left out)."""
    by: dict[int, list[float]] = {}
    for name, at in bound.items():
        if name in created:
            by.setdefault(int((created[name] - t0) // window_s), []).append(at - created[name])
    return tuple((k * window_s, len(v), round(float(np.percentile(v, 50)), 3),
                  round(float(np.percentile(v, 99)), 3)) for k, v in sorted(by.items()))


SHARE_BASE_MIB = 16384  # --dra: a fraction's memory request is this share of 16 GiB


def claim_manifest(name: str, req: ResourceRequest) -> dict[str, Any]:
    """``--dra``: the pod's GPUs as a ResourceClaim both schedulers allocate — whole GPUs
    ``count: N``; a fraction ``f`` one shareable GPU with ``capacity.requests.memory`` =
    ``f`` × 16 GiB (the smallest openb GPU: on the 32 GiB ones kube-scheduler, which shares by
    memory alone, may fit twice the pods gpufleet does by milli-GPU)."""
    exactly: dict[str, Any] = {"deviceClassName": "gpu.nvidia.com", "count": req.num_gpu}
    if req.is_shared:
        exactly["capacity"] = {"requests": {
            "memory": f"{-(-req.gpu_milli * SHARE_BASE_MIB // GPU_MILLI)}Mi"}}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}


def pod_manifest(name: str, req: ResourceRequest, scheduler: str,
                 claim: str | None = None) -> dict[str, Any]:
    """The pod; with ``claim`` (``--dra``) its GPUs come from that ResourceClaim (gpufleet's
    fractional pods keep ``gpu-fraction`` for their milli-GPU)."""
    from gpufleet.k8s.translate.node_objects import gfd_product

    limits: dict[str, str] = {"cpu": f"{max(req.cpu_milli, 1)}m",
                              "memory": f"{max(req.memory_mib, 1)}Mi"}
    ann: dict[str, str] = {}
    if req.num_gpu:
        if req.is_shared and scheduler == "gpufleet":
            ann["gpu-fraction"] = f"{req.gpu_milli / GPU_MILLI:.3f}"
        elif claim is None:
            limits["nvidia.com/gpu"] = str(req.num_gpu)
    container: dict[str, Any] = {"name": "main", "image": "registry.k8s.io/pause:3.10",
                                 "resources": {"requests": limits, "limits": limits}}
    spec: dict[str, Any] = {
        "schedulerName": "gpufleet" if scheduler == "gpufleet" else "default-scheduler",
        "terminationGracePeriodSeconds": 0,
        "containers": [container],
    }
    if claim is not None:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
        container["resources"]["claims"] = [{"name": "gpu"}]
    if req.gpu_models and req.num_gpu:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{
                "key": "nvidia.com/gpu.product", "operator": "In",
                "values": sorted(gfd_product(m) for m in req.gpu_models)}]}]}}}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": ann}, "spec": spec}


class PodWatch:
    """Client-side clock of when each pod was first seen bound or refused; and the pods seen
    Running."""

    def __init__(self, core: Any, namespace: str) -> None:
        self.core, self.ns = core, namespace
        self.bound_at: dict[str, float] = {}
        self.refused: set[str] = set()
        self.running: set[str] = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from kubernetes.watch.watch import iter_resp_lines

        rv = json.loads(self.core.list_namespaced_pod(
            self.ns, _preload_content=False).data)["metadata"]["resourceVersion"]
        while not self.stop.is_set():
            resp = self.core.list_namespaced_pod(
                self.ns, watch=True, resource_version=rv, timeout_seconds=5,
                allow_watch_bookmarks=True, _preload_content=False)
            for line in iter_resp_lines(resp):
                if not line:
                    continue
                ev = json.loads(line)
                obj = ev["object"]
                rv = obj.get("metadata", {}).get("resourceVersion", rv)
                if ev["type"] not in ("ADDED", "MODIFIED"):
                    continue
                name = obj["metadata"]["name"]
                if obj["spec"].get("nodeName"):
                    self.bound_at.setdefault(name, time.monotonic())
                    if (obj.get("status") or {}).get("phase") == "Running":
                        self.running.add(name)
                elif any(c.get("type") == "PodScheduled" and c.get("status") == "False"
                         for c in obj.get("status", {}).get("conditions") or ()):
                    self.refused.add(name)
            resp.close()


def run_one(
    scheduler: str,
    nodes: Sequence[OpenbNode],
    seq: Sequence[ResourceRequest],
    capacity_milli: int,
    *,
    settle_s: float = 5.0,
    timeout_s: float = 120.0,  # once every pod exists: give up after this long without a bind
    log: Callable[[str], None] = lambda _m: None,
    dra: bool = False,
) -> BenchResult:
    from kubernetes import client

    from gpufleet.k8s.translate.node_objects import spec_from_openb
    from gpufleet.k8s.translate.overcommit import find_overcommits, overcommitted_gpus
    from gpufleet.k8s.watch.informer import list_all
    from gpufleet.lab.cluster import LabOptions, api_client, down, up

    kube = scheduler == "kube-scheduler"
    with tempfile.TemporaryDirectory(prefix="gpufleet-bench-") as tmp:
        d = Path(tmp)
        log(f"{scheduler}: starting the lab with {len(nodes)} nodes")
        info = up(LabOptions(directory=d, nodes=[spec_from_openb(n) for n in nodes],
                             controller=False, kube_scheduler=kube,
                             scheduler_config=MOST_ALLOCATED if kube else {},
                             # the device-plugin setup the published table was measured on
                             # unless --dra (slices, and every GPU pod's claim)
                             dra=dra, device_plugin=True, ready_timeout_s=300.0))
        try:
            api = api_client(info.kubeconfig)
            core = client.CoreV1Api(api)
            ns = "bench"
            core.create_namespace({"metadata": {"name": ns}})
            wait_sa(core, ns)
            if not kube:
                start_controller(d, info.kubeconfig)
            watch = PodWatch(core, ns)
            watch.thread.start()
            time.sleep(0.5)
            created_at: dict[str, float] = {}
            names = [f"p{i:05d}" for i in range(len(seq))]
            log(f"{scheduler}: submitting {len(seq)} pods")
            load_start = os.getloadavg()[0]
            t0 = time.monotonic()

            resource = client.ResourceV1Api(api)

            def create(i: int) -> None:
                claim = None
                if dra and seq[i].num_gpu:
                    claim = names[i]
                    release(resource.create_namespaced_resource_claim(
                        ns, claim_manifest(claim, seq[i]), _preload_content=False))
                release(core.create_namespaced_pod(
                    ns, pod_manifest(names[i], seq[i], scheduler, claim),
                    _preload_content=False))
                created_at[names[i]] = time.monotonic()

            with ThreadPoolExecutor(8) as pool:
                list(pool.map(create, range(len(seq))))
            # the wait for the last binds starts once every pod exists: a submission slower than
            # ``timeout_s`` (8,335 pods on a loaded 2-core machine) must not cut it short
            last_change, seen = time.monotonic(), -1
            log(f"{scheduler}: all pods created after {last_change - t0:.0f} s; "
                f"{len(watch.bound_at)} seen bound so far")
            while time.monotonic() - last_change < timeout_s:
                done = len(watch.bound_at) + len(watch.refused - watch.bound_at.keys())
                if len(watch.bound_at) != seen:
                    seen, last_change = len(watch.bound_at), time.monotonic()
                if done >= len(seq) and time.monotonic() - last_change >= settle_s:
                    break
                time.sleep(0.2)
            watch.stop.set()
            wall = time.monotonic() - t0
            load_end = os.getloadavg()[0]
            all_nodes = list_all(core.list_node)[0]
            all_pods = list_all(core.list_pod_for_all_namespaces)[0]
            # --dra: the claims judged exactly against the slices, annotations beside them
            claims = list_all(resource.list_resource_claim_for_all_namespaces)[0] if dra else []
            slices = list_all(resource.list_resource_slice)[0] if dra else []
            found = find_overcommits(all_nodes, all_pods, claims=claims, slices=slices)
            for f in found:
                log(f"{scheduler}: over-committed: {f}")
            partial = (claim_overcommits(resource, all_nodes, all_pods, claims, slices)
                       if dra else [])
            for c in partial:
                log(f"{scheduler}: a claim gpufleet's snapshot books only in part: {c}")
        finally:
            down(d)
    bound = [names.index(n) for n in watch.bound_at]
    lat = np.array([watch.bound_at[n] - created_at[n] for n in watch.bound_at
                    if n in created_at])
    alloc = sum(seq[i].total_gpu_milli for i in bound)
    span = (max(watch.bound_at.values()) - t0) if watch.bound_at else 0.0
    return BenchResult(
        scheduler=scheduler, pods_submitted=len(seq), pods_bound=len(bound),
        unallocated_pct=round(100.0 * (1 - alloc / capacity_milli), 3),
        pods_per_s=round(len(bound) / span, 2) if span > 0 else 0.0,
        latency_p50_s=round(float(np.percentile(lat, 50)), 4) if len(lat) else float("nan"),
        latency_p99_s=round(float(np.percentile(lat, 99)), 4) if len(lat) else float("nan"),
        wall_s=round(wall, 2),
        load_1m_start=round(load_start, 2), load_1m_end=round(load_end, 2),
        overcommitted_gpus=overcommitted_gpus(found),
        timeline=timeline(created_at, watch.bound_at, t0),
    )


def claim_overcommits(resource: Any, nodes: list[dict[str, Any]], pods: list[dict[str, Any]],
                      claims: list[dict[str, Any]], slices: list[dict[str, Any]]) -> list[str]:
    """``--dra``: the allocated claims gpufleet's snapshot could not book whole (a device given
    out beyond what it has in the state's integer milli-GPU: a whole GPU twice, MIG slices twice,
    shares over 1000 milli read back from memory). Logged, not counted: the over-commit
    checker's exact judgement of the claims against the slices is the count."""
    from gpufleet.catalog.gpus import default_gpu_catalog
    from gpufleet.k8s.dra.claim_view import DraWorld
    from gpufleet.k8s.translate.snapshot import build_snapshot
    from gpufleet.k8s.watch.informer import list_all

    world = DraWorld.of(slices, claims, list_all(resource.list_device_class)[0],
                        default_gpu_catalog())
    snap = build_snapshot(nodes, pods, dra=world)
    return [f"{k}: {v}" for k, v in snap.unaccounted.items() if k.startswith("claim ")]


def start_controller(directory: Path, kubeconfig: Path,
                     timeout_s: float = 120.0) -> tuple[Any, int]:
    """``gpufleet controller`` as its own process in the lab (``down`` stops it), as kube-
    scheduler is: in the benchmark's process it would share one interpreter lock with the eight
    creating threads and the watch, slowing both the submission and itself. Same client limit.
    Returns the process (``gpufleet.lab.processes.Running``) and the port it serves on.
    """
    import sys
    import urllib.request

    from gpufleet.lab import processes
    from gpufleet.lab.cluster import CLIENT_BURST, CLIENT_QPS, CONTROLLER_SERVING

    # port 0: the controller binds a port of its own and says which (no port to lose meanwhile)
    proc = processes.start(
        "gpufleet-controller",
        [sys.executable, "-m", "gpufleet", "controller", "--kubeconfig", str(kubeconfig),
         "--no-leader-elect", "--port", "0", "--log-level", "WARNING",
         "--kube-api-qps", str(CLIENT_QPS), "--kube-api-burst", str(CLIENT_BURST)],
        run_dir=directory / "run", log_dir=directory / "logs", env={"PYTHONUNBUFFERED": "1"})

    def ready(port: int) -> bool:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
            return bool(resp.status == 200)

    port = processes.wait_own_port(proc, ready, what="ready (/readyz)", timeout_s=timeout_s,
                                   reported=CONTROLLER_SERVING)
    return proc, port


def wait_sa(core: Any, ns: str, timeout_s: float = 30.0) -> None:
    """Pods can be created once the namespace's default ServiceAccount exists."""
    from kubernetes.client.exceptions import ApiException

    end = time.monotonic() + timeout_s
    while True:
        try:
            core.read_namespaced_service_account("default", ns)
            return
        except ApiException:
            if time.monotonic() > end:
                raise
            time.sleep(0.1)


def run_bench(
    schedulers: Sequence[str],
    nodes: Sequence[OpenbNode],
    pods: Sequence[ResourceRequest],
    *,
    limit: int | None = None,
    seed: int = 42,
    log: Callable[[str], None] = lambda _m: None,
    dra: bool = False,
) -> dict[str, Any]:
    from gpufleet.lab.cluster import CLIENT_BURST, CLIENT_QPS
    from gpufleet.placement.bench.protocol import arrival_sequence

    capacity = sum(n.num_gpu for n in nodes) * GPU_MILLI
    seq = arrival_sequence(pods, capacity, seed, 100)
    if limit is not None:
        seq = seq[:limit]
    results = [run_one(s, nodes, seq, capacity, log=log, dra=dra) for s in schedulers]
    return {
        "results": [asdict(r) for r in results], "dra": dra,
        "nodes": len(nodes), "gpus": capacity // GPU_MILLI, "seed": seed, "limit": limit,
        "arrived_gpu_pct": round(100.0 * sum(p.total_gpu_milli for p in seq) / capacity, 2),
        "client_qps": CLIENT_QPS, "client_burst": CLIENT_BURST,
    }
