"""Two controller replicas as real subprocesses behind one Lease; kill -9 of the leader.

The standby must take over within the lease duration (plus a retry period and the time to see a
pod), every pod that fits must end up bound, and nothing may be bound twice or share a GPU: the
cluster's pods, rebuilt into a FleetState from the API alone, must account without overcommit.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from live_wait import wait_for

from gpufleet.k8s.translate.snapshot import build_snapshot

pytestmark = pytest.mark.live

LEASE_S = 4



def pod(name: str, zone: str) -> dict:
    return {"metadata": {"name": name},
            "spec": {"schedulerName": "gpufleet", "terminationGracePeriodSeconds": 0,
                     "nodeSelector": {"topology.kubernetes.io/zone": zone},
                     "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                     "resources": {"limits": {"nvidia.com/gpu": "1",
                                                              "cpu": "1"}}}]}}


def test_kill_9_of_the_leader_hands_over_without_double_binding(lab: Any,
                                                                 tmp_path: Path) -> None:
    core, coord = lab.core, client.CoordinationV1Api(lab.api)
    ns = lab.namespace()
    nodes = lab.add_instance_nodes("g4dn.12xlarge", 2, zone=ns, prefix=ns)  # 8 T4s
    procs: dict[str, subprocess.Popen] = {}
    try:
        for ident in ("replica-a", "replica-b"):
            log = (tmp_path / f"{ident}.log").open("w")
            procs[ident] = subprocess.Popen(
                [sys.executable, "-m", "gpufleet", "controller", "--kubeconfig",
                 str(lab.kubeconfig), "--lease-namespace", ns, "--lease-name", "gpufleet",
                 "--lease-duration", str(LEASE_S), "--renew-deadline", "3",
                 "--retry-period", "0.5", "--port", "0", "--identity", ident],
                stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})

        def holder() -> str | None:
            try:
                lease = json.loads(coord.read_namespaced_lease("gpufleet", ns,
                                                               _preload_content=False).data)
            except client.exceptions.ApiException:
                return None
            return lease["spec"].get("holderIdentity") or None

        leader = wait_for("a leader", holder, 60)
        standby = next(i for i in procs if i != leader)
        for i in range(4):
            core.create_namespaced_pod(ns, pod(f"before-{i}", ns))

        def all_bound(prefix: str, n: int) -> bool:
            pods = [p for p in core.list_namespaced_pod(ns).items
                    if p.metadata.name.startswith(prefix)]
            return len(pods) == n and all(p.spec.node_name for p in pods)

        wait_for("the leader to bind the first pods", lambda: all_bound("before-", 4), 60)
        procs[leader].send_signal(signal.SIGKILL)
        procs[leader].wait(timeout=10)
        killed_at = time.monotonic()
        for i in range(4):
            core.create_namespaced_pod(ns, pod(f"after-{i}", ns))
        wait_for("the standby to bind the rest", lambda: all_bound("after-", 4), 60)
        took = time.monotonic() - killed_at
        assert holder() == standby
        assert took < LEASE_S + 10, f"takeover took {took:.1f} s"
        assert procs[standby].poll() is None
        # no pod bound twice, no GPU given to two pods: the API alone accounts cleanly
        raw_pods = json.loads(core.list_namespaced_pod(ns, _preload_content=False).data)["items"]
        raw_nodes = [json.loads(core.read_node(n, _preload_content=False).data) for n in nodes]
        snap = build_snapshot(raw_nodes, raw_pods)
        assert not snap.unaccounted and len(snap.allocations) == 8 and not snap.pending
        seen = set()
        for p in raw_pods:
            ann = p["metadata"]["annotations"]
            assert ann["gpufleet.io/node"] == p["spec"]["nodeName"]
            seen.add((p["spec"]["nodeName"], ann["gpufleet.io/gpus"]))
        assert len(seen) == 8  # eight distinct (node, GPU) pairs
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
        core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
        wait_for("pods to go", lambda: not core.list_namespaced_pod(ns).items, 60)
        for n in nodes:
            core.delete_node(n)
        core.delete_namespace(ns)
