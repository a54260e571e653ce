"""The controller under network and API faults, live: a fault matrix through a proxy.

Every cell runs the same flood in one zone — fractions of T4s, whole T4s, a gang of three, MIG
instances on an A100 node, and three pods whose GPU is a DRA ResourceClaim on a V100 node, more
than the zone holds — while one fault is on between the controller and the lab's real API server
(:mod:`api_fault_proxy`), then clears the fault and checks, from the API objects alone:

* no GPU, MIG slot, milli-GPU or claimed device given out twice (the over-commit checker);
* every pod bound, or refused with ``PodScheduled=False Unschedulable``, steadily; and no
  pending pod that a fresh plan over the final objects could place;
* every allocated claim reserved for a pod that exists and is bound; after the pods are deleted,
  every claim free of allocation, reservation and finalizer (the claims can then be deleted);
* the time from the fault clearing to that steady state, printed as one JSON line per cell.

Faults with the controller in the test's process: watch streams cut at random, watch streams
stalled past the resync, 429 with ``Retry-After`` on writes (each object written again no
sooner than asked), 409 on binds, 500 on any request, 500 on every bind (each pod tried again
only after its backoff, ``control.write_backoff``), slow responses. Kill -9 cells: the
controller runs as a subprocess and is killed right after one write step succeeded on the server
and before it saw the answer — a claim's finalizer, a claim's allocation and reservation, a
Binding, an Eviction (a high-priority pod preempting), a refusal's status — and a fresh
controller must finish the work.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from api_fault_proxy import FaultProxy
from dra_objects import claim_body
from kubernetes import client
from live_objects import absent, create_once_admitted
from live_wait import wait_for
from overcommit import cluster_overcommits, listed

from gpufleet.catalog.gpus import default_gpu_catalog
from gpufleet.config import default_scenario
from gpufleet.control.policies import backfill_pass, placement_policy
from gpufleet.decisions import Bind
from gpufleet.k8s.dra.claim_view import DraWorld
from gpufleet.k8s.dra.claims import FINALIZER
from gpufleet.k8s.schedule.controller import Controller
from gpufleet.k8s.schedule.cycle import plan_cycle
from gpufleet.k8s.translate.snapshot import build_snapshot
from gpufleet.lab.cluster import api_client

pytestmark = pytest.mark.live

ZONE = "topology.kubernetes.io/zone"
PRODUCT = "nvidia.com/gpu.product"
T4, V100 = "Tesla-T4", "Tesla-V100-SXM2-16GB"
GROUP, MIN_AVAILABLE = "scheduling.x-k8s.io/pod-group", "scheduling.x-k8s.io/min-available"
FAULT_S = 5.0  # how long a fault stays on with the flood in flight
SETTLE_S = 180.0  # the bound on settling after the fault: a loaded machine, not a target

# (how many, name, extended-resource limits, annotations, GPU product or None); the zone has
# 4 T4s (asked: 2 for the quarters, 2 + 2 whole, 3 for the gang), 8 A100s in MIG mode (16 1g,
# 8 2g, 8 3g slots; 9 3g asked) and 4 V100s for the three claims
FLOOD = [
    (8, "t4q", {}, {"gpu-fraction": "0.25"}, T4),
    (2, "t4one", {"nvidia.com/gpu": "1"}, {}, T4),
    (1, "t4two", {"nvidia.com/gpu": "2"}, {}, T4),
    (8, "mig1", {"nvidia.com/mig-1g.5gb": "1"}, {}, None),
    (4, "mig2", {"nvidia.com/mig-2g.10gb": "1"}, {}, None),
    (9, "mig3", {"nvidia.com/mig-3g.20gb": "1"}, {}, None),
]
GANG = 3
CLAIMS = 3
TOTAL = sum(n for n, *_ in FLOOD) + GANG + CLAIMS  # 38 pods


def pod(name: str, zone: str, limits: dict[str, str], ann: dict[str, str] | None = None,
        product: str | None = None, labels: dict[str, str] | None = None,
        claim: str | None = None, priority_class: str | None = None) -> dict[str, Any]:
    selector = {ZONE: zone, **({PRODUCT: product} if product else {})}
    container: dict[str, Any] = {
        "name": "main", "image": "registry.k8s.io/pause:3.10",
        "resources": {"limits": {"cpu": "100m", "memory": "128Mi", **limits}}}
    spec: dict[str, Any] = {"schedulerName": "gpufleet", "nodeSelector": selector,
                            "terminationGracePeriodSeconds": 0, "containers": [container]}
    if claim:
        container["resources"]["claims"] = [{"name": "gpu"}]
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": ann or {}, "labels": labels or {}},
            "spec": spec}


def flood(lab: Any, zone: str, cell: str) -> None:
    """Create the cell's claims, then its pods from 16 threads at once."""
    custom = client.CustomObjectsApi(lab.api)
    for i in range(CLAIMS):
        custom.create_namespaced_custom_object("resource.k8s.io", "v1", zone, "resourceclaims",
                                               claim_body(f"{cell}-c{i}", "gpu.nvidia.com", 1,
                                                          None, None))
    manifests = [pod(f"{cell}-{name}-{i}", zone, limits, ann, product)
                 for n, name, limits, ann, product in FLOOD for i in range(n)]
    manifests += [pod(f"{cell}-gang-{i}", zone, {"nvidia.com/gpu": "1"}, product=T4,
                      labels={GROUP: f"{cell}-gang"}, ann={MIN_AVAILABLE: str(GANG)})
                  for i in range(GANG)]
    manifests += [pod(f"{cell}-dra-{i}", zone, {}, product=V100, claim=f"{cell}-c{i}")
                  for i in range(CLAIMS)]
    assert len(manifests) == TOTAL
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda m: lab.core.create_namespaced_pod(zone, m, _preload_content=False),
                      manifests))


