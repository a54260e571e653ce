"""GPU health: which GPUs are unhealthy, why, and the device taint each one gets in the slice.

Sources: on a GPU node, NVML's critical-XID events (:class:`XidWatcher`, a thread blocked in
``nvmlEventSetWait``) and the GPUs NVML still enumerates; in the lab, the device file read again
every resync (an entry with ``xid: N``, or an entry gone).

A GPU is unhealthy for one of two causes, and its ResourceSlice device then carries the taint
``gpu.gpufleet.io/unhealthy=<cause>`` (DRADeviceTaints: the scheduler allocates no tainted
device whose taint a claim does not tolerate; NoExecute also evicts the pods whose claims use it):

- GPU gone (from NVML or the device file): value ``lost``, effect NoExecute; nothing runs on it,
  so claims on it are unprepared and their pods evicted;
- a fatal XID (:data:`FATAL_XIDS`): value ``xid-<n>``, effect NoExecute; the GPU needs a reset
  (or service) before it is trusted again;
- any other XID: value ``xid-<n>``, effect NoSchedule; running work may carry on, no new work;
- an application XID (:data:`APPLICATION_XIDS`): no taint, it is a fault of the process.

A lost GPU stays published (tainted), so the kubelet can still unprepare its claims; it is taken
out of the slice only when the plugin restarts without it. An NVML XID is sticky until the plugin
restarts (a GPU is reset by draining the node and reloading the driver, which restarts the
plugin); a later, fatal XID replaces a non-fatal one. In the lab the device file is the truth:
``xid`` removed, the taint goes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gpufleet.node_plugin import DRIVER
from gpufleet.node_plugin.inventory import Gpu

log = logging.getLogger(__name__)

TAINT_KEY = f"{DRIVER}/unhealthy"
NO_EXECUTE, NO_SCHEDULE = "NoExecute", "NoSchedule"
LOST = "lost"
# The GPU cannot be trusted until it is reset (NVIDIA's XID catalog: RESET_GPU or worse):
# 48 double-bit ECC error; 62 internal micro-controller halt; 64 ECC page retirement / row
# remapping failure; 79 fallen off the bus; 95 uncontained ECC error; 119 and 120 GSP RPC
# timeout / GSP error. 94 (a *contained* ECC error) ends only the process that hit it and the
# GPU keeps working until its row is remapped at the next reset: NoSchedule.
FATAL_XIDS = frozenset({48, 62, 64, 79, 95, 119, 120})
# Faults of the application, not of the GPU (NVIDIA's k8s-device-plugin ignores these too):
# 13 graphics engine exception, 31 MMU fault, 43 GPU stopped processing (app), 45 preemptive
# cleanup, 68 video decoder exception, 109 context switch timeout.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})


def xid_taint(xid: int) -> tuple[str, str] | None:
    """(value, effect) of the taint XID ``xid`` puts on its GPU; None for an application XID."""
    if xid in APPLICATION_XIDS:
        return None
    return f"xid-{xid}", NO_EXECUTE if xid in FATAL_XIDS else NO_SCHEDULE


@dataclass(frozen=True)
class DeviceHealth:
    """One published device's health: ``reason`` None is healthy."""

    device: str
    uuid: str
    reason: str | None = None
    effect: str | None = None
    since: datetime | None = None

    @property
    def healthy(self) -> bool:
        return self.reason is None

    def taint(self) -> dict[str, str] | None:
        """The device taint of the ResourceSlice (resource.k8s.io/v1 ``DeviceTaint``)."""
        if self.reason is None or self.effect is None or self.since is None:
            return None
        return {"key": TAINT_KEY, "value": self.reason, "effect": self.effect,
                "timeAdded": self.since.strftime("%Y-%m-%dT%H:%M:%SZ")}


def _worse(a: int | None, b: int | None) -> int | None:
    """The XID to keep of two: a fatal one over a non-fatal one, else the newer (``b``)."""
    if a is None or xid_taint(a) is None:
        return b if b is not None and xid_taint(b) is not None else a
    if b is None or xid_taint(b) is None:
        return a
    return a if (a in FATAL_XIDS and b not in FATAL_XIDS) else b


