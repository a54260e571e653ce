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
import dataclasses
import io
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gpufleet.catalog.gpus import GpuCatalog, default_gpu_catalog, parse_version
from gpufleet.catalog.yamlfile import read_yaml_document, validation_to_input_error
from gpufleet.errors import InputError
from gpufleet.inputfile import read_text
from gpufleet.state import GPU_MILLI, ResourceRequest

PHILLY_HEADER = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")
GENERIC_REQUIRED = ("job_id", "submit_s", "duration_s", "num_gpu")
MAX_GPUS_PER_NODE = 8
DAY_S = 86_400.0
# Input bounds (docs/workloads.md): wide enough for every public trace (Philly spans 109 days of
# arrivals, its longest job runs 53.6 days, its largest asks 128 GPUs), narrow enough that a typo
# (1e9 s, 100,000 GPUs) is an error instead of a simulation that never ends.
MAX_SUBMIT_S = 366 * DAY_S  # a trace spans at most a year of arrivals
MAX_DURATION_S = 90 * DAY_S
MAX_DEADLINE_S = MAX_SUBMIT_S + 4 * MAX_DURATION_S
MAX_REPLICAS = 64
MAX_JOB_GPUS = MAX_REPLICAS * MAX_GPUS_PER_NODE  # 1..512 GPUs per job
MAX_CPU_MILLI = 1024 * 1000  # 1,024 vCPU per replica
MAX_MEMORY_MIB = 16 * 1024 * 1024  # 16 TiB per replica
MAX_GPU_MEMORY_MIB = 256 * 1024  # 256 GiB per GPU
MAX_OVERHEAD_S = DAY_S  # checkpoint cost / restart overhead
MAX_PRIORITY = 1_000_000
MAX_VALUE_OF_TIME = 1e6  # $ per GPU-hour of delay
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
    # $ per GPU-hour of delay its owner pays (``control.value_of_time``); None: its team's or
    # the scenario's
    value_of_time_usd_per_gpu_hour: float | None = None
    # never moved for the fleet's sake, spot only where it pays with its delay priced
    # (``control.value_of_time``); None: its team's setting (not latency-sensitive)
    latency_sensitive: bool | None = None
    line: int | None = dataclasses.field(default=None, compare=False)  # in its file, for errors

    @property
    def gpu_milli_total(self) -> int:
        return self.replicas * self.request.total_gpu_milli

    @property
    def gpu_seconds(self) -> float:
        """Useful GPU-seconds (fractional shares count as their fraction)."""
        return self.duration_s * self.gpu_milli_total / GPU_MILLI


class JobSource(Protocol):
    """A workload as the simulator reads it: its jobs in arrival order, and how many. A list
    is one; so is ``traces.synthetic.SyntheticStream``, which draws its jobs as they are read
    (iterating again yields the same jobs)."""

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[JobSpec]: ...


