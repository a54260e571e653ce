"""Faults under a flood: the control plane's components, leadership, nodes and the cloud.

Each cell sends a flood of GPU pods — whole GPUs, ``gpu-fraction`` shares, MIG instances and a
few pods whose GPU comes from a ResourceClaim — to the gpufleet controller, injects its fault
while the flood is in flight, and then checks, from the API objects alone:

* no GPU given out twice (the over-commit check; the conftest hook runs it again at the end);
* every pod bound, or refused with a reason (``PodScheduled=False``, ``Unschedulable``), steadily
  over three polls a second apart, and no pending pod that a fresh plan over the final objects
  would place (nor one pinned to claims already allocated for it);
* once the pods are deleted, no claim still allocated or reserved, and no claim finalizer left;
* for the cloud cell, no kwok instance left that no Node holds;

and prints one JSON line per cell with the time from the end of the fault to the settled state.

The cells that kill kine and the API server would take the session's shared lab down with them,
so the whole module runs on a lab of its own (``fault_lab``, a small fleet added per cell), whose
components are brought back by :func:`gpufleet.lab.processes.restart` with the command line,
directory and environment their pidfiles recorded — the same port and flags.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from live_wait import wait_for
from overcommit import assert_no_overcommit, listed

from gpufleet.catalog.gpus import default_gpu_catalog
from gpufleet.catalog.instances import default_instance_catalog
from gpufleet.cloud.kwok import PENDING_LABEL, KwokProvider
from gpufleet.cloud.provider import TAG_MANAGED, InstanceState
from gpufleet.config import CloudSettings, KwokSettings, Scenario, default_scenario
from gpufleet.control.policies import backfill_pass, placement_policy
from gpufleet.decisions import Bind
from gpufleet.k8s.dra.claim_view import DraWorld
from gpufleet.k8s.dra.claims import FINALIZER
from gpufleet.k8s.schedule.controller import Controller
from gpufleet.k8s.schedule.cycle import plan_cycle
from gpufleet.k8s.translate.snapshot import build_snapshot
from gpufleet.lab import processes
from gpufleet.lab.cluster import LabOptions, down, up
from gpufleet.lab.kubelet_check import list_cluster
from gpufleet.lab.session import LabSession

pytestmark = [pytest.mark.live, pytest.mark.timeout(900)]

ZONE = "topology.kubernetes.io/zone"
PRODUCT = "nvidia.com/gpu.product"
T4, V100 = "Tesla-T4", "Tesla-V100-SXM2-16GB"
MANAGED = {TAG_MANAGED: "true"}
LEASE_S = 4
RESOURCE = ("resource.k8s.io", "v1")
CAT = default_instance_catalog()
ApiDown = (ApiException, urllib3.exceptions.HTTPError, OSError)

# (how many, name, extended-resource limits, annotations, GPU product or None, claim?) — on the
# fixed fleet of ``zone``: 12 half T4s of 8 T4s, 12 V100s asked of 8 (some refused), 11 MIG
# slices of one A100 node in all-balanced mode, three one-GPU claims
FLOOD = [
    (12, "t4-half", {}, {"gpu-fraction": "0.5"}, T4, False),
    (8, "one-gpu", {"nvidia.com/gpu": "1"}, {}, V100, False),
    (2, "two-gpu", {"nvidia.com/gpu": "2"}, {}, V100, False),
    (8, "mig-1g", {"nvidia.com/mig-1g.5gb": "1"}, {}, None, False),
    (3, "mig-2g", {"nvidia.com/mig-2g.10gb": "1"}, {}, None, False),
    (3, "claim", {}, {}, None, True),
]
# the cloud cell's flood, on launched nodes (p3.8xlarge: 4 V100; p4d.24xlarge in MIG mode)
CLOUD_FLOOD = [
    (10, "one-gpu", {"nvidia.com/gpu": "1"}, {}, None, False),
    (2, "two-gpu", {"nvidia.com/gpu": "2"}, {}, None, False),
    (8, "half", {}, {"gpu-fraction": "0.5"}, None, False),
    (6, "mig-1g", {"nvidia.com/mig-1g.5gb": "1"}, {}, None, False),
    (2, "mig-2g", {"nvidia.com/mig-2g.10gb": "1"}, {}, None, False),
    (2, "claim", {}, {}, None, True),
]


@pytest.fixture(scope="module")
def fault_lab(lab_binaries: Path, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[LabSession]:
    """A lab of this module's own, no nodes and no controller: each cell adds its fleet."""
    d = tmp_path_factory.mktemp("faults") / "lab"
    info = up(LabOptions(directory=d, nodes=[], controller=False, device_plugin=True))
    try:
        yield LabSession(info)
    finally:
        down(d)


