"""The run's books: exact integrals and counters (``Tally``) and the sampled series (``Series``).

What the summary and the report read, kept apart from the driver so that the driver only says
*what happened* (a job released its GPUs, work was lost, a sample is due) and the books say how
it is counted. The allocation ledger: a job's allocated GPU-time is bind-to-release time × the
milli-GPU its binds hold (MIG: the instances' compute share of their GPU); a tenant's cost is
each replica's share of its node's price over the same span.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from gpufleet.catalog.gpus import GpuCatalog
from gpufleet.decisions import Bind
from gpufleet.sim.cloud import MICRO, SimNode
from gpufleet.sim.jobrun import JobRun
from gpufleet.state import GPU_MILLI

MigMasks = tuple[tuple[int, int, int], ...]


@dataclass(slots=True)
class Series:
    """Time series for the report (one row per sample)."""

    t: list[float] = field(default_factory=list)
    alloc_gpus: list[float] = field(default_factory=list)
    od_gpus: list[int] = field(default_factory=list)
    spot_gpus: list[int] = field(default_factory=list)
    cost_usd: list[float] = field(default_factory=list)
    pending: list[int] = field(default_factory=list)
    interruptions: list[int] = field(default_factory=list)
    # with a ``teams:`` section: GPU-equivalents each queue's running jobs hold, per sample
    team_gpus: dict[str, list[float]] = field(default_factory=dict)

    def sample_teams(self, teams: Iterable[str], milli: dict[str, int]) -> None:
        """The teams' GPU-equivalents in use at the row ``sample`` just added."""
        for t in teams:
            self.team_gpus.setdefault(t, []).append(milli.get(t, 0) / GPU_MILLI)

    def sample(self, now: float, live: Iterable[SimNode], cost_usd: float, pending: int,
               interruptions: int) -> None:
        """One row: the live nodes' allocation and GPUs by capacity type, cost so far."""
        self.t.append(now)
        od = spot = alloc = 0
        for n in live:
            alloc += n.alloc_milli
            if n.spot:
                spot += n.gpus
            else:
                od += n.gpus
        self.alloc_gpus.append(alloc / GPU_MILLI)
        self.od_gpus.append(od)
        self.spot_gpus.append(spot)
        self.cost_usd.append(cost_usd)
        self.pending.append(pending)
        self.interruptions.append(interruptions)


@dataclass(slots=True)
class Tally:
    """Exact integrals and counters (not sampled)."""

    alloc_gpu_s: float = 0.0
    useful_gpu_s: float = 0.0
    interruptions: int = 0
    reclaims: int = 0
    lost_gpu_s: float = 0.0
    recoveries: list[float] = field(default_factory=list)
    cost_by_tenant_micro: Counter = field(default_factory=Counter)
    launches_failed: int = 0
    consolidations: int = 0
    deadline_switches: int = 0
    node_failures: int = 0
    replacements: int = 0  # nodes launched by multi-node consolidation
    spot_swaps: int = 0  # on-demand nodes whose work moved to spot (``control.spot_swap``)
    failure_interruptions: int = 0
    # pods evicted for pending gangs by ``control.gang_room`` (how often each choice won is
    # the book's ``GangRoomBook.counts``)
    gang_room_evictions: int = 0

    def lose(self, j: JobRun, lost_s: float) -> None:
        """``lost_s`` of ``j``'s work is lost (it restarts from an earlier point)."""
        j.lost_work_s += lost_s
        self.lost_gpu_s += lost_s * j.gpus

    def release(self, j: JobRun, nodes: Iterable[SimNode], at: float) -> None:
        """``j`` releases its binds (one replica on each of ``nodes``) at ``at``: book its
        allocated GPU-time and each replica's share of its node's cost."""
        seg = max(0.0, at - j.bound_s)
        held = seg * j.held_milli / GPU_MILLI
        j.alloc_gpu_s += held
        self.alloc_gpu_s += held
        j.held_milli = 0
        per_replica = j.replica_milli
        for node in nodes:
            if node.gpus:
                share = per_replica / (GPU_MILLI * node.gpus)
                self.cost_by_tenant_micro[j.spec.tenant] += int(
                    node.usd_per_hour * MICRO * share * seg / 3600.0
                )


def held_milli(bind: Bind, masks: MigMasks, node: SimNode, catalog: GpuCatalog) -> int:
    """Milli-GPU a bind holds: its GPUs × milli each, or for MIG the instances' compute slices
    as a share of their GPU (the ledger's unit)."""
    if bind.mig:
        mig = catalog[node.itype.gpu_model].mig
        slices = mig.compute_slices if mig is not None else 1
        return sum(compute * GPU_MILLI // slices for _, _, compute in masks)
    return len(bind.gpus) * bind.milli_per_gpu