class JobFields(BaseModel):
    """The generic job format (CSV columns / YAML keys); validated field by field."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    job_id: str = Field(min_length=1, max_length=256)
    submit_s: float = Field(ge=0, le=MAX_SUBMIT_S, allow_inf_nan=False)
    duration_s: float = Field(gt=0, le=MAX_DURATION_S, allow_inf_nan=False)
    num_gpu: int = Field(ge=0, le=MAX_GPUS_PER_NODE)
    gpu_milli: int = Field(default=GPU_MILLI, ge=1, le=GPU_MILLI)
    replicas: int = Field(default=1, ge=1, le=MAX_REPLICAS)
    cpu_milli: int = Field(default=4000, ge=0, le=MAX_CPU_MILLI)
    memory_mib: int = Field(default=12 * 1024, ge=0, le=MAX_MEMORY_MIB)
    gpu_models: str | None = Field(default=None, max_length=1024)  # "|"-separated, as gpu_spec
    gpu_memory_mib: int = Field(default=0, ge=0, le=MAX_GPU_MEMORY_MIB)
    mig_profile: str | None = Field(default=None, max_length=64)
    min_cuda: str | None = Field(default=None, max_length=16)
    tenant: str = Field(default="default", min_length=1, max_length=128)
    priority: int = Field(default=0, ge=-MAX_PRIORITY, le=MAX_PRIORITY)
    checkpointable: bool = True
    interruptible: bool = True
    deadline_s: float | None = Field(default=None, gt=0, le=MAX_DEADLINE_S, allow_inf_nan=False)
    checkpoint_cost_s: float = Field(default=30.0, ge=0, le=MAX_OVERHEAD_S, allow_inf_nan=False)
    restart_overhead_s: float = Field(
        default=120.0, ge=0, le=MAX_OVERHEAD_S, allow_inf_nan=False
    )
    utilization: float = Field(default=0.8, ge=0, le=1, allow_inf_nan=False)
    value_of_time_usd_per_gpu_hour: float | None = Field(
        default=None, ge=0, le=MAX_VALUE_OF_TIME, allow_inf_nan=False)
    latency_sensitive: bool | None = None

    @field_validator("gpu_models", "mig_profile", "min_cuda", "deadline_s",
                     "value_of_time_usd_per_gpu_hour", "latency_sensitive", mode="before")
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
        value_of_time_usd_per_gpu_hour=f.value_of_time_usd_per_gpu_hour,
        latency_sensitive=f.latency_sensitive,
        line=where.get("line"),
    )


def _validate(data: dict[str, Any], where: dict[str, Any]) -> JobFields:
    try:
        return JobFields.model_validate(data)
    except ValidationError as exc:
        raise validation_to_input_error(exc, **where) from None


# -- Philly -------------------------------------------------------------------------------------
def _philly_num(
    row: dict[str, str], field: str, where: dict[str, Any], lo: float, hi: float,
    integral: bool = False,
) -> float:
    """One numeric Philly field: finite, within [lo, hi], whole where ``integral``."""
    raw = (row.get(field) or "").strip()
    if raw == "":
        raise InputError("missing value", field=field, **where)
    kind = "a whole number" if integral else "a number"
    try:
        val = float(raw)
    except ValueError:
        raise InputError(f"expected {kind}, got {raw!r}", field=field, **where) from None
    if not math.isfinite(val) or not lo <= val <= hi or (integral and val != int(val)):
        raise InputError(
            f"expected {kind} in {lo:,.0f}..{hi:,.0f}, got {raw!r}", field=field, **where
        )
    return val


def philly_job(
    row: dict[str, str], *, index: int, submit_s: float, gpu_model: str, where: dict[str, Any]
) -> JobSpec:
    gpus = int(_philly_num(row, "num_gpus", where, 1, MAX_JOB_GPUS, integral=True))
    duration = max(_philly_num(row, "duration", where, 0, MAX_DURATION_S), 1.0)
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
        tenant=(row.get("cluster") or "").strip()[:128] or "default",
        line=where.get("line"),
    )


def _philly_time(row: dict[str, str], where: dict[str, Any]) -> float:
    """Seconds since the epoch; a timestamp without a zone is read as UTC.

    Philly's timestamps carry no zone. Reading them in the machine's local zone made ``submit_s``
    depend on ``TZ`` (a DST change inside the trace shifts every later job by an hour); UTC has
    no DST, so the offsets between jobs are the ones written in the file.
    """
    raw = (row.get("timestamp") or "").strip()
    try:
        when = datetime.fromisoformat(raw)
    except ValueError:
        raise InputError(
            f"expected 'YYYY-MM-DD HH:MM:SS', got {raw!r}", field="timestamp", **where
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    try:
        return when.timestamp()
    except (OverflowError, ValueError):
        raise InputError(f"timestamp {raw!r} out of range", field="timestamp", **where) from None


def _rows(path: Path) -> Iterator[tuple[int, dict[str, str]]]:
    """Rows of a CSV file by line number (header = line 1); CSV defects are InputErrors."""
    reader = csv.DictReader(io.StringIO(read_text(path, "workload file"), newline=""))
    lineno = 1
    try:
        for row in reader:
            lineno = reader.line_num
            if None in row or any(v is None for v in row.values()):
                raise InputError(
                    f"expected {len(reader.fieldnames or [])} columns", path=path, line=lineno
                )
            yield lineno, row
    except csv.Error as exc:
        raise InputError(f"not valid CSV: {exc}", path=path, line=reader.reader.line_num) from None


def load_philly(path: Path, gpu_model: str = "V100-16GB") -> list[JobSpec]:
    rows = list(_rows(path))
    if not rows:
        return []
    times = [_philly_time(r, {"path": path, "line": ln}) for ln, r in rows]
    _check_span(path, rows, times)
    t0 = min(times)
    jobs = [
        philly_job(
            row, index=i, submit_s=t - t0, gpu_model=gpu_model, where={"path": path, "line": ln}
        )
        for i, ((ln, row), t) in enumerate(zip(rows, times, strict=True))
    ]
    jobs.sort(key=lambda j: (j.submit_s, j.job_id))
    return jobs


def _check_span(path: Path, rows: list[tuple[int, dict[str, str]]], times: list[float]) -> None:
    """A trace spans at most MAX_SUBMIT_S: name the row farthest from the median time.

    One 1970 timestamp among 2017 rows would otherwise make every other job arrive 47 years
    into the simulation (which then never ends).
    """
    if max(times) - min(times) <= MAX_SUBMIT_S:
        return
    mid = sorted(times)[len(times) // 2]
    far = max(range(len(times)), key=lambda i: abs(times[i] - mid))
    days = abs(times[far] - mid) / DAY_S
    raise InputError(
        f"{rows[far][1].get('timestamp')!r} is {days:,.0f} days from the trace's median "
        f"timestamp; a trace may span at most {MAX_SUBMIT_S / DAY_S:.0f} days",
        path=path,
        line=rows[far][0],
        field="timestamp",
    )


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
    doc = read_yaml_document(path, "workload file")  # InputError with the line for bad YAML
    raw = doc.data
    if not isinstance(raw, dict) or not isinstance(raw.get("jobs"), list):
        raise InputError("expected a mapping with a 'jobs' list", path=path, field="jobs")
    lines = _yaml_item_lines(doc.node)

    def records() -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
        for i, item in enumerate(raw["jobs"]):
            where: dict[str, Any] = {"path": path, "line": lines[i] if i < len(lines) else None}
            if not isinstance(item, dict):
                raise InputError(f"jobs[{i}]: expected a mapping", **where)
            if not all(isinstance(k, str) for k in item):
                raise InputError(f"jobs[{i}]: expected field names as keys", **where)
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
    header = read_text(path, "workload file").partition("\n")[0].strip()
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