def raw_pods(core: Any, ns: str) -> list[dict[str, Any]]:
    return list(json.loads(core.list_namespaced_pod(ns, _preload_content=False).data)["items"])


def refused(p: dict[str, Any]) -> bool:
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False"
               and c.get("reason") == "Unschedulable"
               for c in (p.get("status") or {}).get("conditions") or ())


def settled(core: Any, ns: str, total: int) -> dict[str, int] | None:
    """Counts once all ``total`` pods of ``ns`` (0: however many there are) are bound or
    refused as Unschedulable (else None)."""
    pods = raw_pods(core, ns)
    total = total or len(pods)
    bound = sum(1 for p in pods if p["spec"].get("nodeName"))
    no = sum(1 for p in pods if not p["spec"].get("nodeName") and refused(p))
    if len(pods) < total or bound + no < total:
        return None
    return {"bound": bound, "refused": no}


def converge(core: Any, ns: str, total: int, since: float) -> tuple[dict[str, int], float]:
    """Wait until every pod is bound or refused and stays so over three polls a second apart
    (a refusal may be written just before room appears; the next cycle then binds the pod);
    the counts, and the seconds from ``since`` to the first of those polls."""
    history: list[tuple[float, dict[str, int] | None]] = []

    def steady() -> dict[str, int] | None:
        history.append((time.monotonic(), settled(core, ns, total)))
        last = [c for _, c in history[-3:]]
        return last[0] if len(last) == 3 and last[0] and last.count(last[0]) == 3 else None

    counts = wait_for("every pod bound or Unschedulable, steadily", steady, SETTLE_S, poll_s=1.0)
    return counts, history[-3][0] - since


def under_fault(core: Any, ns: str, start: float) -> float | None:
    """Poll while the fault stays on (until ``FAULT_S`` after ``start``): the seconds from
    ``start`` until every pod was first bound or refused, None if not within the fault."""
    first = None
    while (now := time.monotonic()) < start + FAULT_S:
        if first is None and settled(core, ns, TOTAL):
            first = round(now - start, 2)
        time.sleep(0.5)
    return first


