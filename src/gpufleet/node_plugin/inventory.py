"""The node's GPUs: from NVML on a GPU node, from a device file in the lab.

A device file (YAML or JSON) lists the GPUs a node pretends to have::

    gpus:
      - {uuid: GPU-0f6e…, index: 0, minor: 0, product: NVIDIA H100 80GB HBM3, memoryMiB: 81559,
         cudaDriverVersion: "12.4", driverVersion: 550.54.15, cudaComputeCapability: "9.0",
         nvlinkDomain: 0}

Each GPU becomes the ResourceSlice device ``gpu-<index>``. The versions are published as semver
(``12.4`` → ``12.4.0``, ``535.104.05`` → ``535.104.5``: semver has no leading zeros). The file is
read again every resync, so in the lab a GPU's health can be changed under a running plugin: an
entry with ``xid: 79`` reports that XID, an entry removed is a GPU that was lost
(:mod:`.health`).
"""

from __future__ import annotations

import functools
import json
import logging
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

log = logging.getLogger(__name__)
DEFAULT_CUDA_DRIVER_VERSION = "12.4"
DEFAULT_DRIVER_VERSION = "550.54.15"


class InventoryError(ValueError):
    """A device file or NVML that cannot give the node's GPUs; the message names the cause."""


class Gpu(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    uuid: str = Field(min_length=1, description="The GPU's UUID (NVML: GPU-…).")
    index: int = Field(ge=0, description="NVML's index of the GPU on the node.")
    minor: int = Field(ge=0, description="The minor number of /dev/nvidia<minor>.")
    product: str = Field(min_length=1, description="The product name NVML reports.")
    memory_mib: int = Field(gt=0, alias="memoryMiB", description="Framebuffer memory, MiB.")
    cuda_driver_version: str = Field(
        DEFAULT_CUDA_DRIVER_VERSION, alias="cudaDriverVersion",
        description="The CUDA version the driver supports (NVML: 12040 → 12.4).")
    driver_version: str = Field(DEFAULT_DRIVER_VERSION, alias="driverVersion",
                                description="The NVIDIA driver's version.")
    cuda_compute_capability: str | None = Field(
        None, alias="cudaComputeCapability", description="major.minor, e.g. 9.0 for Hopper.")
    nvlink_domain: int | None = Field(
        None, ge=0, alias="nvlinkDomain",
        description="The same number on every GPU of one NVLink island; none = PCIe only.")
    xid: int | None = Field(
        None, ge=1, description="The last critical XID the GPU reported (device file only: "
                                "NVML's come from its event stream).")

    @field_validator("cuda_driver_version", "driver_version", "cuda_compute_capability")
    @classmethod
    def _a_version(cls, v: str | None) -> str | None:
        if v is not None:
            semver(v)
        return v

    @property
    def device_name(self) -> str:
        return f"gpu-{self.index}"

    @property
    def published_memory_mib(self) -> int:
        """The memory the ResourceSlice publishes: the catalog's size for the product (NVML
        reports a few percent less than the nominal size: 81,559 MiB on an H100 80GB, 15,360 on
        a 16 GB T4), so that claims written against the nominal sizes — the gpu-fraction share
        templates select devices of exactly those — fit; the NVML total where the product is
        unknown or the two are more than 10 % apart. Prepare scales a share's memory back to
        the real total (:func:`~gpufleet.node_plugin.prepare.share_limits`)."""
        return published_memory_mib(self.product, self.memory_mib)


@functools.cache
def published_memory_mib(product: str, memory_mib: int) -> int:
    """:attr:`Gpu.published_memory_mib` for a product name and its NVML memory total."""
    from gpufleet.catalog.gpus import default_gpu_catalog

    catalog = default_gpu_catalog()
    model = catalog.resolve(product.replace(" ", "-")) or catalog.resolve(product)
    if model is None:
        return memory_mib
    nominal = catalog.models[model].memory_mib
    return nominal if memory_mib <= nominal <= memory_mib * 1.1 else memory_mib


def semver(text: str) -> str:
    """``12.4`` → ``12.4.0``, ``535.104.05`` → ``535.104.5``: a DRA version attribute must be
    semver 2.0 (three numbers, no leading zeros); ValueError for text that is no version."""
    parts = str(text).strip().split(".")
    if not 1 <= len(parts) <= 3 or not all(re.fullmatch(r"\d+", p) for p in parts):
        raise ValueError(f"{text!r} is not a version like 12.4 or 550.54.15")
    nums = [int(p) for p in parts] + [0] * (3 - len(parts))
    return ".".join(str(n) for n in nums)


class DeviceFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    gpus: list[Gpu] = Field(min_length=1)

    @model_validator(mode="after")
    def distinct_gpus(self) -> DeviceFile:
        for key in ("uuid", "index", "minor"):
            values = [getattr(g, key) for g in self.gpus]
            dup = sorted({v for v in values if values.count(v) > 1}, key=str)
            if dup:
                raise ValueError(f"two GPUs share {key} {dup[0]}")
        return self


def _location(loc: tuple[int | str, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")


def load_device_file(path: Path) -> list[Gpu]:
    """The GPUs ``path`` lists, in index order; :class:`InventoryError` naming the file and the
    field on a missing file, bad YAML/JSON or a bad entry."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise InventoryError(f"{path}: cannot read the device file ({exc.strerror})") from None
    try:
        data: Any = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise InventoryError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}"
                             f" ({exc})") from None
    try:
        parsed = DeviceFile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = _location(first["loc"]) or "(top level)"
        raise InventoryError(f"{path}: {where}: {first['msg']}") from None
    return sorted(parsed.gpus, key=lambda g: g.index)


def nvml_gpus() -> list[Gpu]:
    """The node's GPUs as NVML reports them (``nvidia-ml-py``; needs the NVIDIA driver)."""
    try:
        import pynvml
    except ImportError:
        raise InventoryError("NVML inventory needs nvidia-ml-py (pip install nvidia-ml-py); "
                             "or give --device-file") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise InventoryError(f"NVML did not start ({exc}): no NVIDIA driver on this node? "
                             "Give --device-file to run without one") from None
    try:
        cuda = pynvml.nvmlSystemGetCudaDriverVersion_v2()  # 12040
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            try:
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                cc: str | None
                try:
                    major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
                    cc = f"{major}.{minor}"
                except pynvml.NVMLError:
                    cc = None
                gpus.append(Gpu(
                    uuid=_text(pynvml.nvmlDeviceGetUUID(h)),
                    index=pynvml.nvmlDeviceGetIndex(h),
                    minor=pynvml.nvmlDeviceGetMinorNumber(h),
                    product=_text(pynvml.nvmlDeviceGetName(h)),
                    memoryMiB=pynvml.nvmlDeviceGetMemoryInfo(h).total // 2**20,
                    cudaDriverVersion=f"{cuda // 1000}.{cuda % 1000 // 10}",
                    driverVersion=driver,
                    cudaComputeCapability=cc,
                    nvlinkDomain=None,  # NVML has no island id: a device-file/patch attribute
                    xid=None,
                ))
            except pynvml.NVMLError as exc:  # e.g. fallen off the bus: that GPU is lost
                log.warning("NVML: GPU %d unreadable (%s); left out of the inventory", i, exc)
        return gpus
    finally:
        pynvml.nvmlShutdown()


def _text(v: str | bytes) -> str:
    return v.decode() if isinstance(v, bytes) else v


def load(device_file: Path | None) -> list[Gpu]:
    """The device file's GPUs when one is given, else NVML's."""
    return load_device_file(device_file) if device_file is not None else nvml_gpus()
