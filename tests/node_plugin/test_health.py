"""GPU health: the XID → taint table, the tracker's transitions (lost GPUs stay published),
the metric and its HTTP endpoint, and the Node Event's body. The API server's acceptance of a
tainted slice and of the Event is in tests/node_plugin/test_health_live.py."""

from __future__ import annotations

import urllib.error
import urllib.request
from datetime import UTC, datetime

import pytest

from gpufleet.node_plugin import DRIVER, events
from gpufleet.node_plugin.health import DeviceHealth, HealthTracker, XidWatcher, xid_taint
from gpufleet.node_plugin.inventory import Gpu, InventoryError, nvml_gpus
from gpufleet.node_plugin.metrics import Metrics, serve

GPU0 = Gpu(uuid="GPU-0000", index=0, minor=0, product="NVIDIA H100", memoryMiB=81920)
GPU1 = Gpu(uuid="GPU-1111", index=1, minor=1, product="NVIDIA H100", memoryMiB=81920)
T0 = datetime(2026, 12, 7, 9, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(("xid", "taint"), [
    (79, ("xid-79", "NoExecute")),  # fallen off the bus
    (48, ("xid-48", "NoExecute")),  # double-bit ECC error
    (95, ("xid-95", "NoExecute")),  # uncontained ECC error: reset needed
    (119, ("xid-119", "NoExecute")),  # GSP RPC timeout
    (94, ("xid-94", "NoSchedule")),  # contained ECC error: only the faulting process ended
    (63, ("xid-63", "NoSchedule")),  # a row remapped: fine until the next reset
    (74, ("xid-74", "NoSchedule")),  # NVLink error
    (13, None),  # graphics engine exception: the application's fault
    (31, None),  # MMU fault (an illegal address in the application)
    (43, None),  # the application's work stopped
])
def test_which_xid_taints_how(xid: int, taint: tuple[str, str] | None) -> None:
    assert xid_taint(xid) == taint


def _tracker(*gpus: Gpu) -> HealthTracker:
    return HealthTracker(gpus, now=lambda: T0)


def test_a_lost_gpu_stays_published_with_a_noexecute_taint() -> None:
    t = _tracker(GPU0, GPU1)
    assert t.taints() == {} and all(h.healthy for h in t.health())
    version = t.version
    (change,) = t.observe([GPU0], {})  # GPU 1 gone from NVML / the device file
    new, old = change
    assert (new.device, new.reason, new.effect, old is not None and old.healthy) == (
        "gpu-1", "lost", "NoExecute", True)
    assert t.version == version + 1
    assert [g.uuid for g in t.gpus()] == ["GPU-0000", "GPU-1111"]  # still published
    assert t.taints() == {"gpu-1": [{"key": f"{DRIVER}/unhealthy", "value": "lost",
                                     "effect": "NoExecute", "timeAdded": "2026-12-07T09:00:00Z"}]}
    assert t.observe([GPU0], {}) == [] and t.version == version + 1  # no news, no change
    (change,) = t.observe([GPU0, GPU1], {})  # back (the same uuid)
    assert change[0].healthy and t.taints() == {}


def test_xids_from_the_device_file_and_from_nvml() -> None:
    t = _tracker(GPU0, GPU1)
    # the lab: the device file's entry carries the XID; a GPU node: NVML's events, by uuid
    (change,) = t.observe([GPU0.model_copy(update={"xid": 94}), GPU1], {})
    assert (change[0].device, change[0].reason, change[0].effect) == (
        "gpu-0", "xid-94", "NoSchedule")
    (change,) = t.observe([GPU0.model_copy(update={"xid": 94}), GPU1], {"GPU-0000": 79})
    assert (change[0].reason, change[0].effect, change[1] and change[1].reason) == (
        "xid-79", "NoExecute", "xid-94")  # a fatal XID over a non-fatal one
    assert t.observe([GPU0.model_copy(update={"xid": 94}), GPU1], {"GPU-0000": 79}) == []
    assert t.observe([GPU0, GPU1.model_copy(update={"xid": 13})], {}) == [
        (DeviceHealth("gpu-0", "GPU-0000"), DeviceHealth("gpu-0", "GPU-0000", "xid-79",
                                                          "NoExecute", T0))]  # 13: no taint


def test_another_gpu_under_a_lost_ones_name_replaces_it() -> None:
    t = _tracker(GPU0)
    t.observe([], {})
    assert t.health()[0].reason == "lost"
    swapped = GPU0.model_copy(update={"uuid": "GPU-9999"})  # the board replaced
    t.observe([swapped], {})
    assert [(h.device, h.uuid, h.reason) for h in t.health()] == [("gpu-0", "GPU-9999", None)]


def test_the_metric_has_one_series_per_device_and_is_served() -> None:
    m = Metrics()
    m.device(DeviceHealth("gpu-0", "GPU-0000"))
    m.device(DeviceHealth("gpu-1", "GPU-1111", "xid-79", "NoExecute", T0))
    m.track(lambda: 3, lambda: 1)
    m.prepare.labels("ok").inc(2)
    server = serve(m, 0, host="127.0.0.1")
    try:
        base = f"http://127.0.0.1:{server.server_port}"
        text = urllib.request.urlopen(f"{base}/metrics", timeout=10).read().decode()
        assert ('gpufleet_node_plugin_device_unhealthy{device="gpu-0",reason="",uuid="GPU-0000"}'
                ' 0.0') in text
        assert ('gpufleet_node_plugin_device_unhealthy{device="gpu-1",reason="xid-79",'
                'uuid="GPU-1111"} 1.0') in text
        assert 'gpufleet_node_plugin_prepare_total{result="ok"} 2.0' in text
        assert 'gpufleet_node_plugin_unprepare_total{result="error"} 0.0' in text
        assert "gpufleet_node_plugin_prepared_claims 3.0" in text
        assert "gpufleet_node_plugin_mps_daemons 1.0" in text
        # healthy again: the xid-79 series goes, one series for the device remains
        m.device(DeviceHealth("gpu-1", "GPU-1111"))
        text = urllib.request.urlopen(f"{base}/metrics", timeout=10).read().decode()
        assert 'reason="xid-79"' not in text
        assert 'device="gpu-1",reason="",uuid="GPU-1111"} 0.0' in text
        assert urllib.request.urlopen(f"{base}/healthz", timeout=10).read() == b"ok\n"
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(f"{base}/other", timeout=10)
    finally:
        server.shutdown()


def test_the_node_event_names_the_device_and_its_taint() -> None:
    bad = events.body("n1", "uid-1", DeviceHealth("gpu-1", "GPU-1111", "lost", "NoExecute", T0))
    assert (bad["reason"], bad["type"], bad["involvedObject"], bad["metadata"]["namespace"]) == (
        "GpuUnhealthy", "Warning", {"apiVersion": "v1", "kind": "Node", "name": "n1",
                                    "uid": "uid-1"}, "default")
    assert bad["message"] == (f"gpu-1 (GPU-1111) is unhealthy: lost; tainted "
                              f"{DRIVER}/unhealthy=lost:NoExecute")
    good = events.body("n1", "uid-1", DeviceHealth("gpu-1", "GPU-1111"))
    assert (good["reason"], good["type"]) == ("GpuHealthy", "Normal")


def test_without_an_nvidia_driver_nvml_says_so_and_reports_no_xids() -> None:
    """The NVML paths on a machine without the driver (the XID events themselves need a GPU
    node: NVML delivers them only from a real device)."""
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("NVML starts here: this checks the machine without a driver")
    with pytest.raises(InventoryError, match=r"NVML did not start .*Give --device-file"):
        nvml_gpus()
    watcher = XidWatcher(wait_ms=100).start()
    watcher.stop()
    assert watcher.xids() == {} and not watcher._thread.is_alive()