def check_world(lab: Any, zone: str) -> dict[str, Any]:
    """The checks after settling, from the API objects alone: no over-commit, no pending pod a
    fresh plan places, every allocated claim reserved for a bound pod that exists."""
    found = cluster_overcommits(lab.core)
    assert not found, [str(f) for f in found]
    res = client.ResourceV1Api(lab.api)
    nodes = listed(lab.core.list_node)
    pods = [p for p in listed(lab.core.list_pod_for_all_namespaces)
            if p["metadata"]["namespace"] == zone]
    claims = [c for c in listed(res.list_resource_claim_for_all_namespaces)
              if c["metadata"]["namespace"] == zone]
    dra = DraWorld.of(listed(res.list_resource_slice), claims, listed(res.list_device_class),
                      default_gpu_catalog())
    snap = build_snapshot(nodes, pods, dra=dra)
    scenario = default_scenario()
    plan = plan_cycle(snap, placement_policy(scenario), np.random.default_rng(0),
                      backfill_pass(scenario), preemption=False)
    placeable = [b.job_id for b in plan.of(Bind)]
    assert not placeable, f"pending pods that fit but were left: {placeable}"
    bound = {p["metadata"]["uid"]: p for p in pods if p["spec"].get("nodeName")}
    for c in claims:
        status = c.get("status") or {}
        if not status.get("allocation"):
            continue
        owners = [r["uid"] for r in status.get("reservedFor") or ()]
        assert owners and all(u in bound for u in owners), (
            f"claim {c['metadata']['name']} allocated for no bound pod: {owners}")
    return {"claims_allocated": sum(1 for c in claims
                                    if (c.get("status") or {}).get("allocation"))}


def clean_cell(lab: Any, zone: str) -> None:
    """Delete the cell's pods; then every claim must lose its allocation, reservation and
    finalizer (the claim controller frees a claim whose pod is gone) and be deletable."""
    core = lab.core
    core.delete_collection_namespaced_pod(zone, grace_period_seconds=0)
    wait_for("the cell's pods to go", lambda: not core.list_namespaced_pod(zone).items, 60)
    res = client.ResourceV1Api(lab.api)

    def held() -> list[str]:
        out = []
        for c in listed(lambda **kw: res.list_namespaced_resource_claim(zone, **kw)):
            st, m = c.get("status") or {}, c["metadata"]
            if st.get("allocation") or st.get("reservedFor") or FINALIZER in (
                    m.get("finalizers") or ()):
                out.append(f"{m['name']}: allocated={bool(st.get('allocation'))} "
                           f"reserved={st.get('reservedFor')} finalizers={m.get('finalizers')}")
        return out

    wait_for("every claim freed of its deleted pod", lambda: not held(), 60)
    res.delete_collection_namespaced_resource_claim(zone)
    wait_for("the claims to go", lambda: not listed(
        lambda **kw: res.list_namespaced_resource_claim(zone, **kw)), 30)


@pytest.fixture(scope="module")
def zone(lab: Any) -> Iterator[str]:
    """A namespace and, in a zone of its name, 1 g4dn.12xlarge (4 T4), 1 p3.8xlarge (4 V100)
    and 1 p4d.24xlarge in MIG mode (8 A100, all-balanced)."""
    ns = lab.namespace("fault")
    nodes = (lab.add_instance_nodes("g4dn.12xlarge", 1, zone=ns, prefix=ns)
             + lab.add_instance_nodes("p3.8xlarge", 1, zone=ns, prefix=ns)
             + lab.add_instance_nodes("p4d.24xlarge", 1, zone=ns, prefix=ns,
                                      mig_config="all-balanced"))
    yield ns
    core = lab.core
    core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
    wait_for("the zone's pods to go", lambda: not core.list_namespaced_pod(ns).items, 60)
    for n in nodes:
        core.delete_node(n)
    core.delete_namespace(ns)


