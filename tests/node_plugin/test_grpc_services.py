"""The kubelet's two gRPC APIs over their Unix sockets, called as the kubelet calls them (a gRPC
client of the generated stubs); claims come from a reader function here, from the API server in
tests/node_plugin/test_node_plugin_live.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from live_skip import skip_or_fail

from gpufleet.node_plugin import DRIVER, protos
from gpufleet.node_plugin.grpc_services import Servers, serve
from gpufleet.node_plugin.health import HealthTracker
from gpufleet.node_plugin.inventory import Gpu
from gpufleet.node_plugin.prepare import Preparer

NODE = "node-a"
GPU0 = Gpu(uuid="GPU-0000", index=0, minor=0, product="NVIDIA H100", memoryMiB=81920)
GPU1 = Gpu(uuid="GPU-1111", index=1, minor=1, product="NVIDIA H100", memoryMiB=81920)


def _claim(uid: str, name: str, memory: str, cores: str) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": name, "uid": uid}, "status": {"allocation": {
        "devices": {"results": [{
            "request": "gpu", "driver": DRIVER, "pool": NODE, "device": "gpu-0",
            "shareID": f"share-{uid}", "consumedCapacity": {"memory": memory, "cores": cores}}]}}}}


CLAIMS = {"a": _claim("ua", "a", "60Gi", "50"), "b": _claim("ub", "b", "30Gi", "10")}


@pytest.fixture
def plugin(tmp_path: Path) -> Iterator[tuple[Any, Servers, Preparer, HealthTracker]]:
    try:
        stubs = protos.load()
    except protos.ProtoError as exc:
        skip_or_fail(str(exc))
    preparer = Preparer(NODE, [GPU0], tmp_path / "cdi", tmp_path / "checkpoint.json")

    def read(namespace: str, name: str) -> dict[str, Any]:
        if name not in CLAIMS:
            raise LookupError(f"no claim {namespace}/{name}")
        return CLAIMS[name]

    # short paths: a Unix socket path has at most 107 bytes
    tracker = HealthTracker([GPU0, GPU1])
    servers = serve(stubs, preparer, read, tmp_path / "reg", tmp_path / "p", tracker=tracker)
    try:
        yield stubs, servers, preparer, tracker
    finally:
        servers.stop()


def test_registration_tells_the_kubelet_what_and_where_the_plugin_is(plugin: Any) -> None:
    stubs, servers, _, _ = plugin
    reg_sock, dra_sock = servers.sockets
    assert reg_sock.name == f"{DRIVER}-reg.sock" and dra_sock.name == "dra.sock"
    with grpc.insecure_channel(f"unix://{reg_sock}") as ch:
        reg = stubs.registration_grpc.RegistrationStub(ch)
        info = reg.GetInfo(stubs.registration.InfoRequest(), timeout=10)
        assert (info.type, info.name, info.endpoint, list(info.supported_versions)) == (
            "DRAPlugin", DRIVER, str(dra_sock), ["v1.DRAPlugin"])
        assert not servers.registration.registered.is_set()
        reg.NotifyRegistrationStatus(
            stubs.registration.RegistrationStatus(plugin_registered=True), timeout=10)
        assert servers.registration.registered.is_set()
        assert servers.registration.status == (True, "")


def test_prepare_and_unprepare_over_the_dra_socket(plugin: Any) -> None:
    stubs, servers, preparer, _ = plugin
    pb = stubs.dra
    with grpc.insecure_channel(f"unix://{servers.sockets[1]}") as ch:
        dra = stubs.dra_grpc.DRAPluginStub(ch)
        claims = [pb.Claim(namespace="ns", name=n, uid=c["metadata"]["uid"])
                  for n, c in CLAIMS.items()] + [pb.Claim(namespace="ns", name="gone", uid="ug")]
        got = dra.NodePrepareResources(pb.NodePrepareResourcesRequest(claims=claims), timeout=10)
        assert set(got.claims) == {"ua", "ub", "ug"}  # every claim answered
        (dev,) = got.claims["ua"].devices
        assert (list(dev.request_names), dev.pool_name, dev.device_name, dev.share_id,
                list(dev.cdi_device_ids)) == (["gpu"], NODE, "gpu-0", "share-ua",
                                              [f"{DRIVER}/claim=ua-gpu-0"])
        assert got.claims["ua"].error == ""
        # 60 Gi + 30 Gi = 90 Gi > 80 Gi: b is refused with the reason, the reader's error for "gone"
        assert "would be overcommitted: memory 61440 MiB prepared" in got.claims["ub"].error
        assert "reading claim ns/gone: LookupError" in got.claims["ug"].error
        assert sorted(preparer.claims) == ["ua"]

        un = dra.NodeUnprepareResources(pb.NodeUnprepareResourcesRequest(claims=claims),
                                        timeout=10)
        assert set(un.claims) == {"ua", "ub", "ug"}
        assert all(r.error == "" for r in un.claims.values())
        assert preparer.claims == {}
        assert not list(preparer.cdi_dir.glob("*.json"))


def test_the_kubelet_watches_each_devices_health_on_the_dra_socket(plugin: Any) -> None:
    stubs, servers, _, tracker = plugin
    pb = stubs.health
    with grpc.insecure_channel(f"unix://{servers.sockets[1]}") as ch:
        stream = stubs.health_grpc.DRAResourceHealthStub(ch).NodeWatchResources(
            pb.NodeWatchResourcesRequest(), timeout=30)

        def seen(resp: Any) -> list[tuple[str, str, int, str]]:
            return [(d.device.pool_name, d.device.device_name, d.health, d.message)
                    for d in resp.devices]

        first = next(stream)  # at once: every published device, pool = the node's name
        assert seen(first) == [(NODE, "gpu-0", pb.HEALTHY, ""), (NODE, "gpu-1", pb.HEALTHY, "")]
        assert all(d.health_check_timeout_seconds == 60 and d.last_updated_time > 0
                   for d in first.devices)
        tracker.observe([GPU0], {})  # GPU 1 lost: sent on the change, not at the heartbeat
        assert seen(next(stream)) == [(NODE, "gpu-0", pb.HEALTHY, ""),
                                      (NODE, "gpu-1", pb.UNHEALTHY, "GPU-1111: lost")]
        stream.cancel()
