"""DCGM rendering: dcgm-exporter's names, types, help strings and labels, exactly."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from gpufleet.metrics.dcgm import FIELDS, DcgmCollector
from gpufleet.metrics.snapshot import FleetSnapshot, GpuSample

# (name, type, help) transcribed from NVIDIA/dcgm-exporter etc/default-counters.csv
DEFAULT_COUNTERS = {
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
}


def _scrape(samples: list[GpuSample]) -> dict[str, Metric]:
    registry = CollectorRegistry()
    registry.register(DcgmCollector(lambda: samples))
    text = generate_latest(registry).decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_fields_match_dcgm_default_counters() -> None:
    assert {(f.name, f.kind, f.help) for f in FIELDS} == DEFAULT_COUNTERS


def test_exposition_names_types_help(snapshot: FleetSnapshot) -> None:
    fams = _scrape(list(snapshot.gpus))
    got = {(name, fam.type, fam.documentation) for name, fam in fams.items()}
    assert got == DEFAULT_COUNTERS


def test_labels_and_values(snapshot: FleetSnapshot) -> None:
    fams = _scrape(list(snapshot.gpus))
    util = fams["DCGM_FI_DEV_GPU_UTIL"].samples
    # NaN (not supported: MIG parent and instances) is left out, as dcgm-exporter does
    assert sorted((s.labels["Hostname"], s.labels["gpu"], s.value) for s in util) == [
        ("node-a", "0", 80.0),
        ("node-a", "1", 40.0),
        ("node-b", "0", 100.0),
    ]
    assert util[0].labels == {
        "gpu": "0",
        "UUID": "GPU-node-a-0",
        "device": "nvidia0",
        "modelName": "NVIDIA A100-SXM4-40GB",
        "Hostname": "node-a",
    }
    used = fams["DCGM_FI_DEV_FB_USED"].samples
    mig = sorted(
        (s.labels["GPU_I_PROFILE"], s.labels["GPU_I_ID"], s.labels["device"], s.value)
        for s in used
        if "GPU_I_PROFILE" in s.labels
    )
    assert mig == [("1g.5gb", "7", "nvidia1", 4000.0), ("3g.20gb", "1", "nvidia1", 9000.0)]
    assert sum(s.value for s in used) == 30000 + 10000 + 40000 + 4000 + 9000
    xid = {
        (s.labels["Hostname"], s.labels["gpu"]): s.value
        for s in fams["DCGM_FI_DEV_XID_ERRORS"].samples
    }
    assert xid[("node-b", "0")] == 79.0 and xid[("node-a", "0")] == 0.0


def test_removed_gpu_vanishes_between_scrapes(snapshot: FleetSnapshot) -> None:
    current = list(snapshot.gpus)
    registry = CollectorRegistry()
    registry.register(DcgmCollector(lambda: current))
    labels = {
        "gpu": "1",
        "UUID": "GPU-node-a-1",
        "device": "nvidia1",
        "modelName": "NVIDIA A100-SXM4-40GB",
        "Hostname": "node-a",
    }
    assert registry.get_sample_value("DCGM_FI_DEV_GPU_UTIL", labels) == 40.0
    current[:] = [g for g in current if g.hostname != "node-a"]
    assert registry.get_sample_value("DCGM_FI_DEV_GPU_UTIL", labels) is None
