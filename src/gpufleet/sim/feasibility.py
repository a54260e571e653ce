"""Refuse jobs that no node of a scenario could ever run, naming the file, line and field.

A job asking more than any instance type the scenario may use (a replica of 999 vCPU, 200 GiB of
GPU memory, CUDA 99, nine GPUs on a fleet of 8-GPU types) used to be accepted, wait forever and
show up as one more "lost" job at $0 with no reason. It is bad input, reported before any
simulation runs: ``gpufleet simulate`` checks every job against every scenario.

"Could run" is the autoscaler's own test (:func:`gpufleet.provisioning.binpack.fits_shape`) on an
empty node of each instance type — as a plain node, and as a MIG-mode node where the job asks a
MIG profile and the scenario shares GPUs — after the same request rewrite the simulator applies
(``control.admission.effective_request``: without sharing, a fraction or a MIG slice becomes
one whole GPU). The field named is the first constraint, in the order model → GPUs → GPU memory
→ CUDA → CPU → memory, that no remaining instance type meets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from gpufleet.catalog.gpus import default_gpu_catalog
from gpufleet.catalog.instances import InstanceType
from gpufleet.config import Scenario
from gpufleet.control.admission import effective_request
from gpufleet.errors import InputError
from gpufleet.provisioning.binpack import NodeShape, fits_shape, mig_spec
from gpufleet.state import ResourceRequest
from gpufleet.traces.jobs import JobSpec

# Philly names its GPU column differently; the other derived fields cannot be out of range.
PHILLY_FIELDS = {"num_gpu": "num_gpus"}


def node_shapes(types: Sequence[InstanceType], mig: bool) -> list[tuple[str, NodeShape]]:
    """(type name, shape of an empty node), MIG-mode shapes for the MIG-capable types."""
    cat = default_gpu_catalog()
    out = []
    for it in types:
        gm = cat[it.gpu_model]
        if mig and gm.mig is None:
            continue
        out.append((it.name, NodeShape.of(it, mig)))
    return out


def _offers(shape: NodeShape, profile: str) -> bool:
    spec = mig_spec(shape.gpu_model)
    return spec is not None and profile in spec.profiles


def _version(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10}"


def blocking_constraint(
    req: ResourceRequest, shapes: Sequence[tuple[str, NodeShape]]
) -> tuple[str, str] | None:
    """None if some shape fits ``req``; else (field, why) for the first constraint none meets."""
    if any(fits_shape(req, s) for _, s in shapes):
        return None
    uses_gpu = req.num_gpu > 0 or req.mig_profile is not None
    left = [s for _, s in shapes]
    checks: list[tuple[str, Callable[[NodeShape], bool], Callable[[list[NodeShape]], str]]] = []
    if req.mig_profile is not None:
        checks.append((
            "mig_profile",
            lambda s: s.mig and _offers(s, req.mig_profile or "")
            and (req.gpu_models is None or s.gpu_model in req.gpu_models),
            lambda _: f"no instance type offers MIG profile {req.mig_profile!r}"
            + (f" on {sorted(req.gpu_models)}" if req.gpu_models else ""),
        ))
    elif uses_gpu:
        checks.append((
            "gpu_models",
            lambda s: not s.mig and (req.gpu_models is None or s.gpu_model in req.gpu_models),
            lambda ss: f"no instance type has {sorted(req.gpu_models or ())} GPUs "
            f"(available: {sorted({s.gpu_model for s in ss})})",
        ))
    if uses_gpu:
        checks += [
            ("num_gpu", lambda s: req.num_gpu <= s.gpus,
             lambda ss: f"asks {req.num_gpu} GPUs per replica; the largest instance type has "
             f"{max(s.gpus for s in ss)}"),
            ("gpu_memory_mib", lambda s: req.gpu_memory_mib <= s.gpu_memory_mib,
             lambda ss: f"asks {req.gpu_memory_mib:,} MiB per GPU; the most any GPU has is "
             f"{max(s.gpu_memory_mib for s in ss):,}"),
        ]
    checks += [
        ("min_cuda", lambda s: not req.min_cuda or not s.cuda_driver or req.min_cuda
         <= s.cuda_driver,
         lambda ss: f"needs CUDA {_version(req.min_cuda)}; the newest driver is "
         f"{_version(max(s.cuda_driver for s in ss))}"),
        ("cpu_milli", lambda s: req.cpu_milli <= s.cpu_milli,
         lambda ss: f"asks {req.cpu_milli:,} milli-CPU per replica; the most an instance type "
         f"that fits the rest offers is {max(s.cpu_milli for s in ss):,}"),
        ("memory_mib", lambda s: req.memory_mib <= s.memory_mib,
         lambda ss: f"asks {req.memory_mib:,} MiB per replica; the most an instance type that "
         f"fits the rest offers is {max(s.memory_mib for s in ss):,}"),
    ]
    for field, ok, why in checks:
        kept = [s for s in left if ok(s)]
        if not kept:
            return field, why(left) if left else "no instance type is available"
        left = kept
    return "num_gpu", "no instance type fits the request as a whole"


def check_runnable(
    jobs: Iterable[JobSpec],
    sc: Scenario,
    types: Sequence[InstanceType],
    path: Path | str | None = None,
    field_names: Mapping[str, str] | None = None,
) -> None:
    """InputError for the first job no instance type of ``types`` could ever run under ``sc``."""
    plain = node_shapes(types, mig=False)
    mig = node_shapes(types, mig=True) if sc.sharing else []
    seen: dict[ResourceRequest, tuple[str, str] | None] = {}
    for job in jobs:
        # the request the simulator places (spot tolerance aside: a taint is not a size)
        try:
            req = effective_request(job, sc.sharing, spot=False)
        except InputError as exc:  # a MIG profile no catalogued GPU offers: say where
            raise InputError(exc.detail, path=path, line=job.line, field=exc.field) from None
        if req not in seen:
            shapes = mig if req.mig_profile is not None else plain
            seen[req] = blocking_constraint(req, shapes)
        blocked = seen[req]
        if blocked is not None:
            field, why = blocked
            names = field_names or {}
            raise InputError(
                f"job {job.job_id!r} can never run in scenario {sc.name!r} ({sc.provider}"
                f"{', instance_types ' + ','.join(sc.instance_types) if sc.instance_types else ''}"
                f"): {why}",
                path=path,
                line=job.line,
                field=names.get(field, field),
            )
