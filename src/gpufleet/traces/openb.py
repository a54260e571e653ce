"""Alibaba's openb GPU cluster trace (clusterdata ``cluster-trace-gpu-v2023``).

Two CSVs: nodes (``sn,cpu_milli,memory_mib,gpu,model``) and pods (``name,cpu_milli,memory_mib,
num_gpu,gpu_milli[,gpu_spec],…``). ``gpu_spec`` is optional, as upstream: the openb variants
``openb_pod_list_multigpu*.csv`` and others have no such column (no model constraint). The trace's
model codes (G1–G3, V100M16…) map to catalog models through the alias table; a code found nowhere
is an input error, as is any missing column or negative / out-of-range number — a packing result
built on a misread row would be silently wrong. Ranges (docs/placement.md): ``cpu_milli`` at most
1,024,000 (1,024 vCPU), ``memory_mib`` at most 16 TiB, ``gpu``/``num_gpu`` at most 64.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpufleet.catalog.gpus import GpuCatalog, default_gpu_catalog
from gpufleet.errors import InputError
from gpufleet.inputfile import read_text
from gpufleet.state import GPU_MILLI, FleetState, NodeInfo, ResourceRequest

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")  # + gpu_spec if any
MAX_CPU_MILLI = 1024 * 1000
MAX_MEMORY_MIB = 16 * 1024 * 1024
MAX_GPUS = 64


@dataclass(frozen=True, slots=True)
class OpenbNode:
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    model: str | None  # canonical catalog name; None for a CPU-only node


@dataclass(frozen=True, slots=True)
class OpenbPod:
    name: str
    request: ResourceRequest


def _rows(path: Path, required: Sequence[str]) -> Iterator[tuple[int, dict[str, str]]]:
    reader = csv.reader(io.StringIO(read_text(path, "openb CSV"), newline=""))
    try:
        yield from _checked_rows(reader, path, required)
    except csv.Error as exc:
        raise InputError(f"not valid CSV: {exc}", path=path, line=reader.line_num) from None


def _checked_rows(
    reader: Any, path: Path, required: Sequence[str]
) -> Iterator[tuple[int, dict[str, str]]]:
    """Header checked for ``required`` columns; rows as dicts with their line (header = 1)."""
    header = next(reader, None)
    if header is None:
        raise InputError("empty file; expected a CSV header", path=path, line=1)
    header = [h.strip() for h in header]
    missing = [c for c in required if c not in header]
    if missing:
        raise InputError(
            f"missing column(s) {', '.join(missing)}; expected {', '.join(required)}",
            path=path,
            line=1,
            field=missing[0],
        )
    for row in reader:
        lineno = reader.line_num
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != len(header):
            raise InputError(
                f"expected {len(header)} columns, got {len(row)}", path=path, line=lineno
            )
        yield lineno, dict(zip(header, (c.strip() for c in row), strict=True))


def _int(row: dict[str, str], col: str, path: Path, line: int, hi: int | None = None) -> int:
    text = row[col]
    try:
        value = int(text)
    except ValueError:
        raise InputError(
            f"expected a non-negative integer, got {text!r}", path=path, line=line, field=col
        ) from None
    if value < 0:
        raise InputError(
            f"expected a non-negative integer, got {value}", path=path, line=line, field=col
        )
    if hi is not None and value > hi:
        raise InputError(f"expected at most {hi}, got {value}", path=path, line=line, field=col)
    return value


def _model(text: str, catalog: GpuCatalog, path: Path, line: int, col: str) -> str:
    canon = catalog.resolve(text)
    if canon is None:
        raise InputError(
            f"unknown GPU model {text!r}: add it to the catalog or its alias table "
            "(gpufleet/catalog/data/aliases.yaml)",
            path=path,
            line=line,
            field=col,
        )
    return canon


def load_nodes(path: Path, catalog: GpuCatalog | None = None) -> list[OpenbNode]:
    catalog = catalog or default_gpu_catalog()
    out: list[OpenbNode] = []
    seen: set[str] = set()
    for line, row in _rows(path, NODE_COLUMNS):
        name = row["sn"]
        if not name:
            raise InputError("empty node name", path=path, line=line, field="sn")
        if name in seen:
            raise InputError(f"node {name!r} listed twice", path=path, line=line, field="sn")
        seen.add(name)
        gpus = _int(row, "gpu", path, line, hi=MAX_GPUS)
        model = _model(row["model"], catalog, path, line, "model") if gpus else None
        out.append(
            OpenbNode(
                name=name,
                cpu_milli=_int(row, "cpu_milli", path, line, hi=MAX_CPU_MILLI),
                memory_mib=_int(row, "memory_mib", path, line, hi=MAX_MEMORY_MIB),
                num_gpu=gpus,
                model=model,
            )
        )
    if not out:
        raise InputError("no nodes in file", path=path)
    return out


def load_pods(path: Path, catalog: GpuCatalog | None = None) -> list[OpenbPod]:
    catalog = catalog or default_gpu_catalog()
    out: list[OpenbPod] = []
    for line, row in _rows(path, POD_COLUMNS):
        num_gpu = _int(row, "num_gpu", path, line, hi=MAX_GPUS)
        milli = _int(row, "gpu_milli", path, line, hi=GPU_MILLI)
        if num_gpu >= 1 and milli == 0:
            raise InputError(
                "a pod with num_gpu >= 1 needs gpu_milli in 1..1000",
                path=path,
                line=line,
                field="gpu_milli",
            )
        if num_gpu > 1 and milli != GPU_MILLI:
            raise InputError(
                f"multi-GPU pods take whole GPUs (gpu_milli 1000), got {milli}",
                path=path,
                line=line,
                field="gpu_milli",
            )
        spec = row.get("gpu_spec", "")
        models = (
            frozenset(_model(m, catalog, path, line, "gpu_spec") for m in spec.split("|") if m)
            if spec
            else None
        )
        req = ResourceRequest(
            cpu_milli=_int(row, "cpu_milli", path, line, hi=MAX_CPU_MILLI),
            memory_mib=_int(row, "memory_mib", path, line, hi=MAX_MEMORY_MIB),
            num_gpu=num_gpu,
            gpu_milli=milli if num_gpu else GPU_MILLI,
            gpu_models=models or None,
        )
        out.append(OpenbPod(name=row["name"] or f"pod-{line}", request=req))
    if not out:
        raise InputError("no pods in file", path=path)
    return out


def build_fleet(nodes: Sequence[OpenbNode], catalog: GpuCatalog | None = None) -> FleetState:
    """A FleetState holding the trace's nodes (PCIe only: openb states no NVLink topology)."""
    catalog = catalog or default_gpu_catalog()
    state = FleetState(max_gpus=max(8, max(n.num_gpu for n in nodes)), capacity=len(nodes))
    for node in nodes:
        mem = catalog[node.model].memory_mib if node.model else 0
        state.add_node(
            node.name,
            gpu_model=node.model or "",
            num_gpus=node.num_gpu,
            cpu_milli=node.cpu_milli,
            memory_mib=node.memory_mib,
            gpu_memory_mib=mem,
            info=NodeInfo(name=node.name),
        )
    return state
