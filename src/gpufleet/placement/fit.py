"""The fit rule: can this node take this request now, and if not, why not.

One plain, scalar reference of "does it fit", read one node at a time. Everything else that
answers the question is checked against it or built from its parts:

* the vectorised placement filters (``placement.filters``) answer it for every node at once;
  ``tests/placement/test_fit.py`` runs both over random fleets and requests and requires the same
  reasons, node by node (as the fast scorers are held to their scalar references);
* the provisioning bin-packer (``provisioning.binpack``: ``fits_shape`` and ``Bin.take``) asks it
  of an empty node of a shape, and takes its per-node rules (model, CUDA, taints, per-GPU memory)
  from here.

The rules, in the filters' order (the reasons are the filters' own, so an Unschedulable reads the
same whichever copy answered):

1. taints: every taint on the node is tolerated (NoSchedule semantics);
2. GPU model: a request that uses GPUs (whole, shared or a MIG slice) names the node's model or
   an alias of it, case-insensitively (``"v100"`` matches ``V100-SXM2-16GB``), or names none;
3. CUDA: the node's driver supports ``min_cuda`` *and* so does the GPU model (CUDA 12 dropped
   compute capability 3.x: a K80's ``max_cuda`` is 11.x, whatever the driver); a node without a
   driver (0) runs no CUDA code;
4. CPU and memory fit what is free;
5. GPU memory: at least ``num_gpu`` GPUs with ``gpu_memory_mib`` free each (not for MIG pods:
   a slice's memory is its profile's);
6. GPUs: a shared pod needs one non-MIG GPU with ``gpu_milli`` and its memory free, a whole-GPU
   pod ``num_gpu`` fully idle non-MIG GPUs with the memory free;
7. MIG: a GPU in MIG mode of a model offering the profile, with the compute slices left and a
   legal start whose memory slices are all free (``placement.mig``).

Example: a 1-GPU pod asking 500 milli and 10 GiB of GPU memory, on a node of two 16 GiB GPUs
where GPU 0 has 600 milli but 8 GiB free and GPU 1 has 0 milli but 16 GiB free (its pod asked no
memory): the GPU-memory rule passes (GPU 1 has the 10 GiB), but no single GPU has both the milli
and the memory → ``["insufficient GPU"]``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpufleet.catalog.gpus import GpuCatalog, default_gpu_catalog, parse_version
from gpufleet.placement.mig import legal_starts
from gpufleet.state import GPU_MILLI, FleetState, ResourceRequest

UNTOLERATED_TAINT = "untolerated taint"
OTHER_ZONE = "in another zone"
MODEL_NOT_REQUESTED = "GPU model not requested"
CUDA_UNSUPPORTED = "CUDA version unsupported"
INSUFFICIENT_CPU = "insufficient CPU"
INSUFFICIENT_MEMORY = "insufficient memory"
INSUFFICIENT_GPU_MEMORY = "insufficient GPU memory"
INSUFFICIENT_GPU = "insufficient GPU"
NO_MIG_SLOT = "no MIG slice of that profile"


@dataclass(frozen=True, slots=True)
class NodeRoom:
    """One node as the fit rule reads it: what it is and what is free on it now.

    Per-GPU tuples have one entry per GPU the node has. A GPU in MIG mode offers no milli-GPU
    (its ``gpu_free_milli`` is 0) but memory slices (``mig_used`` bitmask) and compute slices.
    """

    gpu_model: str
    cpu_milli: int
    memory_mib: int
    gpu_free_milli: tuple[int, ...] = ()
    gpu_free_memory_mib: tuple[int, ...] = ()
    cuda_driver: int = 0
    taints: frozenset[str] = frozenset()
    mig: tuple[bool, ...] = ()  # per GPU; () = no GPU in MIG mode
    mig_used: tuple[int, ...] = ()
    mig_compute_used: tuple[int, ...] = ()
    mig_compute_total: tuple[int, ...] = ()
    zone: str | None = None  # "" = a node without a zone; None = not known yet (a shape)

    @property
    def gpus(self) -> int:
        return len(self.gpu_free_milli)

    def is_mig(self, gpu: int) -> bool:
        return bool(self.mig) and self.mig[gpu]

    @classmethod
    def empty(
        cls,
        gpu_model: str,
        gpus: int,
        cpu_milli: int,
        memory_mib: int,
        gpu_memory_mib: int = 0,
        cuda_driver: int = 0,
        taints: frozenset[str] = frozenset(),
        mig_compute: int = 0,
    ) -> NodeRoom:
        """A node with nothing bound; ``mig_compute > 0``: every GPU in MIG mode."""
        mig = mig_compute > 0
        return cls(
            gpu_model,
            cpu_milli,
            memory_mib,
            (0 if mig else GPU_MILLI,) * gpus,
            (gpu_memory_mib,) * gpus,
            cuda_driver,
            taints,
            (True,) * gpus if mig else (),
            (0,) * gpus if mig else (),
            (0,) * gpus if mig else (),
            (mig_compute,) * gpus if mig else (),
        )

    @classmethod
    def of_row(cls, state: FleetState, row: int) -> NodeRoom:
        """Node ``row`` of a fleet snapshot (what the vectorised filters read, one row)."""
        g = int(state.num_gpus[row])
        mid = int(state.model_id[row])
        names = state.taint_names
        bits = int(state.taint_bits[row])
        mig = tuple(bool(x) for x in state.mig_enabled[row, :g])
        return cls(
            gpu_model=state.model_names[mid] if mid >= 0 else "",
            cpu_milli=int(state.cpu_free[row]),
            memory_mib=int(state.mem_free[row]),
            gpu_free_milli=tuple(int(x) for x in state.free_milli[row, :g]),
            gpu_free_memory_mib=tuple(int(x) for x in state.gpu_mem_free[row, :g]),
            cuda_driver=int(state.cuda_driver[row]),
            taints=frozenset(n for i, n in enumerate(names) if bits >> i & 1),
            mig=mig if any(mig) else (),
            mig_used=tuple(int(x) for x in state.mig_used[row, :g]) if any(mig) else (),
            mig_compute_used=(
                tuple(int(x) for x in state.mig_compute_used[row, :g]) if any(mig) else ()
            ),
            mig_compute_total=(
                tuple(int(x) for x in state.mig_compute_total[row, :g]) if any(mig) else ()
            ),
            zone=state.zone_names[zid] if (zid := int(state.zone_id[row])) >= 0 else "",
        )


# --- the rules, one function each (the bin-packer calls them directly) ------------------------


def uses_gpu(req: ResourceRequest) -> bool:
    return req.num_gpu > 0 or req.mig_profile is not None


def tolerates(taints: Iterable[str], tolerations: frozenset[str]) -> bool:
    return all(t in tolerations for t in taints)


def model_allowed(wanted: frozenset[str] | None, model: str, catalog: GpuCatalog) -> bool:
    """``model`` is one of ``wanted`` (None = any), comparing canonical names via the aliases."""
    if not wanted:
        return True
    canon = {catalog.resolve(m) or m for m in wanted}
    return (catalog.resolve(model) or model) in canon


def cuda_supported(min_cuda: int, driver: int, model: str, catalog: GpuCatalog) -> bool:
    """The node's driver and the GPU model both run code built for ``min_cuda``."""
    if not min_cuda:
        return True
    if driver < min_cuda:
        return False
    cap = catalog[model].max_cuda if model in catalog else None
    return not cap or parse_version(cap) >= min_cuda


