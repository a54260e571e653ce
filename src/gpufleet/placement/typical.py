"""Typical tasks: the workload mix that fragmentation is measured against (FGD, ATC'23 §4).

A GPU is fragmented only relative to what will arrive: 300 idle milli-GPU are waste for a cluster
of whole-GPU jobs and useful capacity for one of 0.25-GPU notebooks. The typical tasks are the most
popular request shapes, most popular first, until ``coverage`` of all requests is covered; their
frequencies are renormalised to sum to 1.

Two ways to get them: ``typical_tasks_from`` over a given list (the packing benchmark's protocol,
which like the FGD paper takes the pod list as known), and ``TypicalLearner``, which learns them
online from the requests that have arrived so far — what a scheduler replaying time can know.
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
    counts: Counter[ShapeKey] = Counter()
    sample: dict[ShapeKey, ResourceRequest] = {}
    for req in requests:
        key = shape_key(req)
        counts[key] += 1
        sample.setdefault(key, req)
    return _rank(counts, sample, coverage)


ShapeKey = tuple[int, int, int, str]


def _rank(
    counts: Counter[ShapeKey], sample: dict[ShapeKey, ResourceRequest], coverage: float
) -> TypicalTasks:
    ranked = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    total = sum(counts.values())
    chosen: list[tuple[tuple[int, int, int, str], int]] = []
    covered = 0
    for key, cnt in ranked:
        if covered >= coverage * total:
            break
        chosen.append((key, cnt))
        covered += cnt
    return [(sample[key], cnt / covered) for key, cnt in chosen]


class TypicalLearner:
    """Typical tasks learned online: ``observe`` each request as it arrives, never one before.

    Recomputing the ranking is cheap, but every new distribution makes FGD rescore every node,
    so the distribution is refreshed on a geometric schedule: after the 1st, 2nd, … request
    while few have arrived, then each time the count has grown by ``growth`` (5 %: ~230
    refreshes over Philly's 82k jobs). ``observe`` returns the new tasks when a refresh changed
    them (shapes or frequencies at FGD's 2**-20 resolution), else None.
    """

    def __init__(self, coverage: float = 0.95, growth: float = 1.05) -> None:
        if not 0 < coverage <= 1:
            raise InputError(f"coverage must be in (0, 1], got {coverage}", field="coverage")
        if growth <= 1:
            raise InputError(f"growth must be > 1, got {growth}", field="growth")
        self.coverage = coverage
        self.growth = growth
        self.counts: Counter[ShapeKey] = Counter()
        self._sample: dict[ShapeKey, ResourceRequest] = {}
        self.seen = 0
        self.refreshes = 0
        self._next = 1
        self._sig: tuple[tuple[ShapeKey, int], ...] = ()
        self.tasks: TypicalTasks | None = None

    def observe(self, req: ResourceRequest) -> TypicalTasks | None:
        key = shape_key(req)
        self.counts[key] += 1
        self._sample.setdefault(key, req)
        self.seen += 1
        if self.seen < self._next:
            return None
        self._next = max(self.seen + 1, int(self.seen * self.growth))
        tasks = _rank(self.counts, self._sample, self.coverage)
        sig = tuple((shape_key(r), round(p * 2**20)) for r, p in tasks)
        if sig == self._sig:
            return None
        self._sig = sig
        self.tasks = tasks
        self.refreshes += 1
        return tasks


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
