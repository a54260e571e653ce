"""The node plugin's slice, health and MPS daemons against the lab's real kube-apiserver (no
kubelet needed): the API server accepts the attributes NVIDIA's driver publishes and the device
taints (DRADeviceTaints) and hands them back so that :func:`publish` sees no change; a lost GPU
stays in the slice, tainted, until it comes back; and ``gpufleet node-plugin`` as a process
starts, adopts and quits an MPS daemon (a stand-in: the real one needs a GPU) for a share and
taints, counts, reports and streams what the device file says failed."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import grpc
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from live_skip import skip_or_fail
from live_wait import wait_for

from gpufleet.lab import processes
from gpufleet.lab.session import LabSession
from gpufleet.node_plugin import DRIVER, events, protos, slices
from gpufleet.node_plugin.health import TAINT_KEY, HealthTracker
from gpufleet.node_plugin.inventory import Gpu
from gpufleet.node_plugin.mps import MpsManager

GPU0 = Gpu(uuid="GPU-aaaa0000-0000-0000-0000-000000000000", index=0, minor=0,
           product="NVIDIA H100 80GB HBM3", memoryMiB=81920, cudaDriverVersion="12.8",
           driverVersion="570.86.10", cudaComputeCapability="9.0", nvlinkDomain=0, xid=None)
GPU1 = GPU0.model_copy(update={"uuid": "GPU-aaaa1111-0000-0000-0000-000000000000", "index": 1,
                               "minor": 1})


def _slice(lab: LabSession, node: str) -> dict[str, Any]:
    return dict(client.CustomObjectsApi(lab.api).get_cluster_custom_object(
        slices.GROUP, slices.VERSION, slices.PLURAL, slices.slice_name(node)))


def _taints(live: dict[str, Any]) -> dict[str, list[tuple[str, str, str]]]:
    return {d["name"]: [(t["key"], t["value"], t["effect"]) for t in d.get("taints") or ()]
            for d in live["spec"]["devices"]}


def test_a_tainted_slice_is_accepted_read_back_and_updated(lab: LabSession) -> None:
    node = f"np-health-{uuid.uuid4().hex[:8]}"  # publish() owns the slice by the Node's uid
    lab.core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=node)))
    try:
        tracker = HealthTracker([GPU0, GPU1])
        tracker.observe([GPU0, GPU1.model_copy(update={"xid": 79})], {})
        assert slices.publish(lab.api, node, tracker.gpus(), tracker.taints()) == "created"
        live = _slice(lab, node)
        assert _taints(live) == {"gpu-0": [], "gpu-1": [(TAINT_KEY, "xid-79", "NoExecute")]}
        assert live["spec"]["devices"][1]["taints"][0]["timeAdded"]
        attrs = live["spec"]["devices"][0]["attributes"]
        assert {k: attrs[k] for k in ("type", "productName", "cudaDriverVersion",
                                      "driverVersion", "cudaComputeCapability",
                                      "nvlinkDomain")} == {
            "type": {"string": "gpu"}, "productName": {"string": "NVIDIA H100 80GB HBM3"},
            "cudaDriverVersion": {"version": "12.8.0"},
            "driverVersion": {"version": "570.86.10"},
            "cudaComputeCapability": {"version": "9.0.0"}, "nvlinkDomain": {"int": 0}}
        # what the API server wrote back (canonical quantities, its timeAdded) is no change
        assert slices.publish(lab.api, node, tracker.gpus(), tracker.taints()) == "unchanged"

        # GPU 0 lost: still published, tainted NoExecute; GPU 1 healthy again
        tracker.observe([GPU1], {})
        assert slices.publish(lab.api, node, tracker.gpus(), tracker.taints()) == "updated"
        live = _slice(lab, node)
        assert _taints(live) == {"gpu-0": [(TAINT_KEY, "lost", "NoExecute")], "gpu-1": []}
        assert live["spec"]["pool"]["generation"] == 2
        (lost,) = [h for h in tracker.health() if not h.healthy]

        events.post(lab.api, node, lost)

        def node_event() -> Any:
            found = lab.core.list_namespaced_event(
                "default", field_selector=f"involvedObject.name={node},reason=GpuUnhealthy")
            return found.items

        (ev,) = wait_for("the node's GpuUnhealthy event", node_event, timeout=60)
        assert (ev.involved_object.kind, ev.type) == ("Node", "Warning")
        assert ev.message == (f"gpu-0 ({GPU0.uuid}) is unhealthy: lost; tainted "
                              f"{DRIVER}/unhealthy=lost:NoExecute")

        tracker.observe([GPU0, GPU1], {})  # back
        assert slices.publish(lab.api, node, tracker.gpus(), tracker.taints()) == "updated"
        assert _taints(_slice(lab, node)) == {"gpu-0": [], "gpu-1": []}
    finally:
        client.CustomObjectsApi(lab.api).delete_cluster_custom_object(
            slices.GROUP, slices.VERSION, slices.PLURAL, slices.slice_name(node))
        lab.core.delete_node(node)


def _metric(port: int, line_start: str) -> float | None:
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    except OSError:
        return None
    for line in text.decode().splitlines():
        if line.startswith(line_start + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def _allocated_share(lab: LabSession, ns: str, node: str) -> dict[str, Any]:
    """A claim allocated by hand as a scheduler writes it: 20 GiB and 30 % of gpu-0."""
    custom = client.CustomObjectsApi(lab.api)
    claim = custom.create_namespaced_custom_object("resource.k8s.io", "v1", ns, "resourceclaims", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "share-a"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpufleet-gpu-share",
            "capacity": {"requests": {"memory": "20Gi", "cores": "30"}}}}]}}})
    claim["status"] = {"allocation": {
        "devices": {"results": [{
            "request": "gpu", "driver": DRIVER, "pool": node, "device": "gpu-0",
            "shareID": str(uuid.uuid4()), "consumedCapacity": {"memory": "20Gi", "cores": "30"}}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{
            "key": "metadata.name", "operator": "In", "values": [node]}]}]}}}
    return dict(custom.replace_namespaced_custom_object_status(
        "resource.k8s.io", "v1", ns, "resourceclaims", "share-a", claim))


def test_the_plugin_process_runs_mps_for_a_share_and_taints_what_fails(lab: LabSession) -> None:
    """``gpufleet node-plugin`` as its own process, on a Node object with no kubelet (its gRPC
    calls made here with the kubelet's stubs), an MPS stand-in, resync every second."""
    try:
        stubs = protos.load()
    except protos.ProtoError as exc:
        skip_or_fail(str(exc))
    node = f"np-proc-{uuid.uuid4().hex[:8]}"
    lab.core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=node)))
    directory = Path(tempfile.mkdtemp(prefix="gfnh-"))  # short: Unix socket paths ≤ 107 bytes
    control = directory / "bin" / "nvidia-cuda-mps-control"
    control.parent.mkdir()
    control.write_text(f"#!{sys.executable}\n" + (Path(__file__).parent / "mps_stand_in.py")
                       .read_text())
    control.chmod(0o755)
    mps = MpsManager(str(control), directory / "mps")
    device_file = directory / "gpus.json"
    device_file.write_text(json.dumps({"gpus": [
        g.model_dump(by_alias=True, exclude_none=True) for g in (GPU0, GPU1)]}))
    port = processes.free_port()
    dra_sock = directory / "kubelet" / "plugins" / DRIVER / "dra.sock"
    argv = [sys.executable, "-m", "gpufleet", "node-plugin", "--node-name", node,
            "--kubeconfig", str(lab.kubeconfig), "--device-file", str(device_file),
            "--kubelet-root-dir", str(directory / "kubelet"), "--cdi-dir", str(directory / "cdi"),
            "--state-dir", str(directory / "state"), "--resync-seconds", "1",
            "--metrics-port", str(port), "--mps-control", str(control),
            "--mps-dir", str(directory / "mps")]

    def start() -> processes.Running:
        return processes.start("node-plugin", argv, run_dir=directory / "run",
                               log_dir=directory / "logs", env={"PYTHONUNBUFFERED": "1"})

    proc = start()
    ns = lab.namespace("np-health")
    try:
        claim = _allocated_share(lab, ns, node)
        wait_for("the plugin's dra.sock and metrics",
                 lambda: dra_sock.exists() and _metric(port, "gpufleet_node_plugin_prepared_claims")
                 == 0, 60, log=proc.log)
        pb = stubs.dra
        request = pb.NodePrepareResourcesRequest(claims=[pb.Claim(
            namespace=ns, name="share-a", uid=claim["metadata"]["uid"])])
        with grpc.insecure_channel(f"unix://{dra_sock}") as ch:
            got = stubs.dra_grpc.DRAPluginStub(ch).NodePrepareResources(request, timeout=30)
        assert got.claims[claim["metadata"]["uid"]].error == ""
        pid = mps.pid(GPU0.uuid)
        assert pid is not None  # the share's GPU got its daemon, with its GPU alone visible
        assert json.loads((mps.log_dir(GPU0.uuid) / "env.json").read_text())[
            "CUDA_VISIBLE_DEVICES"] == GPU0.uuid
        spec = json.loads((directory / "cdi" / f"{DRIVER}-{claim['metadata']['uid']}.json")
                          .read_text())
        edits = spec["devices"][0]["containerEdits"]
        assert f"CUDA_MPS_PIPE_DIRECTORY={mps.pipe_dir(GPU0.uuid)}" in edits["env"]
        assert edits["mounts"][0]["hostPath"] == str(mps.pipe_dir(GPU0.uuid))
        assert _metric(port, "gpufleet_node_plugin_mps_daemons") == 1
        assert _metric(port, 'gpufleet_node_plugin_prepare_total{result="ok"}') == 1

        # a restarted plugin adopts the live daemon instead of starting a second one
        processes.stop(proc)
        proc = start()
        wait_for("the restarted plugin to adopt the daemon",
                 lambda: "adopted the control daemon" in proc.output(), 60, log=proc.log)
        assert (mps.log_dir(GPU0.uuid) / "starts").read_text().split() == [str(pid)]

        # the lab's health: GPU 0 gone from the device file, GPU 1 reports XID 79
        device_file.write_text(json.dumps({"gpus": [
            GPU1.model_dump(by_alias=True, exclude_none=True) | {"xid": 79}]}))
        wait_for("both devices tainted", lambda: _taints(_slice(lab, node)) == {
            "gpu-0": [(TAINT_KEY, "lost", "NoExecute")],
            "gpu-1": [(TAINT_KEY, "xid-79", "NoExecute")]}, 60, log=proc.log)
        unhealthy = "gpufleet_node_plugin_device_unhealthy"
        wait_for("the metric", lambda: _metric(
            port, f'{unhealthy}{{device="gpu-0",reason="lost",uuid="{GPU0.uuid}"}}') == 1
            and _metric(port, f'{unhealthy}{{device="gpu-1",reason="xid-79",uuid="{GPU1.uuid}"}}')
            == 1, 30, log=proc.log)
        wait_for("two GpuUnhealthy events on the node", lambda: len(lab.core.list_namespaced_event(
            "default", field_selector=f"involvedObject.name={node},reason=GpuUnhealthy").items)
            == 2, 60)
        hp = stubs.health
        with grpc.insecure_channel(f"unix://{dra_sock}") as ch:
            stream = stubs.health_grpc.DRAResourceHealthStub(ch).NodeWatchResources(
                hp.NodeWatchResourcesRequest(), timeout=30)
            first = next(stream)
            stream.cancel()
        assert [(d.device.pool_name, d.device.device_name, d.health) for d in first.devices] == [
            (node, "gpu-0", hp.UNHEALTHY), (node, "gpu-1", hp.UNHEALTHY)]

        # the lost GPU's claim is still unprepared; its daemon, the last share gone, quits
        with grpc.insecure_channel(f"unix://{dra_sock}") as ch:
            un = stubs.dra_grpc.DRAPluginStub(ch).NodeUnprepareResources(
                pb.NodeUnprepareResourcesRequest(claims=request.claims), timeout=30)
        assert un.claims[claim["metadata"]["uid"]].error == ""
        assert mps.pid(GPU0.uuid) is None
        processes.stop(proc)
        assert not dra_sock.exists()
        plugin_log = proc.log.read_text()
        print(plugin_log)
        assert "Traceback" not in plugin_log and "event for node" not in plugin_log
    finally:
        processes.stop(proc)
        for starts in (directory / "mps").glob("*/log/starts"):
            for p in starts.read_text().split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(p), signal.SIGKILL)
        with contextlib.suppress(ApiException):  # the claim first: it names the slice's device
            client.CustomObjectsApi(lab.api).delete_namespaced_custom_object(
                "resource.k8s.io", "v1", ns, "resourceclaims", "share-a")
        with contextlib.suppress(ApiException):
            client.CustomObjectsApi(lab.api).delete_cluster_custom_object(
                slices.GROUP, slices.VERSION, slices.PLURAL, slices.slice_name(node))
        lab.core.delete_node(node)
        shutil.rmtree(directory, ignore_errors=True)
