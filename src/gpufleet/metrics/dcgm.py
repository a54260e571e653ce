"""Render GPU samples exactly as NVIDIA's dcgm-exporter does, so its dashboards work unchanged.

Names, Prometheus types and help strings follow dcgm-exporter's ``etc/default-counters.csv``;
labels follow its exposition template: ``gpu``, ``UUID``, ``device`` (``nvidia<N>``),
``modelName``, ``Hostname``, and ``GPU_I_PROFILE``/``GPU_I_ID`` only on the series of a MIG
instance. Units are dcgm-exporter's (MiB, %, °C, W, MHz), not Prometheus base units, on purpose:
compatibility with existing dashboards and alerts wins over style here.

This is a custom collector rendering whatever the source returns at scrape time, so a GPU that
disappears (node terminated, MIG reconfigured) disappears from ``/metrics`` too, instead of
lingering as a stale gauge in a global registry.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from gpufleet.metrics.snapshot import GpuSample


@dataclass(frozen=True, slots=True)
class DcgmField:
    """One exported DCGM field: its name, Prometheus type, help text and where the value lives."""

    name: str
    kind: str  # "gauge" | "counter", as in default-counters.csv
    help: str
    value: Callable[[GpuSample], float]


# Help strings and types verbatim from dcgm-exporter's etc/default-counters.csv (note that
# DCGM_FI_DEV_XID_ERRORS is a gauge holding the *last* XID code, not a count).
FIELDS: tuple[DcgmField, ...] = (
    DcgmField(
        "DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", lambda s: s.sm_clock_mhz
    ),
    DcgmField("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", lambda s: s.temp_c),
    DcgmField("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", lambda s: s.power_w),
    DcgmField("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", lambda s: s.util_pct),
    DcgmField(
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "gauge",
        "Memory utilization (in %).",
        lambda s: s.mem_copy_util_pct,
    ),
    DcgmField(
        "DCGM_FI_DEV_XID_ERRORS",
        "gauge",
        "Value of the last XID error encountered.",
        lambda s: float(s.xid_errors),
    ),
    DcgmField(
        "DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", lambda s: s.fb_free_mib
    ),
    DcgmField(
        "DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", lambda s: s.fb_used_mib
    ),
)


def dcgm_labels(sample: GpuSample) -> dict[str, str]:
    """dcgm-exporter's label set for one sample (MIG labels only for a MIG instance)."""
    labels = {
        "gpu": str(sample.gpu),
        "UUID": sample.uuid,
        "device": f"nvidia{sample.gpu}",
        "modelName": sample.model_name,
        "Hostname": sample.hostname,
    }
    if sample.mig_profile is not None:
        labels["GPU_I_PROFILE"] = sample.mig_profile
        labels["GPU_I_ID"] = str(sample.mig_id if sample.mig_id is not None else 0)
    return labels


def render(samples: Sequence[GpuSample]) -> list[Metric]:
    """Metric families for the given samples; a NaN value means "not supported here" and is
    skipped, as dcgm-exporter skips blank fields (e.g. GPU_UTIL of a MIG instance)."""
    labels = [dcgm_labels(sample) for sample in samples]  # shared by the eight families
    families: list[Metric] = []
    for field in FIELDS:
        family = Metric(field.name, field.help, field.kind)
        for sample, sample_labels in zip(samples, labels, strict=True):
            value = field.value(sample)
            if math.isnan(value):
                continue
            family.add_sample(field.name, sample_labels, value)
        families.append(family)
    return families


class DcgmCollector(Collector):
    """Prometheus collector that asks ``source`` for the current GPUs at every scrape."""

    def __init__(self, source: Callable[[], Sequence[GpuSample]]) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        yield from render(self._source())

    def describe(self) -> Iterator[Metric]:
        # Returning the (empty) families keeps registration cheap: no NVML read at register time.
        for field in FIELDS:
            yield Metric(field.name, field.help, field.kind)
