"""Accounting invariants a simulation must satisfy, whatever its policies did.

The simulator's figures are only evidence if its books balance. The check here catches the
whole class of progress-accounting bugs (work credited twice, work credited without GPUs held):

* **per job and for the fleet: allocated GPU-time ≥ useful + lost GPU-time.** A job cannot have
  done (useful) or thrown away (lost) more work than the GPU-time it held. *Allocated* comes from
  the driver's allocation ledger — bind-to-release time × the milli-GPU its binds actually hold
  (whole GPUs, a fraction's share, a MIG instance's compute share), recorded apart from the
  progress fields — so it is an independent witness of the progress accounting. Restart
  overhead, checkpoint writes and rounding a fraction up to a whole GPU are allocated but
  neither useful nor lost, hence ≥ and not =;
* for the fleet: allocated ≤ provisioned GPU-time (jobs never hold more than the nodes billed).

Per job, a finished job's work is its duration; an unfinished one's is the work banked so far
(``work_s``), so the check holds at any instant of a run, not only at the end. A still-open
segment's allocation counts up to ``sim.now``.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.sim.cluster import ClusterSim
from gpufleet.sim.jobrun import DONE, RUNNING
from gpufleet.state import GPU_MILLI

# float slack per GPU-second compared (sums of many segment products)
REL_TOL = 1e-9
ABS_TOL_GPU_S = 1e-6


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken invariant: where, and the three figures (GPU-seconds)."""

    scope: str  # "job <id>" | "fleet"
    rule: str
    allocated_gpu_s: float
    claimed_gpu_s: float  # useful + lost, or provisioned for the upper bound

    def __str__(self) -> str:
        return (f"{self.scope}: {self.rule} violated: allocated {self.allocated_gpu_s:,.1f} "
                f"GPU-s vs {self.claimed_gpu_s:,.1f} GPU-s")


def _exceeds(claimed: float, allocated: float) -> bool:
    return claimed > allocated * (1 + REL_TOL) + ABS_TOL_GPU_S


def job_allocated_gpu_s(sim: ClusterSim, idx: int) -> float:
    """GPU-seconds job ``idx`` has held so far (closed segments + the open one up to now)."""
    j = sim.jobs[idx]
    open_seg = 0.0
    if j.state == RUNNING and j.binds:
        open_seg = max(0.0, sim.now - j.bound_s) * j.held_milli / GPU_MILLI
    return j.alloc_gpu_s + open_seg


def fleet_provisioned_gpu_s(sim: ClusterSim) -> float:
    """Every node's billed lifetime × its GPUs, up to the end of the run (or now)."""
    end = sim.end_s if sim.end_s is not None else sim.now
    return sum(n.lifetime_s(end) * n.gpus for n in sim.cloud.nodes.values())


def check_accounting(sim: ClusterSim) -> list[Violation]:
    """Every violation of the invariants above ([] = the books balance)."""
    out: list[Violation] = []
    fleet_alloc = 0.0
    for j in sim.jobs:
        alloc = job_allocated_gpu_s(sim, j.idx)
        fleet_alloc += alloc
        work = j.spec.duration_s if j.state == DONE else j.work_s
        claimed = (work + j.lost_work_s) * j.gpus
        if _exceeds(claimed, alloc):
            out.append(Violation(f"job {j.spec.job_id}", "allocated >= useful + lost", alloc,
                                 claimed))
    t = sim.tally
    fleet_claimed = t.useful_gpu_s + t.lost_gpu_s
    if _exceeds(fleet_claimed, fleet_alloc):
        out.append(Violation("fleet", "allocated >= useful + lost", fleet_alloc, fleet_claimed))
    provisioned = fleet_provisioned_gpu_s(sim)
    if _exceeds(fleet_alloc, provisioned):
        out.append(Violation("fleet", "provisioned >= allocated", provisioned, fleet_alloc))
    return out


def assert_accounting(sim: ClusterSim) -> None:
    """Raise ``AssertionError`` listing the first violations (for tests and debugging)."""
    bad = check_accounting(sim)
    if bad:
        more = f" (+{len(bad) - 5} more)" if len(bad) > 5 else ""
        raise AssertionError("; ".join(str(v) for v in bad[:5]) + more)
