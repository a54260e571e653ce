"""The embedded default workload: a seeded synthetic generator with published shapes.

Every distribution is stated with the statistic it reproduces (see docs/workloads.md):

* **GPUs per job** — Microsoft Philly (Jeon et al., ATC'19; the trace in shared/data): 93.2 % of
  jobs take 1 GPU, 2.2 % 2, 2.3 % 4, 2.0 % 8, 0.24 % 16, 0.08 % 32.
* **Fractional GPUs** — Alibaba openb (Weng et al., ATC'23 FGD; shared/data): 43.6 % of GPU pods
  ask for part of one GPU; the fraction follows that trace's histogram (80 % and 40 % most common).
* **Duration** — a two-part log-normal mixture fitted to Philly: 30 % short runs (debugging and
  early failures, which the Philly paper reports as a large share; median 2 min, sigma 1.0) and
  70 % training runs (median 50 min, sigma 1.8). The mixture's median is ≈1,100 s and p95 ≈
  41,000 s against Philly's 1,144 s and 43,648 s.
* **Arrivals** — a non-homogeneous Poisson process with a diurnal sine (peak at 14:00, ±50 %), the
  daily cycle both Philly and Alibaba PAI (Weng et al., NSDI'22) show.
* **Checkpointable share** 80 %, **deadline share** 20 % with a slack of 1.5–3× the run time:
  assumptions (no public trace reports them), exposed as parameters.
* **Tenants** — four teams with Zipf(1) weights, like Philly's virtual clusters.

All jobs run at the reference throughput of ``gpu_model`` (V100-16GB, the p3 family the spot
traces describe), so cost comparisons between scenarios are like for like.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpufleet.state import GPU_MILLI, ResourceRequest
from gpufleet.traces.jobs import MAX_GPUS_PER_NODE, JobSpec

GPU_COUNTS = (1, 2, 4, 8, 16, 32)
GPU_COUNT_WEIGHTS = (76627, 1818, 1870, 1643, 199, 67)  # Philly job counts
FRACTION_MILLI = (100, 200, 300, 400, 500, 600, 800)
FRACTION_WEIGHTS = (99, 207, 388, 899, 147, 253, 1078)  # openb pods per gpu_milli bucket
DAY = 86400.0


class SyntheticWorkload(BaseModel):
    """Parameters of the generator; the defaults are the embedded default workload."""

    model_config = ConfigDict(extra="forbid")

    jobs: int = Field(default=2000, ge=1)
    days: float = Field(default=3.0, gt=0)
    fractional_share: float = Field(default=0.436, ge=0, le=1)
    short_share: float = Field(default=0.30, ge=0, le=1)
    short_median_s: float = Field(default=120.0, gt=0)
    short_sigma: float = Field(default=1.0, gt=0)
    long_median_s: float = Field(default=3000.0, gt=0)
    long_sigma: float = Field(default=1.8, gt=0)
    max_duration_s: float = Field(default=3 * DAY, gt=0)
    diurnal_amplitude: float = Field(default=0.5, ge=0, lt=1)
    peak_hour: float = Field(default=14.0, ge=0, lt=24)
    checkpointable_share: float = Field(default=0.8, ge=0, le=1)
    deadline_share: float = Field(default=0.2, ge=0, le=1)
    deadline_slack: tuple[float, float] = (1.5, 3.0)
    tenants: tuple[str, ...] = ("vision", "nlp", "speech", "recsys")
    gpu_model: str = "V100-16GB"
    cpu_milli_per_gpu: int = Field(default=4000, ge=0)
    memory_mib_per_gpu: int = Field(default=12 * 1024, ge=0)
    # relative weights of 1, 2, 4, 8, 16 and 32 GPUs per job (None: Philly's job counts);
    # jobs of more than 8 GPUs are gangs, so this is how a workload gets more of them
    gpu_count_weights: tuple[float, float, float, float, float, float] | None = None

    @field_validator("gpu_count_weights")
    @classmethod
    def _weights(cls, w: tuple[float, ...] | None) -> tuple[float, ...] | None:
        if w is not None and (min(w) < 0 or sum(w) <= 0):
            raise ValueError("gpu_count_weights: expected six weights >= 0, not all 0 "
                             f"(for {GPU_COUNTS} GPUs), got {w}")
        return w


def _thin(p: SyntheticWorkload, rng: np.random.Generator, cand: np.ndarray) -> np.ndarray:
    """The candidates (sorted) an arrival process with the diurnal rate keeps: each with
    rate(t)/peak."""
    phase = 2 * math.pi * (cand / DAY - p.peak_hour / 24.0)
    keep = rng.random(cand.size) < (1 + p.diurnal_amplitude * np.cos(phase)) / (
        1 + p.diurnal_amplitude
    )
    return cand[keep]


def _arrivals(p: SyntheticWorkload, rng: np.random.Generator) -> np.ndarray:
    """Thinning: draw at the peak rate, keep each with rate(t)/peak."""
    horizon = p.days * DAY
    out: list[np.ndarray] = []
    need = p.jobs
    while need > 0:
        out.append(_thin(p, rng, np.sort(rng.uniform(0, horizon, size=need * 3))))
        need = p.jobs - sum(a.size for a in out)
    return np.sort(np.concatenate(out))[: p.jobs]


def generate(params: SyntheticWorkload | None = None, seed: int = 0) -> list[JobSpec]:
    """The whole workload in memory, in arrival order (``SyntheticStream`` for a trace too
    long for that)."""
    p = params or SyntheticWorkload()
    rng = np.random.default_rng(seed)
    return _draw(p, rng, _arrivals(p, rng), 0)


def _draw(p: SyntheticWorkload, rng: np.random.Generator, submit: np.ndarray,
          first: int) -> list[JobSpec]:
    """The jobs arriving at ``submit`` (sorted), numbered from ``first``."""
    n = submit.size
    w = np.asarray(p.gpu_count_weights or GPU_COUNT_WEIGHTS, float)
    gpus = rng.choice(GPU_COUNTS, size=n, p=w / w.sum())
    fw = np.asarray(FRACTION_WEIGHTS, float)
    frac = rng.choice(FRACTION_MILLI, size=n, p=fw / fw.sum())
    shared = (gpus == 1) & (rng.random(n) < p.fractional_share)
    short = rng.random(n) < p.short_share
    dur = np.where(
        short,
        np.exp(math.log(p.short_median_s) + p.short_sigma * rng.standard_normal(n)),
        np.exp(math.log(p.long_median_s) + p.long_sigma * rng.standard_normal(n)),
    )
    dur = np.clip(dur, 10.0, p.max_duration_s)
    ckpt = rng.random(n) < p.checkpointable_share
    has_deadline = rng.random(n) < p.deadline_share
    slack = rng.uniform(*p.deadline_slack, size=n)
    tw = 1.0 / np.arange(1, len(p.tenants) + 1)
    tenant = rng.choice(len(p.tenants), size=n, p=tw / tw.sum())
    util = np.clip(rng.normal(0.75, 0.15, size=n), 0.05, 1.0)
    jobs: list[JobSpec] = []
    for i in range(n):
        g = int(gpus[i])
        replicas = max(1, math.ceil(g / MAX_GPUS_PER_NODE))
        per = g // replicas
        milli = int(frac[i]) if shared[i] else GPU_MILLI
        share = milli / GPU_MILLI * per
        req = ResourceRequest(
            cpu_milli=max(1000, int(p.cpu_milli_per_gpu * share)),
            memory_mib=int(p.memory_mib_per_gpu * max(share, 0.25)),
            num_gpu=per,
            gpu_milli=milli,
            gpu_models=frozenset({p.gpu_model}),
        )
        d = float(dur[i])
        jobs.append(
            JobSpec(
                job_id=f"syn-{first + i:06d}",
                submit_s=float(submit[i]),
                duration_s=round(d, 1),
                request=req,
                replicas=replicas,
                tenant=p.tenants[int(tenant[i])],
                checkpointable=bool(ckpt[i]),
                interruptible=True,
                deadline_s=float(submit[i] + slack[i] * d) if has_deadline[i] else None,
                utilization=round(float(util[i]), 3),
            )
        )
    return jobs


CHUNK_JOBS = 20_000  # jobs drawn at a time by a stream: bounds the generator's memory


class SyntheticStream:
    """The synthetic workload drawn a window at a time, in arrival order: a trace of any length
    in bounded memory (``gpufleet.sim`` creates each job at its arrival and keeps only what the
    summary needs once it ends).

    ``generate`` draws ``3 · jobs`` candidate times uniformly over ``days``, thins them by the
    diurnal rate and keeps the first ``jobs``; the stream runs the same process window by
    window — each window of ``days · chunk_jobs / jobs`` gets its share (``3 · chunk_jobs``) of
    the candidates from its own seed ``(seed, window)``, thinned on absolute time (so windows
    join without a seam), and the stream ends at the ``jobs``-th kept arrival. Each job's other
    fields follow ``generate``'s distributions. A trace of at most ``chunk_jobs`` jobs is
    exactly ``generate(params, seed)``. Iterating again draws the same jobs (a pure function of
    the parameters and seed), so the stream pickles as its parameters alone."""

    def __init__(self, params: SyntheticWorkload, seed: int = 0,
                 chunk_jobs: int = CHUNK_JOBS) -> None:
        if chunk_jobs < 1:
            raise ValueError(f"chunk_jobs: expected >= 1, got {chunk_jobs}")
        self.params = params
        self.seed = seed
        self.chunk_jobs = chunk_jobs

    def __len__(self) -> int:
        return self.params.jobs

    def __iter__(self) -> Iterator[JobSpec]:
        p = self.params
        if p.jobs <= self.chunk_jobs:
            yield from generate(p, self.seed)
            return
        span = p.days * DAY * self.chunk_jobs / p.jobs
        done = 0
        w = 0
        while done < p.jobs:
            rng = np.random.default_rng([self.seed, w])
            start = w * span
            cand = np.sort(rng.uniform(start, start + span, size=3 * self.chunk_jobs))
            kept = _thin(p, rng, cand)[: p.jobs - done]
            yield from _draw(p, rng, kept, done)
            done += kept.size
            w += 1
