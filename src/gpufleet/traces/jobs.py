"""Jobs for time-based replay, and the loaders that produce them.

Three input formats, recognised by content so ``gpufleet simulate --trace FILE`` just works:

* **Philly** (Microsoft, 2017; header ``timestamp,duration,num_gpus,gpu_time,cluster``): one row
  per DNN training job. Philly has no CPU/memory columns and ran on one GPU generation, so every
  job is pinned to a reference model (V100-16GB by default, the p3 family the spot traces
  describe) and gets 4 vCPU and 12 GiB per GPU, which fits every catalogued instance.
  Jobs of more than 8 GPUs become gangs of ceil(n/8) replicas.
* **gpufleet CSV** (header must contain ``job_id,submit_s,duration_s,num_gpu``): the documented
  generic format, one column per :class:`JobSpec` field (see ``docs/workloads.md``).
* **YAML** (``.yaml``/``.yml``): ``jobs: [ {job_id, submit_s, duration_s, num_gpu, ...} ]``
  validated with pydantic; same field names as the CSV.

Every malformed value is an :class:`InputError` naming file, line and field.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gpufleet.catalog.gpus import GpuCatalog, default_gpu_catalog, parse_version
from gpufleet.catalog.yamlfile import read_yaml, validation_to_input_error
from gpufleet.errors import InputError
from gpufleet.state import GPU_MILLI, ResourceRequest

PHILLY_HEADER = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")
GENERIC_REQUIRED = ("job_id", "submit_s", "duration_s", "num_gpu")
MAX_GPUS_PER_NODE = 8
PHILLY_CPU_MILLI_PER_GPU = 4000
PHILLY_MEMORY_MIB_PER_GPU = 12 * 1024


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One job of a workload. ``request`` is per replica; replicas > 1 are gang-scheduled."""

    job_id: str
    submit_s: float
    duration_s: float
    request: ResourceRequest
    replicas: int = 1
    tenant: str = "default"
    priority: int = 0
    checkpointable: bool = True
    interruptible: bool = True
    deadline_s: float | None = None
    checkpoint_cost_s: float = 30.0
    restart_overhead_s: float = 120.0
    utilization: float = 0.8

    @property
    def gpu_milli_total(self) -> int:
        return self.replicas * self.request.total_gpu_milli

    @property
    def gpu_seconds(self) -> float:
        """Useful GPU-seconds (fractional shares count as their fraction)."""
        return self.duration_s * self.gpu_milli_total / GPU_MILLI


