"""The NVML collector against a fake NVML: pynvml's functions monkeypatched to return values in
the exact ctypes structures the real library returns (no GPU was available to record from, see
docs/monitoring.md for what this does and does not prove)."""

from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

import pynvml
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from gpufleet.metrics.dcgm import DcgmCollector
from gpufleet.metrics.nvml import MIB, NvmlReader, NvmlUnavailable, mig_profile_name

GPUFLEET = [sys.executable, "-c", "from gpufleet.cli import main; main()"]


def _err(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)  # pynvml maps the code to its NVMLError_* subclass


@dataclass
class FakeMig:
    name: str
    gi_id: int
    used_mib: int
    total_mib: int
    slices: int
    mem_mb: int


@dataclass
class FakeGpu:
    name: str
    uuid: str
    mig_mode: tuple[int, int] | None  # None: MIG not supported on this board
    util: tuple[int, int] | None  # None: not supported (MIG mode)
    used_mib: int
    total_mib: int
    temp_c: int
    power_mw: int | None
    sm_mhz: int
    migs: dict[int, FakeMig] = field(default_factory=dict)  # slot -> instance
    xid_events: list[int] | None = field(default_factory=list)  # None: events not supported


def _memory(used_mib: int, total_mib: int) -> pynvml.c_nvmlMemory_t:
    return pynvml.c_nvmlMemory_t(
        total=total_mib * MIB, free=(total_mib - used_mib) * MIB, used=used_mib * MIB
    )


class FakeNvml:
    """Stands in for libnvidia-ml behind pynvml's Python API (handles are our own objects)."""

    def __init__(self, gpus: list[FakeGpu]) -> None:
        self.gpus = gpus
        self.initialised = 0
        self.freed_sets = 0

    def install(self, mp: pytest.MonkeyPatch) -> None:
        fns: dict[str, Any] = {
            "nvmlInit": self.init,
            "nvmlShutdown": self.shutdown,
            "nvmlDeviceGetCount": lambda: len(self.gpus),
            "nvmlDeviceGetHandleByIndex": lambda i: self.gpus[i],
            "nvmlDeviceGetUUID": lambda h: h.uuid,
            "nvmlDeviceGetName": lambda h: h.name,
            "nvmlDeviceGetMigMode": self.mig_mode,
            "nvmlDeviceGetUtilizationRates": self.util,
            "nvmlDeviceGetMemoryInfo": lambda h: _memory(h.used_mib, h.total_mib),
            "nvmlDeviceGetTemperature": self.temperature,
            "nvmlDeviceGetPowerUsage": self.power,
            "nvmlDeviceGetClockInfo": self.clock,
            "nvmlDeviceGetMaxMigDeviceCount": lambda h: 7,
            "nvmlDeviceGetMigDeviceHandleByIndex": self.mig_handle,
            "nvmlDeviceGetAttributes": lambda m: pynvml.c_nvmlDeviceAttributes(
                gpuInstanceSliceCount=m.slices, memorySizeMB=m.mem_mb
            ),
            "nvmlDeviceGetGpuInstanceId": lambda m: m.gi_id,
            "nvmlEventSetCreate": lambda: [],
            "nvmlDeviceRegisterEvents": self.register,
            "nvmlEventSetWait_v2": self.wait,
            "nvmlEventSetFree": self.free,
        }
        for name, fn in fns.items():
            assert hasattr(pynvml, name), name  # the fake only patches functions that exist
            mp.setattr(pynvml, name, fn)

    def init(self) -> None:
        self.initialised += 1

    def shutdown(self) -> None:
        self.initialised -= 1

    @staticmethod
    def mig_mode(h: FakeGpu) -> list[int]:
        if h.mig_mode is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return list(h.mig_mode)

    @staticmethod
    def util(h: FakeGpu) -> pynvml.c_nvmlUtilization_t:
        if h.util is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return pynvml.c_nvmlUtilization_t(gpu=h.util[0], memory=h.util[1])

    @staticmethod
    def temperature(h: FakeGpu, sensor: int) -> int:
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return h.temp_c

    @staticmethod
    def power(h: FakeGpu) -> int:
        if h.power_mw is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return h.power_mw

    @staticmethod
    def clock(h: FakeGpu, kind: int) -> int:
        assert kind == pynvml.NVML_CLOCK_SM
        return h.sm_mhz

    @staticmethod
    def mig_handle(h: FakeGpu, slot: int) -> FakeMig:
        if slot not in h.migs:
            raise _err(pynvml.NVML_ERROR_NOT_FOUND)
        return h.migs[slot]

    @staticmethod
    def register(h: FakeGpu, mask: int, event_set: list[Any]) -> None:
        assert mask == pynvml.nvmlEventTypeXidCriticalError
        if h.xid_events is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        event_set.append(h)

    @staticmethod
    def wait(event_set: list[FakeGpu], timeout_ms: int) -> pynvml.c_nvmlEventData_t:
        assert timeout_ms == 0  # a scrape must never block on NVML events
        (h,) = event_set
        if not h.xid_events:
            raise _err(pynvml.NVML_ERROR_TIMEOUT)
        return pynvml.c_nvmlEventData_t(
            eventType=pynvml.nvmlEventTypeXidCriticalError, eventData=h.xid_events.pop(0)
        )

    def free(self, event_set: list[Any]) -> None:
        self.freed_sets += 1


