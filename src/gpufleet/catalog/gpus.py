"""GPU models and NVIDIA MIG profiles, with the placement rules that make MIG packing hard.

A MIG profile occupies a run of memory slices and may only start at fixed offsets (a ``3g.20gb``
on an A100 starts at slice 0 or 4, never 2). Modelling the offsets, not just counts, is what lets
placement refuse a layout the driver would refuse.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpufleet.catalog.yamlfile import load_model, read_yaml
from gpufleet.errors import InputError


def parse_version(text: str) -> int:
    """``"12.4"`` → 12040 (CUDA's own ``CUDA_VERSION`` encoding)."""
    try:
        major, _, minor = str(text).partition(".")
        return int(major) * 1000 + int(minor or 0) * 10
    except ValueError as exc:
        raise InputError(f"expected a version like '12.4', got {text!r}") from exc


class MigProfile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = ""
    compute: int = Field(ge=1, le=7)
    memory_slices: int = Field(ge=1, le=8)
    max_count: int = Field(ge=1, le=7)
    starts: tuple[int, ...]

    @property
    def resource_name(self) -> str:
        """Kubernetes extended resource (device plugin "mixed" strategy)."""
        return f"nvidia.com/mig-{self.name}"

    def slice_mask(self, start: int) -> int:
        """Bitmask of the memory slices this profile occupies when started at ``start``."""
        return ((1 << self.memory_slices) - 1) << start


class MigSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    compute_slices: int = Field(ge=1, le=7)
    memory_slices: int = Field(ge=1, le=8)
    profiles: dict[str, MigProfile]

    @model_validator(mode="after")
    def _check(self) -> MigSpec:
        for name, prof in self.profiles.items():
            object.__setattr__(prof, "name", name)
            for s in prof.starts:
                if s < 0 or s + prof.memory_slices > self.memory_slices:
                    raise ValueError(
                        f"profile {name}: start {s} runs past {self.memory_slices} slices"
                    )
        return self


class GpuModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = ""
    memory_gib: float = Field(gt=0)
    compute_capability: str
    interconnect: Literal["nvlink", "pcie"]
    nvlink_gbps: float = 0
    fp16_tflops: float = Field(gt=0)
    max_cuda: str | None = None
    mig: MigSpec | None = None

    @property
    def memory_mib(self) -> int:
        return round(self.memory_gib * 1024)

    @property
    def max_cuda_version(self) -> int | None:
        return parse_version(self.max_cuda) if self.max_cuda else None


class GpuCatalog:
    """Models by canonical name, plus the alias table traces and clouds need."""

    def __init__(self, models: dict[str, GpuModel], aliases: dict[str, str]) -> None:
        self.models = models
        self.aliases = dict(aliases)  # as written (GFD product names keep their case)
        self._lookup: dict[str, str] = {n.lower(): n for n in models}
        for alias, target in aliases.items():
            if target not in models:
                raise InputError(f"alias {alias!r} points to unknown model {target!r}", field=alias)
            self._lookup[alias.lower()] = target

    def resolve(self, name: str) -> str | None:
        """Canonical model name for ``name`` (case-insensitive, through aliases), or None."""
        return self._lookup.get(name.strip().lower())

    def __getitem__(self, name: str) -> GpuModel:
        canon = self.resolve(name)
        if canon is None:
            raise KeyError(name)
        return self.models[canon]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.resolve(name) is not None

    def mig_profile(self, model: str, profile: str) -> MigProfile | None:
        spec = self[model].mig
        return None if spec is None else spec.profiles.get(profile)


def _data_path(name: str) -> Path:
    return Path(str(resources.files("gpufleet.catalog") / "data" / name))


def load_gpu_catalog(path: Path | None = None, aliases_path: Path | None = None) -> GpuCatalog:
    path = path or _data_path("gpus.yaml")
    aliases_path = aliases_path or _data_path("aliases.yaml")
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        raise InputError("expected a mapping of model name to fields", path=path)
    models: dict[str, GpuModel] = {}
    for name, fields in raw.items():
        model = load_model(GpuModel, fields, f"{path} [{name}]")
        object.__setattr__(model, "name", str(name))
        models[str(name)] = model
    aliases = read_yaml(aliases_path) or {}
    if not isinstance(aliases, dict):
        raise InputError("expected a mapping of alias to model name", path=aliases_path)
    return GpuCatalog(models, {str(k): str(v) for k, v in aliases.items()})


@cache
def default_gpu_catalog() -> GpuCatalog:
    return load_gpu_catalog()
