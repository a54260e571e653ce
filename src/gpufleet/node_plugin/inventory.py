"""The node's GPUs: from NVML on a GPU node, from a device file in the lab.

A device file (YAML or JSON) lists the GPUs a node pretends to have::

    gpus:
      - {uuid: GPU-0f6e…, index: 0, minor: 0, product: NVIDIA H100 80GB HBM3, memoryMiB: 81559}

Each GPU becomes the ResourceSlice device ``gpu-<index>``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class InventoryError(ValueError):
    """A device file or NVML that cannot give the node's GPUs; the message names the cause."""


class Gpu(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    uuid: str = Field(min_length=1, description="The GPU's UUID (NVML: GPU-…).")
    index: int = Field(ge=0, description="NVML's index of the GPU on the node.")
    minor: int = Field(ge=0, description="The minor number of /dev/nvidia<minor>.")
    product: str = Field(min_length=1, description="The product name NVML reports.")
    memory_mib: int = Field(gt=0, alias="memoryMiB", description="Framebuffer memory, MiB.")

    @property
    def device_name(self) -> str:
        return f"gpu-{self.index}"


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
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            uuid, name = pynvml.nvmlDeviceGetUUID(h), pynvml.nvmlDeviceGetName(h)
            gpus.append(Gpu(
                uuid=uuid.decode() if isinstance(uuid, bytes) else uuid,
                index=pynvml.nvmlDeviceGetIndex(h),
                minor=pynvml.nvmlDeviceGetMinorNumber(h),
                product=name.decode() if isinstance(name, bytes) else name,
                memoryMiB=pynvml.nvmlDeviceGetMemoryInfo(h).total // 2**20,
            ))
        return gpus
    finally:
        pynvml.nvmlShutdown()


def load(device_file: Path | None) -> list[Gpu]:
    """The device file's GPUs when one is given, else NVML's."""
    return load_device_file(device_file) if device_file is not None else nvml_gpus()