def gpu_takes(req: ResourceRequest, free_milli: int, free_memory_mib: int, mig: bool) -> bool:
    """One GPU can take one GPU's worth of a (non-MIG) request: milli and memory free."""
    milli = req.gpu_milli if req.is_shared else GPU_MILLI
    memory_ok = not req.gpu_memory_mib or free_memory_mib >= req.gpu_memory_mib
    return not mig and free_milli >= milli and memory_ok


def mig_slot_free(req: ResourceRequest, node: NodeRoom, catalog: GpuCatalog) -> bool:
    """Some MIG GPU of the node has compute left and a legal free start for the profile."""
    profile = req.mig_profile
    if profile is None or node.gpu_model not in catalog:
        return False
    spec = catalog[node.gpu_model].mig
    if spec is None or profile not in spec.profiles:
        return False
    prof = spec.profiles[profile]
    return any(
        node.is_mig(g)
        and node.mig_compute_used[g] + prof.compute <= node.mig_compute_total[g]
        and legal_starts(prof, node.mig_used[g])
        for g in range(node.gpus)
    )


# --- the reference ----------------------------------------------------------------------------


def fits(
    req: ResourceRequest, node: NodeRoom, catalog: GpuCatalog | None = None
) -> list[str]:
    """Why ``node`` cannot take ``req`` now, in the filters' order; [] = it fits."""
    cat = catalog or default_gpu_catalog()
    out: list[str] = []
    if not tolerates(node.taints, req.tolerations):
        out.append(UNTOLERATED_TAINT)
    if req.zone is not None and node.zone is not None and node.zone != req.zone:
        out.append(OTHER_ZONE)
    if uses_gpu(req) and not model_allowed(req.gpu_models, node.gpu_model, cat):
        out.append(MODEL_NOT_REQUESTED)
    if not cuda_supported(req.min_cuda, node.cuda_driver, node.gpu_model, cat):
        out.append(CUDA_UNSUPPORTED)
    if req.cpu_milli > node.cpu_milli:
        out.append(INSUFFICIENT_CPU)
    if req.memory_mib > node.memory_mib:
        out.append(INSUFFICIENT_MEMORY)
    whole_or_shared = req.num_gpu > 0 and req.mig_profile is None
    if whole_or_shared and req.gpu_memory_mib:
        roomy = sum(1 for m in node.gpu_free_memory_mib if m >= req.gpu_memory_mib)
        if roomy < req.num_gpu:
            out.append(INSUFFICIENT_GPU_MEMORY)
    if whole_or_shared:
        usable = sum(
            1
            for g in range(node.gpus)
            if gpu_takes(req, node.gpu_free_milli[g], node.gpu_free_memory_mib[g], node.is_mig(g))
        )
        if usable < req.num_gpu:
            out.append(INSUFFICIENT_GPU)
    if req.mig_profile is not None and not mig_slot_free(req, node, cat):
        out.append(NO_MIG_SLOT)
    return out