@pytest.fixture()
def cleaned(lab: Any, zone: str) -> Iterator[None]:
    """After the cell (passed or not): its pods deleted and its claims freed and deleted
    (:func:`clean_cell`), so the next cell starts on an empty zone."""
    yield
    clean_cell(lab, zone)


@pytest.fixture(scope="module")
def proxy(lab: Any) -> Iterator[FaultProxy]:
    with FaultProxy(lab.kubeconfig) as p:
        yield p


@pytest.fixture()
def proxied(proxy: FaultProxy, tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig through the proxy; every fault cleared after the test."""
    proxy.clear()
    yield proxy.kubeconfig(tmp_path / "proxy.kubeconfig")
    proxy.clear()


def stop_through(proxy: FaultProxy, ctl: Controller) -> None:
    """Stop a controller whose watches go through ``proxy``: its informers leave a watch at
    the stream's next event, so the proxy ends the streams rather than the test waiting."""
    ctl.stop_event.set()
    proxy.cut_watches()
    ctl.stop()


def retry_gaps(log: list[tuple[float, str, str, int | str]], status: int) -> list[float]:
    """For each request answered ``status``, the seconds until the next request of the same
    method and path: the same object written again."""
    gaps = []
    for i, (t, method, path, got) in enumerate(log):
        if got != status:
            continue
        nxt = next((u for u, m, q, _ in log[i + 1:] if (m, q) == (method, path)), None)
        if nxt is not None:
            gaps.append(round(nxt - t, 3))
    return gaps


def report(cell: str, fault: str, counts: dict[str, int], took: float, **extra: Any) -> None:
    print("fault-matrix:", json.dumps({"cell": cell, "fault": fault, **counts,
                                       "converge_s": round(took, 2), **extra}))


# -- the proxy itself ------------------------------------------------------------------------
def test_the_proxy_forwards_injects_and_kills(lab: Any, zone: str, proxy: FaultProxy,
                                              proxied: Path) -> None:
    """Reads and a watch go through; an injected 429 reaches the client with ``Retry-After``
    and a ``Status`` body; a kill-on-write kills its process after the write took effect."""
    core = client.CoreV1Api(api_client(proxied))
    assert core.read_namespace(zone).metadata.name == zone
    proxy.inject("POST", rf"/namespaces/{zone}/configmaps$", 429, 1.0, retry_after_s=7)
    with pytest.raises(client.exceptions.ApiException) as err:
        core.create_namespaced_config_map(zone, {"metadata": {"name": "x"}})
    assert err.value.status == 429 and err.value.headers["Retry-After"] == "7"
    body = json.loads(err.value.body)
    assert body["kind"] == "Status" and body["details"]["retryAfterSeconds"] == 7
    proxy.clear()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        rule = proxy.kill_on_write("POST", rf"/namespaces/{zone}/configmaps$", sleeper.pid)
        with pytest.raises(Exception):  # noqa: B017 - the connection is cut, however it shows
            core.create_namespaced_config_map(zone, {"metadata": {"name": "killed"}})
        assert sleeper.wait(10) == -9 and rule.fired[0][2] == 201
        assert lab.core.read_namespaced_config_map("killed", zone)  # the write took effect
    finally:
        sleeper.kill()
        sleeper.wait()
    lab.core.delete_namespaced_config_map("killed", zone)


# -- faults with the controller in this process ----------------------------------------------
def cells_in_process(zone: str) -> dict[str, tuple[str, Any]]:
    ns = rf"/namespaces/{zone}/"
    return {
        "watch-drop": ("20 % of requests and every watch cut at random (each within 2 s)",
                       lambda p: p.drop(0.2, watch_lifetime_s=2.0)),
        "watch-stall": ("every watch stream held for 8 s (resync 0.5 s)",
                        lambda p: p.stall(8.0)),
        "429-writes": ("429 + Retry-After: 1 on 30 % of the zone's writes",
                       lambda p: p.inject("POST|PUT|PATCH", ns, 429, 0.3, retry_after_s=1)),
        "409-binds": ("409 on 30 % of binds",
                      lambda p: p.inject("POST", rf"{ns}bindings$", 409, 0.3)),
        "500-any": ("500 on 20 % of every request",
                    lambda p: p.inject(".*", ".", 500, 0.2)),
        "500-binds-all": ("500 on every bind",
                          lambda p: p.inject("POST", rf"{ns}bindings$", 500, 1.0)),
        "slow": ("1.5 s delay on 30 % of every request",
                 lambda p: p.slow(".*", ".", 1.5, 0.3)),
    }


@pytest.mark.parametrize("cell", ["watch-drop", "watch-stall", "429-writes", "409-binds",
                                  "500-any", "500-binds-all", "slow"])
def test_a_fault_during_a_flood(lab: Any, zone: str, proxy: FaultProxy, proxied: Path,
                                cleaned: None, cell: str) -> None:
    fault, switch_on = cells_in_process(zone)[cell]
    ctl = Controller(api_client(proxied), default_scenario(), leader_elect=False, resync_s=0.5)
    ctl.start()
    try:
        wait_for("informers to sync", ctl.ready, 60)
        before = dict(proxy.counts)
        log_from = len(proxy.log)
        switch_on(proxy)
        start = time.monotonic()
        flood(lab, zone, cell)
        under = under_fault(lab.core, zone, start)
        proxy.clear()
        cleared = time.monotonic()
        counts, took = converge(lab.core, zone, TOTAL, cleared)
        did = {k: v - before.get(k, 0) for k, v in proxy.counts.items()
               if v - before.get(k, 0) and k != "requests"}
        assert did, f"the fault never fired: {proxy.counts}"
        extra = check_world(lab, zone)
        sample = ctl.metrics.registry.get_sample_value
        relists = sum(sample("gpufleet_informer_relists_total", {"resource": r}) or 0
                      for r in ("pods", "nodes", "resourceclaims"))
        figures: dict[str, Any] = {
            "relists": relists, "conflicts_409": sample("gpufleet_bind_conflicts_total"),
            "errors": sample("gpufleet_scheduling_attempts_total", {"result": "error"}),
            "cycles": ctl.cycles}
        if cell == "watch-drop":  # the cut streams ended in fresh lists (3 at the start)
            assert relists > 3, figures
        if cell == "409-binds":  # each injected 409 was taken as a conflict, not an error
            assert figures["conflicts_409"] >= did["injected_409"], figures
        if cell == "500-binds-all":  # each pod's bind tried again only after its backoff
            tries = Counter(path for _, _, path, got in proxy.log[log_from:] if got == 500)
            figures["max_failed_binds_per_pod"] = max(tries.values())
            # 1 + 1 + 2 s of backoff fit 4 tries into the 5 s fault; none per cycle
            assert max(tries.values()) <= 5, tries.most_common(3)
        if cell == "429-writes":
            gaps = sorted(retry_gaps(proxy.log[log_from:], 429))
            figures["retry_gaps_s"] = gaps
            # the same object written again no sooner than Retry-After (1 s) asked
            assert gaps and gaps[0] >= 0.95, f"Retry-After ignored: {gaps}"
        report(cell, fault, counts, took, settled_under_fault_s=under, proxy=did, **figures,
               **extra)
        assert counts["bound"] > 0 and counts["refused"] > 0
    finally:
        proxy.clear()
        stop_through(proxy, ctl)


# -- kill -9 right after a write step ---------------------------------------------------------
# the write (method, path under the zone's namespace) after whose success the first controller
# dies: the claim's finalizer (a patch of the claim's metadata), its allocation and reservation
# (its status), the Binding, an Eviction, a refusal's PodScheduled condition
KILL_STEPS = {
    "claim-finalizer": ("PATCH", r"/resourceclaims/[^/]+$"),
    "claim-status": ("PUT", r"/resourceclaims/[^/]+/status$"),
    "binding": ("POST", r"/bindings$"),
    "eviction": ("POST", r"/pods/[^/]+/eviction$"),
    "refusal": ("PATCH", r"/pods/[^/]+/status$"),
}


def controller_process(kubeconfig: Path, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "gpufleet", "controller", "--kubeconfig", str(kubeconfig),
         "--no-leader-elect", "--port", "0"],
        stdout=log.open("w"), stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})


