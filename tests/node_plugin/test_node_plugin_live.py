"""``gpufleet node-plugin`` beside a real kubelet: registration, the slice, prepare, unprepare.

A lab of its own with no KWOK node, the default kube-scheduler and the real node (containerd 2.x and
the kubelet from deploy/testcluster/build.sh, Debian's runc; no chart, no gpufleet image: the pods
run a static C program that prints its environment and then waits, packed into an image here the
way the node packs its pause image). The plugin runs as a process on the host, pointed at the
kubelet's ``plugins_registry`` and ``plugins`` directories under its ``--root-dir``, with a device
file of two fake GPUs. Then, in order (the tests share the plugin):

1. the kubelet finds the registration socket and accepts the plugin (the plugin logs the
   kubelet's NotifyRegistrationStatus registered=true); the plugin's ResourceSlice for the real
   node is there, accepted by the API server's validation;
2. two pods, each with a claim for a share of GPU 0 (20 Gi + 30 % and 40 Gi + 50 %), are
   allocated by kube-scheduler (consumable capacity, shareIDs) and bound to the real node; the
   kubelet calls NodePrepareResources: each claim's CDI spec is there with its limits, and
   containerd applies it: each container prints the GPU's UUID and its claim's limits in its env;
3. the plugin is restarted: it reads its checkpoint and registers again; a third share of GPU 0,
   allocated by hand as a scheduler would, that does not fit beside the two prepared ones: the
   restarted plugin refuses it and the kubelet shows why in the pod's events;
4. deleting the pods makes the kubelet call NodeUnprepareResources on the restarted plugin: the
   specs and the checkpoint's entries go.

The kubelet sends the claims' CDI device IDs in the CRI's ``CDIDevices`` field; the lab's
containerd (2.x, CDI always on) reads the specs from the node's CDI directory
(:func:`gpufleet.lab.real_node.cdi_dir`, the plugin's ``--cdi-dir``) and adds their env to the
container. Needs root, runc, umoci, gcc and the CNI plugins, and containerd built by
deploy/testcluster/build.sh; skips without them, except under CI where it fails.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from live_skip import skip_or_fail
from live_wait import wait_for
from printenv_image import IMAGE, load_into_node, printed_env

from gpufleet.lab import processes, real_node
from gpufleet.lab.cluster import LabOptions, down, up
from gpufleet.lab.pki import ensure_pki
from gpufleet.lab.session import LabSession
from gpufleet.node_plugin import DRIVER
from gpufleet.node_plugin.inventory import Gpu
from gpufleet.node_plugin.slices import publish, slice_name

pytestmark = pytest.mark.live

GPUS = [
    {"uuid": "GPU-11111111-0000-0000-0000-000000000000", "index": 0, "minor": 0,
     "product": "NVIDIA H100 80GB HBM3", "memoryMiB": 81920},
    {"uuid": "GPU-22222222-0000-0000-0000-000000000000", "index": 1, "minor": 1,
     "product": "NVIDIA H100 80GB HBM3", "memoryMiB": 81920},
]
CLASS = "gpufleet-gpu-share"
# the pods' program: its environment, one variable a line, and a last line without "=" that says
# it is all there; then it waits like pause
# (claim, memory, cores): two shares of GPU 0, 20 Gi + 40 Gi ≤ 80 Gi and 30 + 50 ≤ 100 %
SHARES = (("share-a", "20Gi", "30"), ("share-b", "40Gi", "50"))


@dataclass
class Plugin:
    lab: LabSession
    process: processes.Running
    log: Path
    cdi_dir: Path
    checkpoint: Path
    kubelet_log: Path
    restart: Callable[[], processes.Running]  # stop the plugin (SIGTERM) and start it again


@pytest.fixture(scope="module")
def plugin(lab_binaries: Path) -> Iterator[Plugin]:
    why = real_node.missing_prerequisite()
    if why is not None:
        skip_or_fail(why)
    # a short directory: the kubelet's and the plugin's Unix socket paths live under it and a
    # socket path has at most 107 bytes
    directory = Path(tempfile.mkdtemp(prefix="gfnp-"))
    t0 = time.monotonic()
    proc = None
    try:
        info = up(LabOptions(directory=directory, nodes=[], controller=False,
                             kube_scheduler=True, device_plugin=True))
        lab = LabSession(info)

        def start(name: str, argv: Any, **kw: Any) -> processes.Running:
            return processes.start(name, argv, run_dir=directory / "run",
                                   log_dir=directory / "logs", **kw)

        real_node.start_node(directory, info.kubeconfig, ensure_pki(directory / "pki").ca.cert,
                             lab.api, start, timeout_s=180)
        t_node = time.monotonic() - t0
        load_into_node(directory)
        device_file = directory / "gpus.yaml"
        device_file.write_text(json.dumps({"gpus": GPUS}))
        kubelet_root = real_node.work_dir(directory) / "kubelet"
        argv = [
            sys.executable, "-m", "gpufleet", "node-plugin", "--node-name", real_node.NODE_NAME,
            "--kubeconfig", str(info.kubeconfig), "--device-file", str(device_file),
            "--kubelet-root-dir", str(kubelet_root), "--cdi-dir", str(real_node.cdi_dir(directory)),
            "--state-dir", str(directory / "plugin-state"),
            # fake GPUs: no MPS daemon to start, the limits in the env only; no metrics port
            "--no-mps-daemon", "--metrics-port", "0",
        ]
        proc = start("node-plugin", argv, env={"PYTHONUNBUFFERED": "1"})

        def restart() -> processes.Running:
            nonlocal proc
            assert proc is not None
            processes.stop(proc)
            # SIGTERM removed the sockets: the kubelet unregisters the plugin
            assert not (kubelet_root / "plugins_registry" / f"{DRIVER}-reg.sock").exists()
            assert not (kubelet_root / "plugins" / DRIVER / "dra.sock").exists()
            proc = start("node-plugin", argv, env={"PYTHONUNBUFFERED": "1"})
            return proc
        print(f"lab with the real node up in {t_node:.0f} s; plugin started at "
              f"{time.monotonic() - t0:.0f} s")
        yield Plugin(lab, proc, proc.log, real_node.cdi_dir(directory),
                     directory / "plugin-state" / "checkpoint.json",
                     directory / "logs" / "kubelet.log", restart)
    finally:
        if proc is not None:
            processes.stop(proc)
        down(directory)
        shutil.rmtree(directory, ignore_errors=True)


def _log(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def test_the_kubelet_registers_the_plugin_and_its_slice_is_published(plugin: Plugin) -> None:
    wait_for("the kubelet to accept the plugin (NotifyRegistrationStatus registered=true)",
             lambda: "registered with the kubelet" in _log(plugin.log), 90, log=plugin.log)
    assert plugin.process.alive()
    log = _log(plugin.log)
    assert "kubelet asked for the plugin's info (GetInfo)" in log
    assert "the kubelet refused" not in log
    # the kubelet opens the DRA health stream (ResourceHealthStatus, beta and on in 1.36) by
    # itself once the plugin is registered, and logs no error about it
    wait_for("the kubelet to watch the devices' health (NodeWatchResources)",
             lambda: "kubelet watches the devices' health" in _log(plugin.log), 60,
             log=plugin.log)
    assert not [line for line in _log(plugin.kubelet_log).splitlines()
                if DRIVER in line and line.startswith("E")]

    custom = client.CustomObjectsApi(plugin.lab.api)
    slice_ = wait_for("the plugin's ResourceSlice", lambda: _get_slice(custom), 60, log=plugin.log)
    spec = slice_["spec"]
    assert (spec["driver"], spec["nodeName"], spec["pool"]["name"]) == (
        DRIVER, real_node.NODE_NAME, real_node.NODE_NAME)
    assert [(d["name"], d["allowMultipleAllocations"], d["attributes"]["uuid"]["string"],
             d["capacity"]["memory"]["value"], d["capacity"]["cores"]["value"])
            for d in spec["devices"]] == [
        ("gpu-0", True, GPUS[0]["uuid"], "80Gi", "100"),  # 81920Mi, canonical
        ("gpu-1", True, GPUS[1]["uuid"], "80Gi", "100")]
    (owner,) = slice_["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("Node", real_node.NODE_NAME)
    # level-triggered: the same inventory again changes nothing, another one updates the slice
    gpus = [Gpu.model_validate(g) for g in GPUS]
    assert publish(plugin.lab.api, real_node.NODE_NAME, gpus) == "unchanged"
    smaller = [gpus[0], gpus[1].model_copy(update={"memory_mib": 40960})]
    assert publish(plugin.lab.api, real_node.NODE_NAME, smaller) == "updated"
    assert publish(plugin.lab.api, real_node.NODE_NAME, gpus) == "updated"
    again = _get_slice(custom)["spec"]
    assert again["pool"]["generation"] == spec["pool"]["generation"] + 2
    assert again["devices"][1]["capacity"]["memory"]["value"] == "80Gi"


def _get_slice(custom: Any) -> Any:
    try:
        return custom.get_cluster_custom_object("resource.k8s.io", "v1", "resourceslices",
                                                slice_name(real_node.NODE_NAME))
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _claim(name: str, memory: str, cores: str) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": CLASS, "count": 1,
                # both shares on GPU 0: two allocations of one device
                "selectors": [{"cel": {"expression":
                                       f"device.attributes['{DRIVER}'].index == 0"}}],
                "capacity": {"requests": {"memory": memory, "cores": cores}}}}]}}}


def _pod(name: str, claim: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
        "terminationGracePeriodSeconds": 0,
        "nodeSelector": {"kubernetes.io/hostname": real_node.NODE_NAME},
        "tolerations": [{"key": real_node.TAINT_KEY, "operator": "Exists",
                         "effect": "NoSchedule"}],
        "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
        "containers": [{"name": "main", "image": IMAGE,
                        "imagePullPolicy": "Never", "resources": {"claims": [{"name": "gpu"}]}}]}}


def _over_allocated_pod(lab: LabSession, custom: Any, ns: str) -> str:
    """A pod bound to the real node with a claim for 30 Gi and 10 % of GPU 0, allocated and
    reserved for the pod here, as a scheduler would (kube-scheduler itself would not: it counts
    the other two shares); the pod's name."""
    claim = custom.create_namespaced_custom_object(
        "resource.k8s.io", "v1", ns, "resourceclaims", _claim("share-over", "30Gi", "10"))
    pod = _pod("pod-share-over", "share-over")
    pod["spec"]["nodeName"] = real_node.NODE_NAME
    created = lab.core.create_namespaced_pod(ns, pod)
    claim["status"] = {
        "allocation": {
            "devices": {"results": [{
                "request": "gpu", "driver": DRIVER, "pool": real_node.NODE_NAME,
                "device": "gpu-0", "shareID": str(uuid.uuid4()),
                "consumedCapacity": {"memory": "30Gi", "cores": "10"}}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{
                "key": "metadata.name", "operator": "In", "values": [real_node.NODE_NAME]}]}]},
        },
        "reservedFor": [{"resource": "pods", "name": created.metadata.name,
                         "uid": created.metadata.uid}],
    }
    custom.replace_namespaced_custom_object_status(
        "resource.k8s.io", "v1", ns, "resourceclaims", "share-over", claim)
    return str(created.metadata.name)