@dataclass
class Zone:
    """A namespace and (for the fixed-fleet cells) GPU nodes in a zone of the same name."""

    lab: LabSession
    ns: str
    nodes: list[str] = field(default_factory=list)

    @property
    def core(self) -> client.CoreV1Api:
        return self.lab.core

    def pods(self) -> list[dict[str, Any]]:
        return [p for p in listed(self.core.list_pod_for_all_namespaces)
                if p["metadata"]["namespace"] == self.ns]

    def claims(self) -> list[dict[str, Any]]:
        return list(client.CustomObjectsApi(self.lab.api).list_namespaced_custom_object(
            *RESOURCE, self.ns, "resourceclaims")["items"])


@pytest.fixture
def zone(fault_lab: LabSession) -> Iterator[Zone]:
    """2 g4dn.12xlarge (8 T4), 2 p3.8xlarge (8 V100), 1 p4d.24xlarge in MIG mode (8 A100)."""
    ns = fault_lab.namespace("fault")
    z = Zone(fault_lab, ns)
    z.nodes = (fault_lab.add_instance_nodes("g4dn.12xlarge", 2, zone=ns, prefix=ns)
               + fault_lab.add_instance_nodes("p3.8xlarge", 2, zone=ns, prefix=ns)
               + fault_lab.add_instance_nodes("p4d.24xlarge", 1, zone=ns, prefix=ns,
                                              mig_config="all-balanced"))
    yield z
    core = fault_lab.core
    core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
    wait_for("the cell's pods to go", lambda: not core.list_namespaced_pod(ns).items, 120)
    for n in z.nodes:
        try:
            core.delete_node(n)
        except ApiException as exc:
            if exc.status != 404:  # the node cell deleted one itself
                raise
    core.delete_namespace(ns)


def manifests(ns: str, flood: list, selector: dict[str, str] | None) -> list[dict]:
    """The flood's pods (and claims named after the claim pods), in a fixed interleaved order
    so that every kind is in flight at any moment of the flood."""
    rows = []
    for n, name, limits, ann, product, claim in flood:
        for i in range(n):
            sel = dict(selector) if selector is not None else {ZONE: ns}
            if product:
                sel[PRODUCT] = product
            container: dict[str, Any] = {
                "name": "main", "image": "registry.k8s.io/pause:3.10",
                "resources": {"limits": {"cpu": "100m", "memory": "128Mi", **limits}}}
            spec: dict[str, Any] = {"schedulerName": "gpufleet", "nodeSelector": sel,
                                    "terminationGracePeriodSeconds": 0,
                                    "containers": [container]}
            if claim:
                container["resources"]["claims"] = [{"name": "gpu"}]
                spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": f"{name}-{i}"}]
            rows.append((i, {"apiVersion": "v1", "kind": "Pod",
                             "metadata": {"name": f"{name}-{i}", "annotations": ann},
                             "spec": spec}))
    return [m for _, m in sorted(rows, key=lambda r: r[0])]