def a100_with_mig() -> FakeGpu:
    # One 1g.5gb instance in slot 0 and a 3g.20gb in slot 2 whose name lacks the profile
    # (profile then comes from the instance attributes); slots 1, 3..6 are empty.
    return FakeGpu(
        name="NVIDIA A100-SXM4-40GB",
        uuid="GPU-5b1c8e46-6c2f-0c1b-6c70-3a4a0c7c7f1a",
        mig_mode=(pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_DEVICE_MIG_ENABLE),
        util=None,
        used_mib=9000,
        total_mib=40960,
        temp_c=35,
        power_mw=61234,
        sm_mhz=210,
        migs={
            0: FakeMig("NVIDIA A100-SXM4-40GB MIG 1g.5gb", 13, 13, 4864, 1, 4864),
            2: FakeMig("NVIDIA A100-SXM4-40GB", 2, 8192, 19968, 3, 19968),
        },
    )


def h100() -> FakeGpu:
    return FakeGpu(
        name="NVIDIA H100 80GB HBM3",
        uuid="GPU-0d6f4e2a-8d1e-4c55-9b1f-2f3c4d5e6f70",
        mig_mode=(0, 0),
        util=(87, 45),
        used_mib=70000,
        total_mib=81559,
        temp_c=62,
        power_mw=512345,
        sm_mhz=1980,
        xid_events=[13, 48],
    )


def t4() -> FakeGpu:
    return FakeGpu(
        name="Tesla T4",
        uuid="GPU-9a8b7c6d-0000-1111-2222-333344445555",
        mig_mode=None,
        util=(3, 1),
        used_mib=0,
        total_mib=15360,
        temp_c=31,
        power_mw=None,
        sm_mhz=300,
        xid_events=None,
    )


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    nvml = FakeNvml([a100_with_mig(), h100(), t4()])
    nvml.install(monkeypatch)
    return nvml


def test_reads_every_gpu_and_mig_instance(fake: FakeNvml) -> None:
    with NvmlReader(hostname="gpu-node-1") as reader:
        samples = reader.read()
    assert fake.initialised == 0  # shut down on exit
    assert fake.freed_sets == 3  # every event set, also the T4's unsupported one
    by_key = {(s.gpu, s.mig_id): s for s in samples}
    assert sorted(by_key, key=str) == sorted(
        [(0, None), (0, 13), (0, 2), (1, None), (2, None)], key=str
    )

    parent = by_key[0, None]
    assert parent.model_name == "NVIDIA A100-SXM4-40GB"
    assert parent.mig_profile is None
    assert math.isnan(parent.util_pct) and math.isnan(parent.mem_copy_util_pct)
    assert math.isnan(parent.fb_used_mib)  # left to the instances: no double counting
    assert (parent.temp_c, parent.power_w, parent.sm_clock_mhz) == (35.0, 61.234, 210.0)

    small = by_key[0, 13]
    assert (small.mig_profile, small.uuid, small.hostname) == ("1g.5gb", parent.uuid, "gpu-node-1")
    assert (small.fb_used_mib, small.fb_free_mib) == (13.0, 4851.0)
    assert math.isnan(small.temp_c) and math.isnan(small.util_pct)
    big = by_key[0, 2]
    assert big.mig_profile == "3g.20gb"  # from attributes: 3 slices, 19968 MB ~ 20 GB
    assert (big.fb_used_mib, big.fb_free_mib) == (8192.0, 11776.0)

    h = by_key[1, None]
    assert (h.util_pct, h.mem_copy_util_pct) == (87.0, 45.0)
    assert (h.fb_used_mib, h.fb_free_mib) == (70000.0, 11559.0)
    assert (h.temp_c, h.power_w, h.sm_clock_mhz) == (62.0, 512.345, 1980.0)
    assert h.xid_errors == 48  # the last of the two pending XIDs

    t = by_key[2, None]
    assert math.isnan(t.power_w) and t.xid_errors == 0 and t.fb_used_mib == 0.0