class JobFields(BaseModel):
    """The generic job format (CSV columns / YAML keys); validated field by field."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    job_id: str = Field(min_length=1)
    submit_s: float = Field(ge=0)
    duration_s: float = Field(gt=0)
    num_gpu: int = Field(ge=0, le=MAX_GPUS_PER_NODE)
    gpu_milli: int = Field(default=GPU_MILLI, ge=1, le=GPU_MILLI)
    replicas: int = Field(default=1, ge=1)
    cpu_milli: int = Field(default=4000, ge=0)
    memory_mib: int = Field(default=12 * 1024, ge=0)
    gpu_models: str | None = None  # "|"-separated, as openb's gpu_spec
    gpu_memory_mib: int = Field(default=0, ge=0)
    mig_profile: str | None = None
    min_cuda: str | None = None
    tenant: str = "default"
    priority: int = 0
    checkpointable: bool = True
    interruptible: bool = True
    deadline_s: float | None = Field(default=None, gt=0)
    checkpoint_cost_s: float = Field(default=30.0, ge=0)
    restart_overhead_s: float = Field(default=120.0, ge=0)
    utilization: float = Field(default=0.8, ge=0, le=1)

    @field_validator("gpu_models", "mig_profile", "min_cuda", "deadline_s", mode="before")
    @classmethod
    def _empty_is_none(cls, v: Any) -> Any:
        return None if v == "" else v

    @model_validator(mode="after")
    def _consistent(self) -> JobFields:
        if self.gpu_milli < GPU_MILLI and self.num_gpu != 1:
            raise ValueError("gpu_milli < 1000 (a shared GPU) needs num_gpu == 1")
        if self.mig_profile is not None and self.num_gpu not in (0, 1):
            raise ValueError("a MIG request takes one instance: num_gpu must be 0 or 1")
        if self.deadline_s is not None and self.deadline_s <= self.submit_s:
            raise ValueError("deadline_s must be after submit_s")
        return self


def _models(spec: str | None, catalog: GpuCatalog, where: dict[str, Any]) -> frozenset[str] | None:
    if not spec:
        return None
    out = set()
    for name in spec.split("|"):
        canon = catalog.resolve(name)
        if canon is None:
            raise InputError(
                f"unknown GPU model {name!r}; expected one of {', '.join(catalog.models)} "
                "or an alias from catalog/data/aliases.yaml",
                **where,
            )
        out.add(canon)
    return frozenset(out)


def job_from_fields(f: JobFields, catalog: GpuCatalog, where: dict[str, Any]) -> JobSpec:
    models = _models(f.gpu_models, catalog, {**where, "field": "gpu_models"})
    if f.mig_profile is not None:
        ok = [
            m
            for m in (models or catalog.models.keys())
            if catalog.mig_profile(m, f.mig_profile) is not None
        ]
        if not ok:
            raise InputError(
                f"no catalogued GPU offers MIG profile {f.mig_profile!r}",
                **{**where, "field": "mig_profile"},
            )
        models = frozenset(ok)
    try:
        min_cuda = parse_version(f.min_cuda) if f.min_cuda else 0
    except InputError as exc:
        raise InputError(exc.detail, **{**where, "field": "min_cuda"}) from None
    req = ResourceRequest(
        cpu_milli=f.cpu_milli,
        memory_mib=f.memory_mib,
        num_gpu=1 if f.mig_profile else f.num_gpu,
        gpu_milli=f.gpu_milli,
        gpu_models=models,
        gpu_memory_mib=f.gpu_memory_mib,
        mig_profile=f.mig_profile,
        min_cuda=min_cuda,
    )
    return JobSpec(
        job_id=f.job_id,
        submit_s=f.submit_s,
        duration_s=f.duration_s,
        request=req,
        replicas=f.replicas,
        tenant=f.tenant,
        priority=f.priority,
        checkpointable=f.checkpointable,
        interruptible=f.interruptible,
        deadline_s=f.deadline_s,
        checkpoint_cost_s=f.checkpoint_cost_s,
        restart_overhead_s=f.restart_overhead_s,
        utilization=f.utilization,
    )


def _validate(data: dict[str, Any], where: dict[str, Any]) -> JobFields:
    try:
        return JobFields.model_validate(data)
    except ValidationError as exc:
        raise validation_to_input_error(exc, **where) from None


# -- Philly -------------------------------------------------------------------------------------
def philly_job(
    row: dict[str, str], *, index: int, submit_s: float, gpu_model: str, where: dict[str, Any]
) -> JobSpec:
    def num(field: str, cast: type = float, minimum: float = 0) -> Any:
        raw = row.get(field)
        if raw is None or raw == "":
            raise InputError("missing value", field=field, **where)
        try:
            val = cast(float(raw)) if cast is int else cast(raw)
        except ValueError:
            raise InputError(f"expected a number, got {raw!r}", field=field, **where) from None
        if not math.isfinite(val) or val < minimum:
            raise InputError(f"expected a number >= {minimum}, got {raw!r}", field=field, **where)
        return val

    gpus = num("num_gpus", int, 1)
    duration = max(num("duration"), 1.0)
    replicas = max(1, math.ceil(gpus / MAX_GPUS_PER_NODE))
    per = math.ceil(gpus / replicas)
    req = ResourceRequest(
        cpu_milli=PHILLY_CPU_MILLI_PER_GPU * per,
        memory_mib=PHILLY_MEMORY_MIB_PER_GPU * per,
        num_gpu=per,
        gpu_milli=GPU_MILLI,
        gpu_models=frozenset({gpu_model}),
    )
    return JobSpec(
        job_id=f"philly-{index:06d}",
        submit_s=submit_s,
        duration_s=duration,
        request=req,
        replicas=replicas,
        tenant=row.get("cluster") or "default",
    )


def _philly_time(row: dict[str, str], where: dict[str, Any]) -> float:
    raw = row.get("timestamp") or ""
    try:
        return datetime.fromisoformat(raw).timestamp()
    except ValueError:
        raise InputError(
            f"expected 'YYYY-MM-DD HH:MM:SS', got {raw!r}", field="timestamp", **where
        ) from None


def _rows(path: Path) -> Iterator[tuple[int, dict[str, str]]]:
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        for lineno, row in enumerate(reader, start=2):
            if None in row or any(v is None for v in row.values()):
                raise InputError(
                    f"expected {len(reader.fieldnames or [])} columns", path=path, line=lineno
                )
            yield lineno, row


def load_philly(path: Path, gpu_model: str = "V100-16GB") -> list[JobSpec]:
    rows = list(_rows(path))
    if not rows:
        return []
    times = [_philly_time(r, {"path": path, "line": ln}) for ln, r in rows]
    t0 = min(times)
    jobs = [
        philly_job(
            row, index=i, submit_s=t - t0, gpu_model=gpu_model, where={"path": path, "line": ln}
        )
        for i, ((ln, row), t) in enumerate(zip(rows, times, strict=True))
    ]
    jobs.sort(key=lambda j: (j.submit_s, j.job_id))
    return jobs


# -- generic CSV / YAML -------------------------------------------------------------------------
def _collect(
    records: Iterable[tuple[dict[str, Any], dict[str, Any]]], catalog: GpuCatalog
) -> list[JobSpec]:
    """Validate (fields, where) records into jobs: unique ids, sorted by submit time."""
    jobs = []
    seen: set[str] = set()
    for data, where in records:
        job = job_from_fields(_validate(data, where), catalog, where)
        if job.job_id in seen:
            raise InputError(f"duplicate job_id {job.job_id!r}", field="job_id", **where)
        seen.add(job.job_id)
        jobs.append(job)
    jobs.sort(key=lambda j: (j.submit_s, j.job_id))
    return jobs


def load_generic_csv(path: Path, catalog: GpuCatalog | None = None) -> list[JobSpec]:
    records = (
        (
            {k.strip(): v.strip() for k, v in row.items() if v is not None and v.strip() != ""},
            {"path": path, "line": lineno},
        )
        for lineno, row in _rows(path)
    )
    return _collect(records, catalog or default_gpu_catalog())


def load_yaml_jobs(path: Path, catalog: GpuCatalog | None = None) -> list[JobSpec]:
    raw = read_yaml(path)  # InputError with the line for malformed YAML
    if not isinstance(raw, dict) or not isinstance(raw.get("jobs"), list):
        raise InputError("expected a mapping with a 'jobs' list", path=path, field="jobs")
    lines = _yaml_item_lines(yaml.compose(path.read_text(encoding="utf-8")))

    def records() -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
        for i, item in enumerate(raw["jobs"]):
            where = {"path": path, "line": lines[i] if i < len(lines) else None}
            if not isinstance(item, dict):
                raise InputError(f"jobs[{i}]: expected a mapping", **where)
            yield item, where

    return _collect(records(), catalog or default_gpu_catalog())


def _yaml_item_lines(node: Any) -> list[int]:
    """1-based line of each item of the top-level ``jobs`` list, for error messages."""
    if node is None or not isinstance(node, yaml.MappingNode):
        return []
    for key, value in node.value:
        if key.value == "jobs" and isinstance(value, yaml.SequenceNode):
            return [item.start_mark.line + 1 for item in value.value]
    return []


def sniff_format(path: Path) -> str:
    """'philly', 'csv' or 'yaml', from the extension and the header line."""
    if path.suffix.lower() in (".yaml", ".yml"):
        return "yaml"
    try:
        with path.open(encoding="utf-8") as fh:
            header = fh.readline().strip()
    except FileNotFoundError:
        raise InputError("file not found", path=path) from None
    cols = tuple(c.strip() for c in header.split(","))
    if cols[: len(PHILLY_HEADER)] == PHILLY_HEADER:
        return "philly"
    if all(c in cols for c in GENERIC_REQUIRED):
        return "csv"
    raise InputError(
        f"unrecognised header {header!r}: expected Philly's {','.join(PHILLY_HEADER)} or a "
        f"gpufleet job CSV with at least {','.join(GENERIC_REQUIRED)}",
        path=path,
        line=1,
    )


def load_jobs(path: Path | str, **philly_kwargs: Any) -> list[JobSpec]:
    """Load any supported workload file, recognised by extension/header."""
    path = Path(path)
    fmt = sniff_format(path)
    if fmt == "philly":
        return load_philly(path, **philly_kwargs)
    if fmt == "csv":
        return load_generic_csv(path)
    return load_yaml_jobs(path)
