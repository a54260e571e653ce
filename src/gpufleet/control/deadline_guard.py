"""When moving or gambling a deadline job would make its deadline unreachable.

The deadline controller (``gpufleet.market.deadline``) decides spot vs on-demand for jobs that
keep their progress across a reclaim (checkpointed). Other choices of the driver can also cost
a deadline; these rules guard them with the cluster's own delays (each one answers a miss cause
found in the default simulation, see docs/simulator.md "Deadline misses"):

* a fresh node launched now can still finish the job: ``deadline − now ≥ provisioning_delay +
  remaining`` — when not, the job is *hopeless* for the guards (only capacity that frees up can
  save it, so it is not narrowed to on-demand), and a miss whose window fails this at submit is
  counted as infeasible in the summary;

* a job that cannot checkpoint loses all its work on a reclaim, so it may start on spot only
  while a rerun from zero — on a fresh on-demand node (``provisioning_delay_s``) with its restart
  overhead — still ends by the deadline whenever during its spot run the reclaim comes:
  ``deadline − now ≥ 2·duration + restart_overhead + provisioning_delay`` (a reclaim just before
  the spot run ends leaves ``deadline − now − duration`` for the rerun);
* consolidation moves a pod by checkpointing it, maybe waiting for a replacement node, and
  restarting it: it may move a deadline job only if ``checkpoint_cost + provisioning_delay +
  restart_overhead + remaining work`` still fits before the deadline (Karpenter's
  ``do-not-disrupt`` for pods that cannot afford the move);
* scale-up waits up to ``max_pending_wait_s`` for a small pod (below the pending-GPU trigger);
  a deadline job whose slack cannot absorb that wait plus a node's boot is ``urgent``:
  ``deadline − now < remaining + restart_overhead + provisioning_delay + max_pending_wait``.

All are conservative: they assume no free capacity is waiting, as the safety net of the
deadline controller assumes nothing about spot.
"""

from __future__ import annotations


def fresh_node_fits(
    now_s: float, deadline_s: float, remaining_s: float, provisioning_delay_s: float
) -> bool:
    """Whether a node launched at ``now_s`` could still finish the job by its deadline."""
    return deadline_s - now_s >= provisioning_delay_s + remaining_s


def rerun_fits(
    now_s: float, deadline_s: float, duration_s: float, restart_overhead_s: float,
    provisioning_delay_s: float,
) -> bool:
    """Whether a job without checkpoints may still start on spot at ``now_s``."""
    return deadline_s - now_s >= 2 * duration_s + restart_overhead_s + provisioning_delay_s


def move_fits(
    now_s: float, deadline_s: float, remaining_s: float, checkpoint_cost_s: float,
    restart_overhead_s: float, provisioning_delay_s: float,
) -> bool:
    """Whether a running deadline job can afford to be checkpointed and moved at ``now_s``."""
    need = checkpoint_cost_s + provisioning_delay_s + restart_overhead_s + remaining_s
    return deadline_s - now_s >= need


def cannot_wait(
    now_s: float, deadline_s: float, remaining_s: float, restart_overhead_s: float,
    provisioning_delay_s: float, max_pending_wait_s: float,
) -> bool:
    """Whether a pending deadline job needs its node launched now, not after the wait trigger."""
    need = remaining_s + restart_overhead_s + provisioning_delay_s + max_pending_wait_s
    return deadline_s - now_s < need