def _events(lab: LabSession, ns: str, pod: str) -> list[str]:
    return [f"{e.type} {e.reason}: {e.message}" for e in lab.core.list_namespaced_event(
        ns, field_selector=f"involvedObject.name={pod}").items]


def _spec_file(plugin: Plugin, uid: str) -> Path:
    return plugin.cdi_dir / f"{DRIVER}-{uid}.json"


def test_a_pod_with_a_share_is_prepared_and_unprepared_by_the_kubelet(plugin: Plugin) -> None:
    lab = plugin.lab
    custom = client.CustomObjectsApi(lab.api)
    try:
        custom.create_cluster_custom_object("resource.k8s.io", "v1", "deviceclasses", {
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": CLASS},
            "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]}})
    except ApiException as exc:
        if exc.status != 409:
            raise
    ns = lab.namespace("share")
    for claim, memory, cores in SHARES:
        custom.create_namespaced_custom_object("resource.k8s.io", "v1", ns, "resourceclaims",
                                               _claim(claim, memory, cores))
        lab.core.create_namespaced_pod(ns, _pod(f"pod-{claim}", claim))

    def claims() -> dict[str, Any]:
        return {c["metadata"]["name"]: c for c in custom.list_namespaced_custom_object(
            "resource.k8s.io", "v1", ns, "resourceclaims")["items"]}

    def prepared() -> dict[str, Any] | None:
        got = claims()
        files = {n: _spec_file(plugin, c["metadata"]["uid"]) for n, c in got.items()}
        return got if all(f.is_file() for f in files.values()) else None

    t0 = time.monotonic()
    try:
        got = wait_for("NodePrepareResources to write both claims' CDI specs", prepared, 120,
                       log=plugin.log)
    except AssertionError as exc:
        events = {p: _events(lab, ns, f"pod-{p}") for p, _, _ in SHARES}
        raise AssertionError(f"{exc}\nevents: {events}") from None
    print(f"both claims prepared {time.monotonic() - t0:.1f} s after the pods were created")
    share_ids = set()
    for claim, memory, cores in SHARES:
        c = got[claim]
        (result,) = c["status"]["allocation"]["devices"]["results"]
        assert (result["driver"], result["pool"], result["device"]) == (
            DRIVER, real_node.NODE_NAME, "gpu-0")
        assert result["consumedCapacity"] == {"memory": memory, "cores": cores}
        share_ids.add(result["shareID"])
        uid = c["metadata"]["uid"]
        spec = json.loads(_spec_file(plugin, uid).read_text())
        assert spec["kind"] == f"{DRIVER}/claim"
        (device,) = spec["devices"]
        assert device["name"] == f"{uid}-gpu-0"
        mib = int(memory.removesuffix("Gi")) * 1024  # 20 Gi = 20480 MiB, 40 Gi = 40960 MiB
        uuid = GPUS[0]["uuid"]
        assert device["containerEdits"] == {"env": [
            f"NVIDIA_VISIBLE_DEVICES={uuid}", f"CUDA_VISIBLE_DEVICES={uuid}",
            f"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT={uuid}={mib}M",
            f"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={cores}"]}  # no /dev/nvidia0 on this host
    assert len(share_ids) == 2  # two allocations of one device
    checkpoint = json.loads(plugin.checkpoint.read_text())
    assert sorted(c["name"] for c in checkpoint["claims"].values()) == ["share-a", "share-b"]

    # the kubelet passes the claims' CDI device IDs; containerd adds the specs' env
    def started() -> list[str] | None:
        pods = [lab.core.read_namespaced_pod(f"pod-{c}", ns) for c, _, _ in SHARES]
        return [p.status.phase for p in pods] if all(
            p.status.phase != "Pending" for p in pods) else None

    try:
        phases = wait_for("the pods past Pending", started, 90)
    except AssertionError:
        phases = None
    for c, _, _ in SHARES:
        print(f"pod-{c}: {lab.core.read_namespaced_pod(f'pod-{c}', ns).status.phase}; "
              f"events: {_events(lab, ns, f'pod-{c}')}")
    assert phases == ["Running", "Running"], phases
    for claim, memory, cores in SHARES:
        env = wait_for(f"pod-{claim}'s printed environment", lambda c=claim: printed_env(
            lab.core, ns, f"pod-{c}"), 60)
        print(f"pod-{claim} env:", *(f"{k}={v}" for k, v in sorted(env.items())
                                     if k.startswith(("CUDA_", "NVIDIA_"))), sep="\n  ")
        uuid = GPUS[0]["uuid"]
        mib = int(memory.removesuffix("Gi")) * 1024
        assert {k: v for k, v in env.items() if k.startswith(("CUDA_", "NVIDIA_"))} == {
            "NVIDIA_VISIBLE_DEVICES": uuid, "CUDA_VISIBLE_DEVICES": uuid,
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"{uuid}={mib}M",
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": cores}

    # the plugin restarts (SIGTERM: it removes its sockets, the kubelet unregisters it); the new
    # process reads the checkpoint, registers again, and still counts both shares
    plugin.process = plugin.restart()
    wait_for("the restarted plugin registered again",
             lambda: _log(plugin.log).count("registered with the kubelet") == 2, 90,
             log=plugin.log)
    assert "checkpoint: 2 prepared claim(s)" in _log(plugin.log)

    # a third share allocated as a scheduler would that GPU 0 has no room for on this node:
    # 20 Gi + 40 Gi prepared + 30 Gi = 90 Gi > 80 Gi. The kubelet shows the plugin's refusal.
    refused = _over_allocated_pod(lab, custom, ns)
    try:
        events = wait_for("the kubelet's event with the plugin's refusal", lambda: [
            e for e in _events(lab, ns, refused) if "would be overcommitted" in e], 90,
            log=plugin.log)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nevents: {_events(lab, ns, refused)}") from None
    print(f"{refused}: {lab.core.read_namespaced_pod(refused, ns).status.phase}; "
          f"events: {events}")
    assert ("memory 61440 MiB prepared for 2 other share(s) + 30720 MiB asked > 81920 MiB"
            in events[0])
    assert lab.core.read_namespaced_pod(refused, ns).status.phase == "Pending"
    over_uid = claims()["share-over"]["metadata"]["uid"]
    assert not _spec_file(plugin, over_uid).exists()

    uids = [got[c]["metadata"]["uid"] for c, _, _ in SHARES] + [over_uid]
    t1 = time.monotonic()
    for pod in [f"pod-{c}" for c, _, _ in SHARES] + [refused]:
        lab.core.delete_namespaced_pod(pod, ns, grace_period_seconds=0)
    wait_for("NodeUnprepareResources to remove the CDI specs and the checkpoint's entries",
             lambda: not any(_spec_file(plugin, u).exists() for u in uids)
             and json.loads(plugin.checkpoint.read_text())["claims"] == {}, 120, log=plugin.log)
    print(f"both claims unprepared {time.monotonic() - t1:.1f} s after the pods were deleted")
    log = _log(plugin.log)
    assert all(f"unprepared {ns}/{c}" in log for c, _, _ in SHARES), log[-2000:]
    assert plugin.process.alive()
