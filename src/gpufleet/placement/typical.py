"""Typical tasks: the workload mix that fragmentation is measured against (FGD, ATC'23 §4).

A GPU is fragmented only relative to what will arrive: 300 idle milli-GPU are waste for a cluster
of whole-GPU jobs and useful capacity for one of 0.25-GPU notebooks. The typical tasks are the most
popular request shapes, most popular first, until ``coverage`` of all requests is covered; their
frequencies are renormalised to sum to 1.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from gpufleet.errors import InputError
from gpufleet.state import GPU_MILLI, ResourceRequest

TypicalTasks = list[tuple[ResourceRequest, float]]


def shape_key(req: ResourceRequest) -> tuple[int, int, int, str]:
    """(cpu, milli per GPU, GPUs, model constraint) — what makes two requests the same shape."""
    milli = 0 if req.num_gpu == 0 else (req.gpu_milli if req.is_shared else GPU_MILLI)
    models = "|".join(sorted(req.gpu_models)) if req.gpu_models else ""
    return (req.cpu_milli, milli, req.num_gpu, models)


def typical_tasks_from(requests: Sequence[ResourceRequest], coverage: float = 0.95) -> TypicalTasks:
    """The popular shapes covering ``coverage`` of ``requests``, with renormalised frequencies.

    Ties in popularity go to the larger shape first, as in the FGD simulator, so the chosen set
    is deterministic.
    """
    if not 0 < coverage <= 1:
        raise InputError(f"coverage must be in (0, 1], got {coverage}", field="coverage")
    if not requests:
        raise InputError("no requests to derive typical tasks from", field="requests")
    counts: Counter[tuple[int, int, int, str]] = Counter()
    sample: dict[tuple[int, int, int, str], ResourceRequest] = {}
    for req in requests:
        key = shape_key(req)
        counts[key] += 1
        sample.setdefault(key, req)
    ranked = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    total = len(requests)
    chosen: list[tuple[tuple[int, int, int, str], int]] = []
    covered = 0
    for key, cnt in ranked:
        if covered >= coverage * total:
            break
        chosen.append((key, cnt))
        covered += cnt
    return [(sample[key], cnt / covered) for key, cnt in chosen]


# Used when a caller gives an FGD-style policy no workload to learn from: a generic mix of
# fractional inference pods and whole-GPU training pods (4 vCPU per GPU).
DEFAULT_TYPICAL_TASKS: TypicalTasks = [
    (ResourceRequest(cpu_milli=4000, num_gpu=1, gpu_milli=GPU_MILLI), 0.35),
    (ResourceRequest(cpu_milli=2000, num_gpu=1, gpu_milli=500), 0.2),
    (ResourceRequest(cpu_milli=1000, num_gpu=1, gpu_milli=250), 0.15),
    (ResourceRequest(cpu_milli=8000, num_gpu=2, gpu_milli=GPU_MILLI), 0.1),
    (ResourceRequest(cpu_milli=16000, num_gpu=4, gpu_milli=GPU_MILLI), 0.1),
    (ResourceRequest(cpu_milli=32000, num_gpu=8, gpu_milli=GPU_MILLI), 0.1),
]