def claim_body(name: str) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name}, "spec": {"devices": {"requests": [{
                "name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 1}}]}}}


class Flood:
    """Creates the pods from a background pool at ``pace_s`` per pod, each retried (through an
    API server or storage that is down) until the API has it: a 409 on a retry means the first
    attempt got through before the connection broke."""

    def __init__(self, z: Zone, flood: list, selector: dict[str, str] | None = None,
                 pace_s: float = 0.1) -> None:
        self.z, self.pace_s = z, pace_s
        self.manifests = manifests(z.ns, flood, selector)
        self.created = 0
        self.failures = 0
        self.done = threading.Event()
        custom = client.CustomObjectsApi(z.lab.api)
        for m in self.manifests:
            for c in m["spec"].get("resourceClaims") or ():
                custom.create_namespaced_custom_object(*RESOURCE, z.ns, "resourceclaims",
                                                       claim_body(c["resourceClaimName"]))
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __len__(self) -> int:
        return len(self.manifests)

    def _create(self, m: dict) -> None:
        deadline = time.monotonic() + 180
        while True:
            try:
                self.z.core.create_namespaced_pod(self.z.ns, m, _preload_content=False)
                break
            except ApiException as exc:
                if exc.status == 409:
                    break
                if time.monotonic() > deadline:
                    raise
            except ApiDown:
                if time.monotonic() > deadline:
                    raise
            self.failures += 1
            time.sleep(0.2)
        self.created += 1

    def _run(self) -> None:
        with ThreadPoolExecutor(4) as pool:
            futures = []
            for m in self.manifests:
                futures.append(pool.submit(self._create, m))
                time.sleep(self.pace_s)
            for f in futures:
                f.result()
        self.done.set()

    def start(self) -> Flood:
        self._thread.start()
        return self

    def join(self) -> None:
        wait_for("every pod of the flood created", self.done.is_set, 200)


def bound_count(z: Zone) -> int:
    try:
        return sum(1 for p in z.pods() if p["spec"].get("nodeName"))
    except ApiDown:
        return 0


def settled(z: Zone, total: int) -> dict[str, int] | None:
    """Counts once every pod is bound or marked Unschedulable by gpufleet (else None)."""
    try:
        pods = z.pods()
    except ApiDown:
        return None
    bound = sum(1 for p in pods if p["spec"].get("nodeName"))
    refused = sum(1 for p in pods if not p["spec"].get("nodeName") and any(
        c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
        for c in (p.get("status") or {}).get("conditions") or ()))
    if len(pods) < total or bound + refused < total:
        return None
    return {"bound": bound, "refused": refused}


def settle(z: Zone, total: int, timeout: float = 180, log: Path | None = None,
           all_bound: bool = False) -> tuple[dict[str, int], float]:
    """The settled counts, steady over three polls a second apart (a refusal can be written
    just before room appears: the next cycle then binds it), and the monotonic time the first
    of those polls was taken. ``all_bound``: wait for every pod bound instead."""
    history: list[tuple[float, dict[str, int] | None]] = []

    def steady() -> tuple[dict[str, int], float] | None:
        got = settled(z, total)
        if all_bound and got is not None and got["refused"]:
            got = None
        history.append((time.monotonic(), got))
        last = [h for _, h in history[-3:]]
        if len(last) == 3 and last[0] and last.count(last[0]) == 3:
            return last[0], history[-3][0]
        return None

    got: tuple[dict[str, int], float] = wait_for(
        "every pod bound" if all_bound else "every pod bound or Unschedulable, steadily",
        steady, timeout, log, poll_s=1.0)
    return got


def placeable(z: Zone) -> list[str]:
    """The zone's pending pods that a fresh plan over the API's objects would bind now, and
    those pinned to claims already allocated for them (the controller binds those first)."""
    objs = list_cluster(z.lab.api)
    classes = listed(client.ResourceV1Api(z.lab.api).list_device_class)
    catalog = default_gpu_catalog()
    dra = DraWorld.of(objs.slices, objs.claims, classes, catalog)
    snap = build_snapshot(objs.nodes, objs.pods, catalog=catalog, dra=dra)
    sc = default_scenario()
    plan = plan_cycle(snap, placement_policy(sc, tie_seed=0), np.random.default_rng(0),
                      backfill_pass(sc), preemption=False)
    mine = f"{z.ns}/"
    pinned = [k for k, c in snap.claims.items() if c.pinned is not None]
    return [k for k in [*(b.job_id for b in plan.of(Bind)), *pinned] if k.startswith(mine)]


def claim_holders(z: Zone) -> dict[str, tuple[list[str], list[str], bool]]:
    """Each claim: (its reservedFor pod names, the pools of its allocated devices, whether it
    still carries the delete-protection finalizer)."""
    out = {}
    for c in z.claims():
        st = c.get("status") or {}
        res = ((st.get("allocation") or {}).get("devices") or {}).get("results") or ()
        out[c["metadata"]["name"]] = ([r["name"] for r in st.get("reservedFor") or ()],
                                      sorted({r["pool"] for r in res}),
                                      FINALIZER in (c["metadata"].get("finalizers") or ()))
    return out


def check_settled(z: Zone, flood: Flood, fault_end: float, cell: str, t0: float,
                  log: Path | None = None, all_bound: bool = False,
                  after: Callable[[], dict[str, Any]] | None = None,
                  **extra: Any) -> dict[str, Any]:
    """The checks every cell ends with (module docstring) but the claim cleanup; the cell's
    JSON line, printed. ``after``: more figures, read once the cell has settled (a count the
    controller may still move while pods are pending)."""
    counts, at = settle(z, len(flood), log=log, all_bound=all_bound)
    if after is not None:
        extra = {**extra, **after()}
    assert_no_overcommit(z.core)
    left = placeable(z)
    assert not left, f"pending pods that fit but were left: {left}"
    pods = {p["metadata"]["name"]: p for p in z.pods()}
    for name, (reserved, pools, _) in claim_holders(z).items():
        for holder in reserved:  # a claim is reserved only for a live pod of the zone
            assert holder in pods, (name, holder)
        if pools:  # an allocated claim belongs to a pod bound on its devices' node, or pinned
            assert reserved, (name, pools)
    figures = {"cell": cell, "pods": len(flood), **counts,
               "create_retries": flood.failures,
               "recover_s": round(max(0.0, at - fault_end), 1),
               "cell_wall_s": round(time.monotonic() - t0, 1), **extra}
    print("fault-matrix:", json.dumps(figures))
    return figures


def check_claims_released(z: Zone) -> None:
    """After the pods are deleted: no claim allocated, reserved, or holding the finalizer."""
    core = z.core
    core.delete_collection_namespaced_pod(z.ns, grace_period_seconds=0)
    wait_for("the cell's pods to go", lambda: not core.list_namespaced_pod(z.ns).items, 120)
    wait_for("every claim released by the claim controller",
             lambda: all(h == ([], [], False) for h in claim_holders(z).values()), 60)


def start_controller(api: Any, sc: Scenario | None = None, **kw: Any) -> Controller:
    ctl = Controller(api, sc or default_scenario(), leader_elect=False, resync_s=0.5, **kw)
    ctl.start()
    wait_for("informers to sync", ctl.ready, 60)
    return ctl


def port_free(port: int) -> bool:
    """Whether a listener may bind 127.0.0.1:``port`` now (with SO_REUSEADDR, as Go's does)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def api_writes(z: Zone) -> bool:
    """Whether the API server stores a write now (a list can be answered from its watch cache
    while its storage is still away)."""
    name = f"probe-{time.monotonic_ns()}"
    try:
        z.core.create_namespaced_config_map(z.ns, {"metadata": {"name": name}},
                                            _request_timeout=5, _preload_content=False)
        z.core.delete_namespaced_config_map(name, z.ns, _request_timeout=5,
                                            _preload_content=False)
    except ApiDown:
        return False
    return True


# -- 1. a control-plane component killed and restarted --------------------------------------
@pytest.mark.parametrize("component", ["kube-apiserver", "kine"])
def test_a_control_plane_component_killed_mid_flood_and_restarted(
        fault_lab: LabSession, zone: Zone, component: str) -> None:
    """SIGKILL of the API server (or of kine, its storage) while the flood is created and bound;
    the component is started again with its recorded command line (same port, same flags).
    The controller's informers re-list and it binds the rest; creates in flight are retried."""
    t0 = time.monotonic()
    d = fault_lab.directory
    ctl = start_controller(fault_lab.api)
    try:
        flood = Flood(zone, FLOOD).start()
        wait_for("the first binds", lambda: bound_count(zone) >= 6, 60)
        running = processes.read_pidfile(d / "run" / f"{component}.pid", d / "logs")
        assert running is not None and running.alive()
        os.kill(running.pid, signal.SIGKILL)
        wait_for(f"{component} to be gone", lambda: not running.alive(), 30)
        if component == "kube-apiserver":
            # the API server's accepted connections outlive it in FIN_WAIT2 until each client
            # closes its end: idle pooled ones only when next used. Close this process's idle
            # ones (the Go components close theirs on their own), then wait for the port —
            # as a supervisor restarting it on its flag's port has to
            for api in (fault_lab.api, ctl.api):
                api.rest_client.pool_manager.clear()
            port = next(int(a.split("=", 1)[1]) for a in json.loads(
                running.pidfile.read_text())["argv"] if a.startswith("--secure-port="))
            wait_for(f"port {port} to be free", lambda: port_free(port), 90)
        # started again at once, as a supervisor would: the API server's storage client backs
        # off its reconnects exponentially (to minutes), so a long outage of kine is a long
        # wait after it is back, whatever the controller does
        back = processes.restart(running.pidfile, d / "logs")
        wait_for(f"{component} to store writes again", lambda: api_writes(zone), 120,
                 back.log)
        fault_end = time.monotonic()
        flood.join()
        check_settled(zone, flood, fault_end, f"{component}-killed", t0,
                      relists=int(sum(ctl.metrics.registry.get_sample_value(
                          "gpufleet_informer_relists_total", {"resource": r}) or 0
                          for r in ("pods", "nodes"))))
    finally:
        ctl.stop()
    check_claims_released(zone)


# -- 2. a stale leader ----------------------------------------------------------------------
def replica(lab: LabSession, ident: str, ns: str, log: Path, *extra: str) -> subprocess.Popen:
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "gpufleet", "controller", "--kubeconfig",
             str(lab.kubeconfig), "--lease-namespace", ns, "--lease-name", "gpufleet",
             "--lease-duration", str(LEASE_S), "--renew-deadline", "3", "--retry-period", "0.5",
             "--port", "0", "--identity", ident, *extra],
            stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def stop_all(procs: dict[str, subprocess.Popen]) -> None:
    for p in procs.values():
        if p.poll() is None:
            p.send_signal(signal.SIGCONT)
            p.terminate()
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)


def test_a_stale_leader_resumed_after_its_lease_writes_nothing(
        fault_lab: LabSession, zone: Zone, tmp_path: Path) -> None:
    """Two replicas behind one Lease (4 s). SIGSTOP of the leader mid-flood for longer than the
    lease: the standby takes the Lease and binds; SIGCONT of the old leader, whose threads may
    hold writes planned on its stale view. It must see its renewal past the renew deadline and
    write nothing (``Applier.leading``), step down, and the API must show each GPU given once
    and every pod's recorded node its real one."""
    t0 = time.monotonic()
    coord = client.CoordinationV1Api(fault_lab.api)
    logs = {i: tmp_path / f"{i}.log" for i in ("replica-a", "replica-b")}
    procs = {i: replica(fault_lab, i, zone.ns, logs[i]) for i in logs}

    def holder() -> str | None:
        try:
            lease = coord.read_namespaced_lease("gpufleet", zone.ns)
        except ApiException:
            return None
        return lease.spec.holder_identity or None

    try:
        leader = wait_for("a leader", holder, 90)
        standby = next(i for i in procs if i != leader)
        # the standby's informers synced too: it can bind as soon as it leads
        wait_for("both replicas serving", lambda: all(
            "/metrics" in logs[i].read_text() for i in procs), 90, logs[standby])
        flood = Flood(zone, FLOOD, pace_s=0.25).start()
        wait_for("the leader's first binds", lambda: bound_count(zone) >= 6, 90, logs[leader])
        procs[leader].send_signal(signal.SIGSTOP)
        before = bound_count(zone)
        wait_for("the standby to take the Lease", lambda: holder() == standby, LEASE_S + 30,
                 logs[standby])
        wait_for("the standby to bind", lambda: bound_count(zone) > before, 60, logs[standby])
        procs[leader].send_signal(signal.SIGCONT)
        fault_end = time.monotonic()
        wait_for("the old leader to step down", lambda: f"{leader}: not leading" in
                 logs[leader].read_text(), 30, logs[leader])
        flood.join()
        check_settled(zone, flood, fault_end, "stale-leader", t0, log=logs[standby],
                      stale_writes_dropped=logs[leader].read_text().count("dropped unwritten"))
        assert holder() == standby and procs[leader].poll() is None
        for p in zone.pods():  # the GPUs each pod was given are on the node it is bound to
            ann = p["metadata"].get("annotations") or {}
            if p["spec"].get("nodeName") and "gpufleet.io/node" in ann:
                assert ann["gpufleet.io/node"] == p["spec"]["nodeName"], p["metadata"]["name"]
    finally:
        stop_all(procs)
    check_claims_released(zone)


# -- 3. a node deleted while pods are bound to it -------------------------------------------
def bound_at(pod: dict[str, Any]) -> float | None:
    for c in (pod.get("status") or {}).get("conditions") or ():
        if c.get("type") == "PodScheduled" and c.get("status") == "True":
            return time.mktime(time.strptime(c["lastTransitionTime"], "%Y-%m-%dT%H:%M:%SZ")) \
                - time.timezone
    return None


def test_a_node_deleted_mid_flood_gets_no_more_pods(fault_lab: LabSession, zone: Zone) -> None:
    """A V100 node with pods on it is deleted while the flood binds. Its pods stay bound to the
    gone node (the controller-manager's pod GC deletes them after its quarantine; an owner
    would recreate them); gpufleet drops the node from its cache and binds nothing more there,
    claims of pods not yet bound there are released, and the rest settle on the other nodes."""
    t0 = time.monotonic()
    core = zone.core
    v100 = zone.nodes[2:4]  # the zone fixture's p3.8xlarge nodes
    ctl = start_controller(fault_lab.api)
    try:
        flood = Flood(zone, FLOOD).start()

        def victim() -> str | None:
            on = [p["spec"].get("nodeName") for p in zone.pods()]
            got = [n for n in v100 if n in on]
            return got[0] if got else None

        node = wait_for("a pod bound on a V100 node", victim, 60)
        core.delete_node(node)
        deleted = time.time()
        wait_for("the controller to drop the node", lambda: node not in {
            n["metadata"]["name"] for n in ctl.nodes.objects()}, 30)
        fault_end = time.monotonic()
        flood.join()
        figures = check_settled(zone, flood, fault_end, "node-deleted", t0)
        late = [p["metadata"]["name"] for p in zone.pods() if p["spec"].get("nodeName") == node
                and (bound_at(p) or 0) > deleted + 2]  # bound at a second's resolution
        assert not late, f"bound to {node} after it was deleted: {late}"
        for name, (reserved, pools, _) in claim_holders(zone).items():
            if node in pools:  # allocated on the gone node: only for a pod bound there
                assert all(core.read_namespaced_pod(r, zone.ns).spec.node_name == node
                           for r in reserved), (name, reserved)
        assert figures["bound"] > 0
    finally:
        ctl.stop()
    check_claims_released(zone)


# -- 4. a cloud launch whose Node never registers -------------------------------------------
def test_a_launch_that_never_registers_is_terminated_and_replaced(
        fault_lab: LabSession) -> None:
    """The capacity loop on the kwok cloud, no GPU node at first. The first launch's instance
    never becomes a Node (its pending launch is held back, as a VM that never boots), so the
    controller terminates it after ``registration_timeout_s`` (10 s here), launches a
    replacement, and every pod binds; no instance is left without a Node."""
    t0 = time.monotonic()
    ns = fault_lab.namespace("cloud")
    z = Zone(fault_lab, ns)
    core = fault_lab.core
    types = {CAT[t].name: CAT[t] for t in ("p3.8xlarge", "p4d.24xlarge")}
    sc = Scenario(name="fault-cloud", spot=False, instance_types=tuple(types),
                  max_pending_wait_s=1.0, provisioning_delay_s=3.0,
                  scale_down_unneeded_s=3600.0,
                  cloud=CloudSettings(name="kwok", registration_timeout_s=10.0,
                                      kwok=KwokSettings(namespace=ns)))
    kw = KwokProvider(core, types, None, namespace=ns)
    ctl = start_controller(fault_lab.api, sc, capacity_namespace=ns)
    held: list[str] = []
    stop = threading.Event()

    def hold_first_launch() -> None:
        """Push the first pending launch's boot time out of reach before it is due."""
        while not stop.is_set() and not held:
            for cm in core.list_namespaced_config_map(
                    ns, label_selector=f"{PENDING_LABEL}=true").items:
                core.patch_namespaced_config_map(cm.metadata.name, ns,
                                                 {"data": {"ready_at": repr(1e12)}})
                held.append(cm.data["name"])
                break
            time.sleep(0.05)

    holder = threading.Thread(target=hold_first_launch, daemon=True)
    holder.start()
    try:
        flood = Flood(z, CLOUD_FLOOD, selector=MANAGED).start()
        (instance,) = wait_for("the first launch, held back", lambda: held, 120)
        assert instance not in {n.metadata.name for n in core.list_node().items}
        wait_for("the held launch to be terminated", lambda: instance not in {
            i.instance_id for i in kw.list()}, 90)
        fault_end = time.monotonic()
        flood.join()

        def launched() -> dict[str, Any]:  # after settling: a pending pod may still launch
            return {"launches": int(sum(s.value for m in ctl.metrics.registry.collect()
                                        if m.name == "gpufleet_launches" for s in m.samples
                                        if s.name.endswith("_total")))}

        launches = check_settled(z, flood, fault_end, "launch-never-registers", t0,
                                 all_bound=True, after=launched)["launches"]
        assert ctl.metrics.registry.get_sample_value(
            "gpufleet_terminations_total", {"reason": "registration-timeout"}) == 1
        nodes = {n.metadata.name for n in core.list_node(label_selector=f"{TAG_MANAGED}=true")
                 .items}
        # no instance that no Node holds (a launch still booting would be PENDING)
        orphans = [i.instance_id for i in kw.list()
                   if i.instance_id not in nodes or i.state != InstanceState.RUNNING]
        assert not orphans, orphans
        # every launch but the held one became a Node: the pods it was for got a replacement
        assert instance not in nodes and len(nodes) == launches - 1, (sorted(nodes), launches)
    finally:
        stop.set()
        ctl.stop()
        holder.join(timeout=5)
    try:
        check_claims_released(z)
    finally:
        for inst in kw.list():
            kw.delete(inst.instance_id)
        core.delete_namespace(ns)