def test_xid_is_the_last_seen_and_persists(fake: FakeNvml) -> None:
    with NvmlReader(hostname="n") as reader:
        assert [s.xid_errors for s in reader.read() if s.gpu == 1] == [48]
        assert [s.xid_errors for s in reader.read() if s.gpu == 1] == [48]  # no new event
        fake.gpus[1].xid_events = [79]
        assert [s.xid_errors for s in reader.read() if s.gpu == 1] == [79]


def test_exposition_of_nvml_reading_has_dcgm_labels(fake: FakeNvml) -> None:
    registry = CollectorRegistry()
    with NvmlReader(hostname="gpu-node-1") as reader:
        registry.register(DcgmCollector(reader.read))
        text = generate_latest(registry).decode()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    used = fams["DCGM_FI_DEV_FB_USED"].samples
    fb = {(s.labels["gpu"], s.labels.get("GPU_I_ID")): s for s in used}
    assert set(fb) == {("0", "13"), ("0", "2"), ("1", None), ("2", None)}
    assert fb["0", "13"].labels == {
        "gpu": "0",
        "UUID": "GPU-5b1c8e46-6c2f-0c1b-6c70-3a4a0c7c7f1a",
        "device": "nvidia0",
        "modelName": "NVIDIA A100-SXM4-40GB",
        "Hostname": "gpu-node-1",
        "GPU_I_PROFILE": "1g.5gb",
        "GPU_I_ID": "13",
    }
    assert fb["0", "13"].value == 13.0
    power = {s.labels["gpu"]: s.value for s in fams["DCGM_FI_DEV_POWER_USAGE"].samples}
    assert power == {"0": 61.234, "1": 512.345}  # the T4 reports no power: no series


def test_gpu_that_disappears_leaves_the_exposition(fake: FakeNvml) -> None:
    registry = CollectorRegistry()
    with NvmlReader(hostname="n") as reader:
        registry.register(DcgmCollector(reader.read))
        assert registry.get_sample_value("DCGM_FI_DEV_GPU_TEMP", _labels(fake.gpus[2], 2)) == 31
        del fake.gpus[2]  # e.g. fell off the bus
        assert registry.get_sample_value("DCGM_FI_DEV_GPU_TEMP", _labels(t4(), 2)) is None


def _labels(g: FakeGpu, index: int) -> dict[str, str]:
    return {
        "gpu": str(index),
        "UUID": g.uuid,
        "device": f"nvidia{index}",
        "modelName": g.name,
        "Hostname": "n",
    }


def test_no_driver_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> None:
        raise _err(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", missing)
    with pytest.raises(NvmlUnavailable, match=r"NVML is not available.*--source sim"):
        NvmlReader().open()


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", "1g.5gb"),
        ("NVIDIA H100 80GB HBM3 MIG 3g.40gb", "3g.40gb"),
        ("NVIDIA A100-SXM4-80GB MIG 1g.10gb", "1g.10gb"),
        ("NVIDIA A30 MIG 2g.12gb", "2g.12gb"),
        ("NVIDIA A100-SXM4-40GB", "unknown"),
    ],
)
def test_mig_profile_from_name(name: str, expected: str) -> None:
    assert mig_profile_name(name) == expected


def _nvml_present() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


@pytest.mark.skipif(_nvml_present(), reason="NVML is present here: the no-driver path can't run")
def test_cli_without_nvml_prints_one_line_and_fails() -> None:
    proc = subprocess.run(
        [*GPUFLEET, "exporter", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "NVML is not available" in lines[0] and "--source sim" in lines[0]
    assert "Traceback" not in proc.stderr
