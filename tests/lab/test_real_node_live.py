"""The chart installed by ``gpufleet lab up --real-node`` runs: its pods on a real kubelet.

A lab of its own (so nothing here can disturb the shared lab, nor it this): the KWOK GPU fleet
plus a real node (containerd 2.x and the kubelet built by deploy/testcluster/build.sh, runc), the
image ``make image`` builds imported into it, and the chart installed with two controller replicas
and leader election. Then, in order (the tests share the release, as an operator's day would):

1. the controller leads as a pod on the real node and serves /healthz and /metrics; the agent
   DaemonSet's pod stays Running there, not ready (no metadata service off-cloud);
2. the controller binds the examples (examples/) onto the KWOK GPU nodes; ``kubectl delete pod``
   of the leader: the other replica takes the Lease and binds a new pod;
3. ``helm uninstall`` leaves nothing of the release, in its namespace or cluster-wide.

Needs root, runc, umoci, gcc, containernetworking-plugins and the image tools
(``make image-deps``), and containerd built by deploy/testcluster/build.sh; skips without them,
except under CI where it fails.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import printenv_image
import pytest
from kubernetes import client
from live_skip import need_real_node_and_image
from live_wait import wait_for
from overcommit import assert_no_overcommit

from gpufleet.k8s.dra.shares import SHARE_CLASS
from gpufleet.k8s.translate.node_objects import KWOK_ANNOTATION
from gpufleet.lab import real_node, release
from gpufleet.lab.binaries import CONTAINERD_VERSION
from gpufleet.lab.cluster import LabOptions, down, up
from gpufleet.lab.processes import free_ports
from gpufleet.lab.real_node import NODE_NAME, TAINT_KEY, running_tasks
from gpufleet.lab.session import LabSession
from gpufleet.node_plugin import DRIVER as PLUGIN_DRIVER

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
NS = release.NAMESPACE


@pytest.fixture(scope="module")
def real_lab(lab_binaries: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabSession]:
    need_real_node_and_image()
    # an archive built already (e.g. by `make image` at another revision), else this checkout's
    prebuilt = os.environ.get("GPUFLEET_IMAGE_ARCHIVE")
    directory = tmp_path_factory.mktemp("real-node-lab")
    t0 = time.monotonic()
    try:
        info = up(LabOptions(directory=directory, controller=False, real_node=True,
                             device_plugin=True,
                             image=Path(prebuilt) if prebuilt else None))
    except BaseException:
        down(directory)
        raise
    print(f"lab with a real node and the chart up in {time.monotonic() - t0:.0f} s")
    try:
        yield LabSession(info)
    finally:
        down(directory)


def _pods(lab: LabSession, selector: str, namespace: str = NS) -> list[Any]:
    return list(lab.core.list_namespaced_pod(namespace, label_selector=selector).items)


def _ready(pod: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or ())


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _port(pod: Any) -> int:
    return int(pod.spec.containers[0].ports[0].container_port)


def _state(lab: LabSession) -> str:
    rows = [f"{p.metadata.namespace}/{p.metadata.name} {p.spec.node_name} {p.status.phase}"
            for p in lab.core.list_pod_for_all_namespaces().items]
    return "\n".join(rows)


def test_the_controller_leads_and_the_agent_runs_as_pods_on_the_real_node(
        real_lab: LabSession) -> None:
    lab = real_lab
    node = lab.core.read_node(NODE_NAME)
    assert KWOK_ANNOTATION not in (node.metadata.annotations or {})  # a kubelet's node
    # the containerd built from its Go module (which applies CDI), not a distribution's
    assert node.status.node_info.container_runtime_version.startswith(
        f"containerd://{CONTAINERD_VERSION.removeprefix('v')}"), node.status.node_info
    assert [t.key for t in node.spec.taints or ()] == ["gpufleet.io/system-only"]
    # the kubelet took the lab's settings: no eviction threshold on the host's shared disk
    # (a host disk past 85 % would otherwise taint the node and strand the Deployment)
    configz = json.loads(lab.core.connect_get_node_proxy_with_path(
        NODE_NAME, "configz", _preload_content=False).data)
    assert set(configz["kubeletconfig"]["evictionHard"].values()) == {"0%"}, configz
    assert configz["kubeletconfig"]["imageGCHighThresholdPercent"] == 100

    leader = release.lease_holder(lab.api)
    pods = {p.metadata.name: p for p in _pods(lab, release.CONTROLLER_SELECTOR)}
    assert leader in pods and _ready(pods[leader]), _state(lab)
    assert pods[leader].spec.node_name == NODE_NAME and pods[leader].spec.host_network
    port = _port(pods[leader])
    assert _get(f"http://127.0.0.1:{port}/healthz")[0] == 200
    code, metrics = _get(f"http://127.0.0.1:{port}/metrics")
    assert code == 200 and "gpufleet_leader 1.0" in metrics
    # the second replica: Pending, the host port is the leader's on the only node it may use
    others = [p for n, p in pods.items() if n != leader]
    assert len(others) == 1 and others[0].status.phase == "Pending", _state(lab)

    (agent,) = wait_for("the agent pod Running on the real node",
                        lambda: [p for p in _pods(lab, release.AGENT_SELECTOR)
                                 if p.status.phase == "Running"] or None, 120)
    assert agent.spec.node_name == NODE_NAME
    agent_port = _port(agent)
    code, text = wait_for("the agent's metrics",
                          lambda: (r := _get(f"http://127.0.0.1:{agent_port}/metrics"))[0] == 200
                          and r, 60)
    assert "gpufleet_agent_metadata_reachable 0.0" in text
    assert _get(f"http://127.0.0.1:{agent_port}/readyz")[0] == 503
    time.sleep(12)  # past the liveness probe's period and a few retries: still up, not restarted
    agent = lab.core.read_namespaced_pod(agent.metadata.name, NS)
    (status,) = agent.status.container_statuses
    assert agent.status.phase == "Running" and status.state.running is not None
    assert status.restart_count == 0 and not status.ready
    log = lab.core.read_namespaced_pod_log(agent.metadata.name, NS)
    assert log.count("has no providerID") == 1, log


def _example_pods(lab: LabSession, ns: str) -> list[Any]:
    return list(lab.core.list_namespaced_pod(ns).items)


def test_the_controller_binds_the_examples_and_a_replica_takes_over_from_its_leader(
        real_lab: LabSession) -> None:
    lab = real_lab
    ns = lab.namespace("examples")
    lab.kubectl("apply", "-n", ns, "-f", str(EXAMPLES))
    gpu_nodes = {n.metadata.name for n in lab.core.list_node().items
                 if KWOK_ANNOTATION in (n.metadata.annotations or {})}

    def all_bound() -> list[Any] | None:
        pods = _example_pods(lab, ns)
        # whole-GPU job 1, fractional 1, MIG 1, gang 2, preemptible 1
        return pods if len(pods) == 6 and all(p.spec.node_name for p in pods) else None

    try:
        pods = wait_for("the examples bound", all_bound, 120)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_state(lab)}") from None
    assert {p.spec.node_name for p in pods} <= gpu_nodes
    assert_no_overcommit(lab.core)

    leader = release.lease_holder(lab.api)
    lease_api = client.CoordinationV1Api(lab.api)
    before = lease_api.read_namespaced_lease("gpufleet-scheduler", NS).spec.lease_transitions or 0
    lab.kubectl("delete", "pod", "-n", NS, leader, "--wait=false")
    new_leader = wait_for(
        "another replica holding the Lease",
        lambda: (h := release.lease_holder(lab.api)) not in (None, leader)
        and any(p.metadata.name == h and _ready(p)
                for p in _pods(lab, release.CONTROLLER_SELECTOR)) and h, 180)
    lease = lease_api.read_namespaced_lease("gpufleet-scheduler", NS)
    assert (lease.spec.lease_transitions or 0) > before
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "after-takeover"},
           "spec": {"schedulerName": "gpufleet", "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                    "resources": {"limits": {"cpu": "1", "memory": "1Gi",
                                                             "nvidia.com/gpu": "1"}}}]}}
    lab.core.create_namespaced_pod(ns, pod)
    try:
        node = wait_for(f"the new leader {new_leader} to bind a new pod",
                        lambda: lab.core.read_namespaced_pod("after-takeover", ns).spec.node_name,
                        120)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_state(lab)}") from None
    assert node in gpu_nodes
    assert_no_overcommit(lab.core)
    lab.kubectl("delete", "namespace", ns, "--wait=false")


# the node plugin's fake GPUs on the real node (the device file the chart's ConfigMap carries)
PLUGIN_GPUS = [
    {"uuid": f"GPU-{i}{i}{i}{i}{i}{i}{i}{i}-0000-0000-0000-000000000000", "index": i, "minor": i,
     "product": "NVIDIA H100 80GB HBM3", "memoryMiB": 81920} for i in (1, 2)]
PLUGIN_SELECTOR = "app.kubernetes.io/component=node-plugin"
UNHELD = "main"  # the container whose env is read; the held pod's init container waits first


def _plugin_pids(kubelet_root: Path) -> list[int]:
    """The host PIDs of ``gpufleet node-plugin`` processes serving this kubelet."""
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"node-plugin" in argv and f"--kubelet-root-dir={kubelet_root}".encode() in argv:
            out.append(int(proc.name))
    return out


def _share_pod(name: str, *, fraction: str | None = None, claim: str | None = None,
               hold_s: int = 0) -> dict[str, Any]:
    """A pod gpufleet schedules onto the real node's plugin GPUs, running the printenv image:
    ``fraction`` through the gpu-fraction policy, or ``claim`` by name; ``hold_s``: an init
    container waits that long between the claim's prepare and the main container's start."""
    small = {"requests": {"cpu": "10m", "memory": "16Mi"},
             "limits": {"cpu": "100m", "memory": "32Mi"}}
    main: dict[str, Any] = {"name": UNHELD, "image": printenv_image.IMAGE,
                            "imagePullPolicy": "Never", "resources": dict(small)}
    spec: dict[str, Any] = {
        "schedulerName": "gpufleet", "terminationGracePeriodSeconds": 0,
        "tolerations": [{"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [main]}
    if hold_s:
        spec["initContainers"] = [{"name": "hold", "image": printenv_image.IMAGE,
                                   "imagePullPolicy": "Never", "args": [str(hold_s)],
                                   "resources": dict(small)}]
    meta: dict[str, Any] = {"name": name}
    if fraction is not None:
        meta["annotations"] = {"gpu-fraction": fraction}
    if claim is not None:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
        main["resources"] = {**small, "claims": [{"name": "gpu"}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def test_the_node_plugin_makes_gpufleets_shares_real_on_the_node(real_lab: LabSession) -> None:
    """The chart's node plugin on the real node (a device file of two 80 GiB H100s, no MPS
    daemon: no GPU here), the chart's gpu-fraction policy and share templates in one namespace.
    gpufleet (the chart's controller) binds four ``gpu-fraction: 0.25`` pods, whose claims the
    policy added, and a pod with a whole-GPU claim; the kubelet has the plugin prepare them and
    each container prints the GPU and limits its claim's CDI spec gave it. One quarter pod is
    held by an init container after its prepare: the plugin is killed with SIGKILL right then,
    the pod still starts with its env, the restarted plugin still knows the claim, and deleting
    the pods unprepares everything (CDI specs and checkpoint entries gone)."""
    lab = real_lab
    d = lab.directory
    kubelet_root = real_node.work_dir(d) / "kubelet"
    state = d / "plugin-state"
    cdi = real_node.cdi_dir(d)
    printenv_image.load_into_node(d)
    ns = lab.namespace("shares")
    values = json.loads(release.helm(lab.kubeconfig, "get", "values", release.RELEASE,
                                     "--namespace", NS, "-o", "json"))
    api = urllib.parse.urlsplit(lab.info.server)
    values["dra"] = {"gpuShares": {"enabled": True, "namespaces": [ns]}}
    values["nodePlugin"] = {
        "enabled": True, "nodeSelector": {"gpufleet.io/gpu-pool": None,
                                          "kubernetes.io/hostname": NODE_NAME},
        "tolerations": [{"key": TAINT_KEY, "operator": "Exists"}],
        "kubeletRootDir": str(kubelet_root), "cdiDir": str(cdi), "stateDir": str(state),
        "mpsDir": str(d / "mps"), "mpsDaemon": False, "metricsPort": free_ports(1)[0],
        "deviceFile": {"gpus": PLUGIN_GPUS}, "hostNetwork": True,
        "env": [{"name": "KUBERNETES_SERVICE_HOST", "value": api.hostname},
                {"name": "KUBERNETES_SERVICE_PORT", "value": str(api.port)}]}
    t0 = time.monotonic()
    release.upgrade(lab.kubeconfig, values)
    custom = client.CustomObjectsApi(lab.api)

    def plugin_slice() -> Any:
        got = custom.list_cluster_custom_object(
            "resource.k8s.io", "v1", "resourceslices",
            field_selector=f"spec.nodeName={NODE_NAME},spec.driver={PLUGIN_DRIVER}")["items"]
        return got[0] if got else None

    try:
        wait_for("the plugin's ResourceSlice for the real node", plugin_slice, 180)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_state(lab)}\n{release.describe(lab.kubeconfig)}"
                             ) from None
    print(f"node plugin up, slice published {time.monotonic() - t0:.1f} s after the upgrade")
    (plugin_pod,) = _pods(lab, PLUGIN_SELECTOR)
    assert plugin_pod.spec.node_name == NODE_NAME

    # the whole GPU: a claim on the plugin's class with no capacity request
    custom.create_namespaced_custom_object("resource.k8s.io", "v1", ns, "resourceclaims", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "whole"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": SHARE_CLASS}}]}}})
    lab.core.create_namespaced_pod(ns, _share_pod("whole", claim="whole"))
    for i in range(4):
        lab.core.create_namespaced_pod(ns, _share_pod(f"q{i}", fraction="0.25",
                                                      hold_s=8 if i == 0 else 0))

    def claim_of(pod: str) -> dict[str, Any] | None:
        p = lab.core.read_namespaced_pod(pod, ns)
        st = p.status.resource_claim_statuses or []
        name = "whole" if pod == "whole" else (st[0].resource_claim_name if st else None)
        if name is None:
            return None
        c = custom.get_namespaced_custom_object("resource.k8s.io", "v1", ns, "resourceclaims",
                                                name)
        return dict(c) if (c.get("status") or {}).get("allocation") else None

    # the held pod: SIGKILL the plugin once its claim is prepared, before its main container
    held = wait_for("q0's claim allocated", lambda: claim_of("q0"), 120)
    spec_file = cdi / f"{PLUGIN_DRIVER}-{held['metadata']['uid']}.json"
    wait_for("q0's claim prepared (its CDI spec written)", spec_file.is_file, 120)
    (pid,) = _plugin_pids(kubelet_root)
    os.kill(pid, signal.SIGKILL)
    status = lab.core.read_namespaced_pod("q0", ns).status
    assert not [c for c in status.container_statuses or () if c.state.running], \
        "q0's main container started before the plugin was killed"
    killed_at = time.monotonic()

    pods = ("whole", "q0", "q1", "q2", "q3")
    envs = {p: wait_for(f"{p}'s printed environment",
                        lambda p=p: printenv_image.printed_env(lab.core, ns, p), 120)
            for p in pods}
    print(f"every container printed its env {time.monotonic() - killed_at:.1f} s after the kill")
    restarted = wait_for(
        "the plugin restarted by the kubelet",
        lambda: (p := _pods(lab, PLUGIN_SELECTOR)) and p[0].status.container_statuses
        and p[0].status.container_statuses[0].restart_count >= 1
        and p[0].status.container_statuses[0].ready and p[0], 120)
    log = lab.core.read_namespaced_pod_log(restarted.metadata.name, NS,
                                           _preload_content=False).data.decode()
    # the restarted plugin read the held claim (and those prepared before it) from its checkpoint
    (line,) = [x for x in log.splitlines() if "checkpoint: " in x]
    assert held["metadata"]["uid"] in line, log

    by_uuid = {g["uuid"]: g for g in PLUGIN_GPUS}
    rows = []
    used: dict[str, tuple[int, int]] = {}
    for p in pods:
        claim = claim_of(p)
        assert claim is not None
        (r,) = claim["status"]["allocation"]["devices"]["results"]
        assert (r["driver"], r["pool"]) == (PLUGIN_DRIVER, NODE_NAME)
        env = envs[p]
        gpu = env["NVIDIA_VISIBLE_DEVICES"]
        assert gpu in by_uuid and env["CUDA_VISIBLE_DEVICES"] == gpu
        assert r["device"] == f"gpu-{by_uuid[gpu]['index']}"
        if p == "whole":  # the whole device: its limits are all of it, and it runs no MPS
            assert r["consumedCapacity"] == {"memory": "80Gi", "cores": "100"}
            assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"{gpu}=81920M"
            assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "100"
            assert "CUDA_MPS_PIPE_DIRECTORY" not in env
            mem, cores = 81920, 100
        else:  # a quarter: 20 GiB and 25 % of the SMs, as the template's gpu-80gi asks
            assert r["request"] == "gpu/gpu-80gi"
            assert r["consumedCapacity"] == {"memory": "20Gi", "cores": "25"}
            assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"{gpu}=20480M"
            assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
            mem, cores = 20480, 25
        m, c = used.get(gpu, (0, 0))
        used[gpu] = (m + mem, c + cores)
        rows.append(f"{p:6} {claim['metadata']['name']:40} {r['device']:6} "
                    f"{env.get('CUDA_MPS_PINNED_DEVICE_MEM_LIMIT', '-'):50} "
                    f"{env.get('CUDA_MPS_ACTIVE_THREAD_PERCENTAGE', '-')}")
    print("pod    claim                                    device memory limit" + " " * 38
          + "threads %", *rows, sep="\n")
    # gpufleet packs the four quarters onto one GPU and gives the whole one the other
    assert sorted(used.values()) == [(81920, 100), (81920, 100)], used

    prepared = {claim_of(p)["metadata"]["uid"] for p in pods}  # type: ignore[index]
    lab.core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)

    def unprepared() -> bool:
        left = [f for f in cdi.glob(f"{PLUGIN_DRIVER}-*.json")]
        book = json.loads((state / "checkpoint.json").read_text()).get("claims", {})
        return not left and not (set(book) & prepared)

    wait_for("every claim unprepared (CDI specs and checkpoint entries gone)", unprepared, 120)
    assert_no_overcommit(lab.core)
    lab.kubectl("delete", "namespace", ns, "--wait=false")


def _namespaced_leftovers(lab: LabSession) -> list[str]:
    kinds = lab.kubectl("api-resources", "--verbs=list", "--namespaced", "-o", "name").stdout
    got = lab.kubectl("get", ",".join(kinds.split()), "-n", NS, "-o", "json",
                      "--ignore-not-found").stdout
    items = json.loads(got)["items"] if got.strip() else []
    # what the cluster puts in every namespace (and Events, which expire), not the release's
    kept = {("ConfigMap", "kube-root-ca.crt"), ("ServiceAccount", "default")}
    return [f"{i['kind']}/{i['metadata']['name']}" for i in items
            if (i["kind"], i["metadata"]["name"]) not in kept and i["kind"] != "Event"]


def _cluster_leftovers(lab: LabSession) -> list[str]:
    kinds = lab.kubectl("api-resources", "--verbs=list", "--namespaced=false", "-o",
                        "name").stdout
    got = lab.kubectl("get", ",".join(kinds.split()), "-l",
                      f"app.kubernetes.io/instance={release.RELEASE}", "-o", "json").stdout
    return [f"{i['kind']}/{i['metadata']['name']}" for i in json.loads(got)["items"]]


def test_helm_uninstall_leaves_nothing_behind(real_lab: LabSession) -> None:
    lab = real_lab
    assert _cluster_leftovers(lab)  # the check sees the release's ClusterRoles etc. while it is in
    release.uninstall(lab.kubeconfig)
    try:
        wait_for("the release's objects gone",
                 lambda: not (_namespaced_leftovers(lab) or _cluster_leftovers(lab)), 120)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {_namespaced_leftovers(lab)} "
                             f"{_cluster_leftovers(lab)}") from None
    # and on the node: the kubelet has stopped every container the release's pods ran
    wait_for("no task left in the real node's containerd",
             lambda: not running_tasks(lab.directory), 60)
    # the node plugin's: its sockets (removed at SIGTERM), and its ResourceSlice (the kubelet
    # deletes a driver's slices once its plugin has been gone a while), no CDI spec
    kubelet_root = real_node.work_dir(lab.directory) / "kubelet"
    assert not list((kubelet_root / "plugins_registry").glob(f"{PLUGIN_DRIVER}*"))
    assert not list((kubelet_root / "plugins" / PLUGIN_DRIVER).glob("*.sock"))
    assert not list(real_node.cdi_dir(lab.directory).glob(f"{PLUGIN_DRIVER}-*"))
    custom = client.CustomObjectsApi(lab.api)
    wait_for("the node plugin's ResourceSlice deleted",
             lambda: not custom.list_cluster_custom_object(
                 "resource.k8s.io", "v1", "resourceslices",
                 field_selector=f"spec.driver={PLUGIN_DRIVER}")["items"], 120)