@pytest.mark.parametrize("step", list(KILL_STEPS))
def test_kill_9_right_after_a_write_step(lab: Any, zone: str, proxy: FaultProxy,
                                         proxied: Path, cleaned: None, tmp_path: Path,
                                         step: str) -> None:
    """The first controller (a subprocess, through the proxy) is killed -9 once its write
    step succeeded on the server, before it saw the answer; a fresh controller must finish
    from the API alone: nothing double-booked, every pod bound or refused, no claim held."""
    method, suffix = KILL_STEPS[step]
    path = rf"/namespaces/{zone}{suffix}"
    log = tmp_path / "first.log"
    first = controller_process(proxied, log)
    pc = f"{zone}-high"
    sched = client.SchedulingV1Api(lab.api)
    try:
        if step == "eviction":  # the flood settles; then a high-priority pod must evict one
            flood(lab, zone, step)
            converge(lab.core, zone, TOTAL, time.monotonic())
            sched.create_priority_class({"metadata": {"name": pc}, "value": 1000})
            rule = proxy.kill_on_write(method, path, first.pid)
            create_once_admitted(lambda: lab.core.create_namespaced_pod(
                zone, pod(f"{step}-high", zone, {"nvidia.com/gpu": "1"}, product=T4,
                          priority_class=pc)), f"pod {step}-high admitted with class {pc}")
        else:
            rule = proxy.kill_on_write(method, path, first.pid)
            flood(lab, zone, step)
        wait_for(f"the first controller killed after its {step} write", lambda: rule.fired,
                 60, log=log)
        assert first.wait(10) == -9
        killed = time.monotonic()
        written = rule.fired[0][1]
        proxy.clear()
        ctl = Controller(api_client(proxied), default_scenario(), leader_elect=False,
                         resync_s=0.5)
        ctl.start()
        try:
            wait_for("the fresh controller's informers to sync", ctl.ready, 60)
            if step == "eviction":
                victim = written.split("/")[-2]
                wait_for("the evicted pod to go", lambda: absent(
                    lambda: lab.core.read_namespaced_pod(victim, zone)), 60)
                wait_for("the high-priority pod bound", lambda: lab.core.read_namespaced_pod(
                    f"{step}-high", zone).spec.node_name, SETTLE_S)
            counts, took = converge(lab.core, zone, 0 if step == "eviction" else TOTAL,
                                    killed)
            extra = check_world(lab, zone)
            if step.startswith("claim"):  # the claim written before the kill ends in use
                name = written.split("/")[7]
                claim = client.CustomObjectsApi(lab.api).get_namespaced_custom_object(
                    "resource.k8s.io", "v1", zone, "resourceclaims", name)
                assert (claim.get("status") or {}).get("reservedFor"), claim
                extra["claim"] = name
            if step == "refusal":  # the Event goes before the condition: both were written
                name = written.split("/")[-2]
                extra["refused_pod_has_event"] = any(
                    e.involved_object.name == name and e.reason == "FailedScheduling"
                    for e in lab.core.list_namespaced_event(zone).items)
                assert extra["refused_pod_has_event"], f"{name}: no FailedScheduling Event"
            report(f"kill-{step}", f"SIGKILL after {method} {suffix} succeeded", counts, took,
                   written=written, **extra)
        finally:
            stop_through(proxy, ctl)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
        if step == "eviction":
            sched.delete_priority_class(pc)