class HealthTracker:
    """The published GPUs (those seen since the start, lost ones kept) and their health.

    :meth:`observe` takes the GPUs present now and the XID each reports and returns the
    transitions; readers wait for a change with :meth:`wait_change` (the kubelet's health
    stream). Thread-safe."""

    def __init__(self, gpus: Iterable[Gpu], now: Callable[[], datetime] | None = None) -> None:
        self._now = now or (lambda: datetime.now(UTC).replace(microsecond=0))
        self._cond = threading.Condition()
        self._gpus: dict[str, Gpu] = {}  # uuid → the GPU as last seen
        self._health: dict[str, DeviceHealth] = {}  # uuid → health
        self.version = 0
        self.observe(list(gpus), {})

    def observe(self, present: list[Gpu], xids: Mapping[str, int]
                ) -> list[tuple[DeviceHealth, DeviceHealth | None]]:
        """Record the GPUs present and the XIDs (by uuid; a GPU's own ``xid`` field counts
        too); the (new, old) health of every device whose health changed (old None: new)."""
        changes: list[tuple[DeviceHealth, DeviceHealth | None]] = []
        with self._cond:
            names = {g.device_name: g.uuid for g in present}
            for g in present:
                self._gpus[g.uuid] = g
            for uuid, g in list(self._gpus.items()):
                if g.uuid not in {p.uuid for p in present} and names.get(g.device_name):
                    del self._gpus[uuid]  # its device name is another GPU's now
                    self._health.pop(uuid, None)
            here = {g.uuid for g in present}
            for uuid, g in sorted(self._gpus.items(), key=lambda kv: kv[1].index):
                old = self._health.get(uuid)
                reason: str | None
                effect: str | None
                if uuid not in here:
                    reason, effect = LOST, NO_EXECUTE
                else:
                    xid = _worse(g.xid, xids.get(uuid))
                    found = xid_taint(xid) if xid is not None else None
                    reason, effect = found if found else (None, None)
                if old is not None and (old.reason, old.effect) == (reason, effect):
                    continue
                new = DeviceHealth(g.device_name, uuid, reason, effect,
                                   self._now() if reason else None)
                self._health[uuid] = new
                changes.append((new, old))
            if changes:
                self.version += 1
                self._cond.notify_all()
        return changes

    def gpus(self) -> list[Gpu]:
        """Every published GPU (present or lost), in index order."""
        with self._cond:
            return sorted(self._gpus.values(), key=lambda g: g.index)

    def health(self) -> list[DeviceHealth]:
        with self._cond:
            return [self._health[g.uuid] for g in
                    sorted(self._gpus.values(), key=lambda g: g.index)]

    def taints(self) -> dict[str, list[dict[str, str]]]:
        """Device name → its taints (only unhealthy devices)."""
        return {h.device: [t] for h in self.health() if (t := h.taint()) is not None}

    def wait_change(self, seen: int, timeout: float) -> int:
        """Block until :attr:`version` passes ``seen`` or ``timeout`` seconds; the version."""
        with self._cond:
            self._cond.wait_for(lambda: self.version != seen, timeout)
            return self.version


class XidWatcher:
    """NVML's critical-XID events, in a daemon thread: the worst XID per GPU uuid so far
    (:func:`_worse`). Needs the NVIDIA driver; a GPU that does not support the events is
    logged and left out."""

    def __init__(self, wait_ms: int = 5000, on_xid: Callable[[], None] | None = None) -> None:
        self.wait_ms = wait_ms
        self.on_xid = on_xid
        self._xids: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nvml-xid", daemon=True)

    def start(self) -> XidWatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self.wait_ms / 1000 + 5)

    def xids(self) -> dict[str, int]:
        with self._lock:
            return dict(self._xids)

    def _run(self) -> None:
        import pynvml

        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            log.error("NVML did not start (%s): no XID events", exc)
            return
        try:
            events = pynvml.nvmlEventSetCreate()
            for i in range(pynvml.nvmlDeviceGetCount()):
                try:
                    h = pynvml.nvmlDeviceGetHandleByIndex(i)
                    pynvml.nvmlDeviceRegisterEvents(
                        h, pynvml.nvmlEventTypeXidCriticalError, events)
                except pynvml.NVMLError as exc:
                    log.warning("NVML: no XID events from GPU %d (%s)", i, exc)
            try:
                self._watch(pynvml, events)
            finally:
                pynvml.nvmlEventSetFree(events)
        except pynvml.NVMLError as exc:
            log.error("NVML XID events stopped (%s)", exc)
        finally:
            pynvml.nvmlShutdown()

    def _watch(self, pynvml: Any, events: Any) -> None:
        while not self._stop.is_set():
            try:
                ev = pynvml.nvmlEventSetWait_v2(events, self.wait_ms)
            except pynvml.NVMLError_Timeout:
                continue
            except pynvml.NVMLError as exc:
                log.warning("NVML event wait failed (%s)", exc)
                self._stop.wait(1)
                continue
            if ev.eventType != pynvml.nvmlEventTypeXidCriticalError:
                continue
            xid = int(ev.eventData)
            uuid = pynvml.nvmlDeviceGetUUID(ev.device)
            uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
            log.warning("NVML: XID %d on %s", xid, uuid)
            with self._lock:
                kept = _worse(self._xids.get(uuid), xid)
                if kept is not None:
                    self._xids[uuid] = kept
            if self.on_xid is not None:
                self.on_xid()
