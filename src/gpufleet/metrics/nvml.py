"""Read the local GPUs through NVML (``nvidia-ml-py``) into :class:`GpuSample` records.

Why NVML and not DCGM: NVML ships with every driver, DCGM does not. We read the same quantities
dcgm-exporter's default counters read, in its units, so the two are interchangeable behind a
dashboard. Every pynvml function is looked up on the module at call time, which keeps the
reader testable against a recorded NVML fake (tests monkeypatch ``pynvml.nvml*``).

Field conventions:
- A quantity NVML reports as not supported on this device becomes NaN, which the DCGM renderer
  skips (dcgm-exporter also leaves blank fields out).
- On a MIG-enabled GPU the parent series keeps the device-wide readings (temperature, power,
  SM clock, XID) and each MIG instance gets its own series with ``GPU_I_PROFILE``/``GPU_I_ID``
  and its own framebuffer usage. The parent's framebuffer is then left out so that
  ``sum(DCGM_FI_DEV_FB_USED)`` does not count the same memory twice.
- ``xid_errors`` is the last XID seen since the reader opened (dcgm-exporter's gauge semantics),
  collected without blocking from one NVML event set per GPU.
"""

from __future__ import annotations

import math
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pynvml

from gpufleet.metrics.snapshot import GpuSample

MIB = 1024 * 1024
_MIG_NAME = re.compile(r"MIG\s+(\d+g\.\d+gb)\s*$", re.IGNORECASE)


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used on this machine (no driver, no library, no permission)."""


def _value_or_nan(read: Callable[[], Any]) -> Any:
    """Call one NVML getter; a field the device does not support reads as NaN."""
    try:
        return read()
    except pynvml.NVMLError_NotSupported:
        return math.nan


def mig_profile_name(mig_name: str, attributes: Any | None = None) -> str:
    """``1g.5gb``-style profile from the MIG device name NVML reports.

    NVML names a MIG device e.g. "NVIDIA A100-SXM4-40GB MIG 1g.5gb"; when the name does not carry
    the profile, fall back to the slice count and memory size of the instance attributes.
    """
    found = _MIG_NAME.search(mig_name)
    if found:
        return found.group(1).lower()
    if attributes is not None:
        gib = round(attributes.memorySizeMB / 1024)
        return f"{attributes.gpuInstanceSliceCount}g.{gib}gb"
    return "unknown"


@dataclass
class NvmlReader:
    """Open NVML once, then :meth:`read` the current state of every GPU at each scrape."""

    hostname: str = field(default_factory=socket.gethostname)
    _event_sets: dict[int, Any] = field(default_factory=dict, init=False, repr=False)
    _last_xid: dict[int, int] = field(default_factory=dict, init=False, repr=False)
    _open: bool = field(default=False, init=False, repr=False)

    def open(self) -> None:
        """Initialise NVML; raise :class:`NvmlUnavailable` with the reason when it cannot."""
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise NvmlUnavailable(
                f"NVML is not available on this machine ({exc}); is the NVIDIA driver "
                "installed? Use `--source sim` to export a simulated fleet instead"
            ) from None
        self._open = True
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            event_set = pynvml.nvmlEventSetCreate()
            try:
                pynvml.nvmlDeviceRegisterEvents(
                    handle, pynvml.nvmlEventTypeXidCriticalError, event_set
                )
            except pynvml.NVMLError_NotSupported:
                pynvml.nvmlEventSetFree(event_set)
                continue  # e.g. some consumer boards: XID stays 0, as with dcgm-exporter
            self._event_sets[index] = event_set

    def close(self) -> None:
        if not self._open:
            return
        for event_set in self._event_sets.values():
            pynvml.nvmlEventSetFree(event_set)
        self._event_sets.clear()
        pynvml.nvmlShutdown()
        self._open = False

    def __enter__(self) -> NvmlReader:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _drain_xid(self, index: int) -> int:
        """Consume pending XID events of one GPU without blocking; return the last XID seen."""
        event_set = self._event_sets.get(index)
        while event_set is not None:
            try:
                data = pynvml.nvmlEventSetWait_v2(event_set, 0)
            except pynvml.NVMLError_Timeout:
                break
            if data.eventType == pynvml.nvmlEventTypeXidCriticalError:
                self._last_xid[index] = int(data.eventData)
        return self._last_xid.get(index, 0)

    def read(self) -> list[GpuSample]:
        """Samples for every GPU (and every MIG instance) visible to NVML right now."""
        if not self._open:
            raise RuntimeError("NvmlReader.read() before open()")
        samples: list[GpuSample] = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            samples.extend(self._read_device(index, handle))
        return samples

    def _read_device(self, index: int, handle: Any) -> list[GpuSample]:
        uuid = pynvml.nvmlDeviceGetUUID(handle)
        model = pynvml.nvmlDeviceGetName(handle)
        mig_mode = _value_or_nan(lambda: pynvml.nvmlDeviceGetMigMode(handle))
        mig_enabled = (
            not isinstance(mig_mode, float) and mig_mode[0] == pynvml.NVML_DEVICE_MIG_ENABLE
        )
        util = _value_or_nan(lambda: pynvml.nvmlDeviceGetUtilizationRates(handle))
        util_gpu = math.nan if isinstance(util, float) else float(util.gpu)
        util_mem = math.nan if isinstance(util, float) else float(util.memory)
        mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
        power_mw = _value_or_nan(lambda: pynvml.nvmlDeviceGetPowerUsage(handle))
        parent = GpuSample(
            hostname=self.hostname,
            gpu=index,
            uuid=uuid,
            model_name=model,
            util_pct=util_gpu,
            mem_copy_util_pct=util_mem,
            fb_used_mib=math.nan if mig_enabled else mem.used / MIB,
            fb_free_mib=math.nan if mig_enabled else mem.free / MIB,
            temp_c=float(
                _value_or_nan(
                    lambda: pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)
                )
            ),
            power_w=float(power_mw) / 1000.0,
            sm_clock_mhz=float(
                _value_or_nan(lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
            ),
            xid_errors=self._drain_xid(index),
        )
        samples = [parent]
        if mig_enabled:
            samples.extend(self._read_mig(index, handle, parent))
        return samples

    def _read_mig(self, index: int, handle: Any, parent: GpuSample) -> list[GpuSample]:
        instances: list[GpuSample] = []
        for slot in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
            try:
                mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except pynvml.NVMLError_NotFound:
                continue  # an empty slot: fewer instances than the maximum
            attributes = _value_or_nan(partial(pynvml.nvmlDeviceGetAttributes, mig))
            profile = mig_profile_name(
                pynvml.nvmlDeviceGetName(mig),
                None if isinstance(attributes, float) else attributes,
            )
            mem = pynvml.nvmlDeviceGetMemoryInfo(mig)
            instances.append(
                GpuSample(
                    hostname=parent.hostname,
                    gpu=index,
                    uuid=parent.uuid,  # dcgm-exporter labels MIG series with the parent UUID
                    model_name=parent.model_name,
                    util_pct=math.nan,  # NVML has no per-instance utilisation
                    mem_copy_util_pct=math.nan,
                    fb_used_mib=mem.used / MIB,
                    fb_free_mib=mem.free / MIB,
                    temp_c=math.nan,
                    power_w=math.nan,
                    sm_clock_mhz=math.nan,
                    xid_errors=parent.xid_errors,
                    mig_profile=profile,
                    mig_id=int(pynvml.nvmlDeviceGetGpuInstanceId(mig)),
                )
            )
        return instances
