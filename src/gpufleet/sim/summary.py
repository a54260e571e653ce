"""Per-scenario figures: exact integrals from the driver's books, percentiles over jobs.

Definitions (docs/simulator.md repeats them):

* utilisation = allocated GPU-time / provisioned GPU-time, where provisioned is every node's
  billed lifetime × its GPUs (booting and draining included) and allocated is the GPU share each
  job held while bound (restart overhead and checkpoint writes included);
* useful GPU-hours = Σ job work × GPUs of finished jobs (fractions count as their fraction);
* JCT = finish − submit; queueing delay = first start − submit;
* recovery = notice → running again (rebound and past its restart overhead);
* lost GPU-hours = work thrown away (since the last checkpoint, or all of it) × GPUs;
* a deadline miss is a job with a deadline that finished after it or never finished; an
  *infeasible* one had a window (deadline − submit) shorter than provisioning delay + duration,
  so only capacity already free at submit could have met it;
* jobs lost = jobs that never finished (must be 0); ``given_up``: the jobs among them the
  simulator stopped queueing, each with why (``sim.progress``: drained again and again by its
  team's budget without keeping any work);
* late over 5 min = share of the jobs finished under the peak-sized ``static`` baseline that
  finish more than 5 minutes later here (matched by job id; a job that never finished here is
  late), filled in by ``sim.report.add_relative`` once the baseline has run;
* delay vs static = finish here − finish under ``static``, per job finished under both
  (negative: it finished earlier here); mean and p50/p95/p99 over those jobs, with the jobs
  finished under ``static`` only and those finished here only counted beside them, not
  dropped (``delay_vs_static``; filled in with the late share). Per team: the team's late
  share and delay-vs-static p95 over its own jobs;
* delay vs run time = JCT − the job's own run time (``duration_s``: what it takes bound from
  start to finish with no interruption), i.e. the time it spent not running: queueing, work
  lost to interruptions, restart overheads and checkpoint writes; mean and p50/p95/p99 over
  finished jobs, and that delay over the run time at p50 and p95 (``delay_over_run_time``:
  0.5 = half as long again as its run);
* allocated GPU-hours = the GPU share each job held while bound (``ClusterSim.tally``);
* per team (only with a ``teams:`` section, key ``teams``): GPU-hours used = the integral of
  its running jobs' GPU-equivalents (``queueing.teams.shares``; a job counts from start to
  release, checkpoint writes included), entitled = its nominal quota × the makespan (None for a
  budget-only queue); ``entitled_delivered`` = ∫ min(used, nominal) / ∫ min(demand, nominal),
  demand = its queued + running GPU-equivalents — the share of its entitlement it got while it
  asked for it (1.0: every GPU of quota it wanted, when it wanted it; None if it never asked);
  mean queueing delay, JCT p50 and mean JCT slowdown (JCT / duration: 1 = as if it ran alone
  on a free fleet, never waiting or restarting) over its finished jobs; spend = its share of
  its nodes' prices (``queueing.teams.spend``: pro rata of the GPU-equivalents held, idle room
  included); with a budget, the highest spend of any period, the overspend above the budget
  and that overspend in hours of the spend rate at which the budget's action first applied in
  that period; ``jain_index`` over used / entitled of the teams with a nonzero quota,
  ``jain_index_delivered`` over ``entitled_delivered`` of the teams that asked (the fairness of
  what each got of its entitlement), ``worst_entitled_delivered`` the lowest of those;
  ``unattributed_usd`` = the fleet's cost minus every tenant's spend (nodes no team was on).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from gpufleet.catalog.commitments import on_demand_rate
from gpufleet.control.deadline_guard import fresh_node_fits
from gpufleet.queueing.teams.settings import jain_index
from gpufleet.sim.cloud import MICRO, flat_bill_micro
from gpufleet.sim.cluster import ClusterSim
from gpufleet.sim.team_books import TeamBooks


def _pct(values: Sequence[float] | np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else 0.0


def _mean(values: Sequence[float] | np.ndarray) -> float:
    return float(np.mean(values)) if len(values) else 0.0


LATE_THRESHOLD_S = 300.0
# the summary keys that measure the machine, not the simulation: they differ between runs of
# the same scenario, and every comparison of summaries leaves them out
TIMING = frozenset({"wall_seconds", "events_per_s", "cpu_seconds"})


def job_finishes(sim: ClusterSim) -> dict[str, float | None]:
    """Finish time per job id (None: never finished) — what ``late_share`` compares."""
    return sim.jobs.records.finishes()


def late_share(
    finishes: dict[str, float | None],
    baseline: dict[str, float | None],
    threshold_s: float = LATE_THRESHOLD_S,
) -> float:
    """Share of the baseline's finished jobs that finish > ``threshold_s`` later here."""
    base = {k: v for k, v in baseline.items() if v is not None}
    if not base:
        return 0.0
    late = 0
    for job_id, b in base.items():
        f = finishes.get(job_id)
        if f is None or f > b + threshold_s:
            late += 1
    return late / len(base)


def _spread(prefix: str, values: Sequence[float] | np.ndarray) -> dict[str, float]:
    """Mean and p50/p95/p99 of ``values`` (seconds) under ``prefix``; 0.0 for none."""
    return {f"{prefix}_mean_s": _mean(values),
            f"{prefix}_p50_s": _pct(values, 50), f"{prefix}_p95_s": _pct(values, 95),
            f"{prefix}_p99_s": _pct(values, 99)}


def delay_vs_static(
    finishes: dict[str, float | None],
    baseline: dict[str, float | None],
) -> dict[str, Any]:
    """Each job's finish here − its finish under ``baseline`` (matched by job id; negative:
    earlier here) as mean and p50/p95/p99 over the jobs finished under both, with how many
    were paired, how many finished under the baseline only (never here: no finite delay) and
    how many here only."""
    paired: list[float] = []
    here_missing = base_missing = 0
    for job_id, b in baseline.items():
        f = finishes.get(job_id)
        if b is None:
            base_missing += f is not None
        elif f is None:
            here_missing += 1
        else:
            paired.append(f - b)
    base_missing += sum(1 for k, f in finishes.items() if k not in baseline and f is not None)
    return {**_spread("delay_vs_static", paired), "delay_vs_static_jobs_paired": len(paired),
            "delay_vs_static_jobs_unfinished_here": here_missing,
            "delay_vs_static_jobs_unfinished_static": base_missing}


def delay_vs_run_time(jct: np.ndarray, run: np.ndarray) -> dict[str, float]:
    """From the JCT and run time of each finished job: JCT − run time as mean and
    p50/p95/p99, and that delay over the run time at p50 and p95."""
    delay = jct - run
    ratio = delay / run
    return {**_spread("delay_vs_run_time", delay),
            "delay_over_run_time_p50": _pct(ratio, 50),
            "delay_over_run_time_p95": _pct(ratio, 95)}


def allocated_gpu_hours(sim: ClusterSim) -> float:
    """GPU-hours the jobs held while bound (restart overhead and checkpoint writes included)."""
    return sim.tally.alloc_gpu_s / 3600.0


def fleet_cost_usd(sim: ClusterSim, end: float, pricing: str | None = None) -> float:
    """What the run's nodes cost up to ``end``: the closed bills plus the live nodes' time.

    ``pricing`` re-bills the run's on-demand nodes at another rate (``catalog.commitments``):
    each closed node's bill is recomputed as the cloud computes it (``flat_bill_micro``), so a
    run billed at ``reserved`` from the start and this re-billing give the same dollars. Only
    a fleet without spot may be re-billed (a spot bill follows the market, not a rate)."""
    if pricing is None:
        return sim.cloud.closed_micro / MICRO + sum(
            n.usd_per_hour * n.lifetime_s(end) / 3600.0 for n in sim.cloud.live.values()
        )
    closed = 0
    live = 0.0
    for n in sim.cloud.nodes.values():
        if n.spot:
            raise ValueError(f"node {n.name} is spot: a spot bill cannot be re-priced")
        rate = on_demand_rate(n.itype, pricing)
        if n.state == "gone":
            closed += flat_bill_micro(rate, n.lifetime_s(end))
        else:
            live += rate * n.lifetime_s(end) / 3600.0
    return closed / MICRO + live


def summarize(sim: ClusterSim, wall_s: float, pricing: str | None = None) -> dict[str, Any]:
    """The run's figures (``pricing``: billed at that rate instead: ``fleet_cost_usd``)."""
    end = sim.end_s if sim.end_s is not None else sim.now
    provisioned = sum(n.lifetime_s(end) * n.gpus for n in sim.cloud.nodes.values())
    spot_gpu_s = sum(n.lifetime_s(end) * n.gpus for n in sim.cloud.nodes.values() if n.spot)
    cost = fleet_cost_usd(sim, end, pricing)
    rec = sim.jobs.records.arrays()
    done = ~np.isnan(rec["finish_s"])
    submit = rec["submit_s"][done]
    jct = rec["finish_s"][done] - submit
    queue = rec["first_start_s"][done] - submit
    deadline = rec["deadline_s"]
    has_deadline = ~np.isnan(deadline)
    with np.errstate(invalid="ignore"):  # NaN finish: never finished, so missed
        missed = np.flatnonzero(has_deadline & ~(rec["finish_s"] <= deadline + 1e-6))
    delay = sim.sc.provisioning_delay_s
    infeasible = sum(
        1 for i in missed
        if not fresh_node_fits(float(rec["submit_s"][i]), float(deadline[i]),
                               float(rec["duration_s"][i]), delay)
    )
    t = sim.tally
    book = None if sim.life.gang_room is None else sim.life.gang_room.book
    chosen = book.counts if book is not None else {}  # gang room: how often each choice won
    useful_h = t.useful_gpu_s / 3600.0
    recoveries = t.recoveries
    if pricing is not None and sim.sc.teams is not None:
        raise ValueError("a run with teams cannot be re-billed: their spend is the nodes' price")
    teams = {} if sim.sc.teams is None else {"teams": team_figures(sim, end, cost)}
    return {
        **teams,
        "utilization": t.alloc_gpu_s / provisioned if provisioned else 0.0,
        "cost_usd": cost,
        "useful_gpu_hours": useful_h,
        "cost_per_useful_gpu_hour": cost / useful_h if useful_h else 0.0,
        "jct_mean_s": _mean(jct),
        "jct_p50_s": _pct(jct, 50),
        "jct_p95_s": _pct(jct, 95),
        "jct_p99_s": _pct(jct, 99),
        **delay_vs_run_time(jct, rec["duration_s"][done]),
        "queue_mean_s": _mean(queue),
        "queue_p50_s": _pct(queue, 50),
        "queue_p95_s": _pct(queue, 95),
        "queue_p99_s": _pct(queue, 99),
        "interruptions": t.interruptions,
        "spot_reclaims": t.reclaims,
        "node_failures": t.node_failures,
        "failure_interruptions": t.failure_interruptions,
        "lost_gpu_hours": t.lost_gpu_s / 3600.0,
        "recovery_p50_s": _pct(recoveries, 50),
        "recovery_p95_s": _pct(recoveries, 95),
        "deadline_misses": len(missed),
        "deadline_misses_infeasible": infeasible,
        "deadline_jobs": int(has_deadline.sum()),
        "jobs_total": len(sim.jobs),
        "jobs_finished": int(done.sum()),
        "jobs_lost": len(sim.jobs) - int(done.sum()),
        # jobs the simulator stopped queueing (``sim.progress``): job id → why
        "given_up": dict(sim.life.progress.given_up),
        "consolidation_moves": t.consolidations,
        "consolidation_replacements": t.replacements,
        "spot_swaps": t.spot_swaps,
        "deadline_switches": t.deadline_switches,
        "gang_room_wait": chosen.get("wait", 0),
        "gang_room_scale_up": chosen.get("scale-up", 0),
        "gang_room_preempt": chosen.get("preempt", 0),
        "gang_room_evictions": t.gang_room_evictions,
        "nodes_launched": sim.cloud.launches,
        "launches_failed": t.launches_failed,
        "spot_share_gpu_hours": spot_gpu_s / provisioned if provisioned else 0.0,
        "provisioned_gpu_hours": provisioned / 3600.0,
        "allocated_gpu_hours": allocated_gpu_hours(sim),
        "makespan_s": end,
        "events": sim.engine.steps,
        "wall_seconds": wall_s,
        "events_per_s": sim.engine.steps / wall_s if wall_s > 0 else 0.0,
    }


def team_figures(sim: ClusterSim, end: float, cost_usd: float = 0.0) -> dict[str, Any]:
    """Per-team use against entitlement and budget (module docstring); ``sim`` has ``teams:``."""
    assert sim.sc.teams is not None
    books = sim.life.team_books
    books.team_usage()  # the usage integral up to the last event
    ledger = books.ledger
    assert ledger is not None
    ledger.advance(max(end, ledger.last_s))
    per: dict[str, Any] = {}
    ratios: list[float] = []
    delivered: list[float] = []
    slow_all: list[np.ndarray] = []
    records = sim.jobs.records
    rec = records.arrays()
    finished = ~np.isnan(rec["finish_s"])
    for q in sim.sc.teams.queues:
        code = records.teams.index(q.name) if q.name in records.teams else -1
        ours = rec["team"] == code
        done = ours & finished
        submit = rec["submit_s"][done]
        jct = rec["finish_s"][done] - submit
        wait = rec["first_start_s"][done] - submit
        slow = jct / np.maximum(rec["duration_s"][done], 1e-9)
        used_h = books.team_gpu_s.get(q.name, 0.0) / 3600.0
        entitled_h = None if q.gpus is None else q.gpus * end / 3600.0
        if entitled_h:
            ratios.append(used_h / entitled_h)
        owed = books.team_owed_s.get(q.name, 0.0)
        if owed > 0:
            delivered.append(books.team_delivered_s.get(q.name, 0.0) / owed)
        slow_all.append(slow)
        row: dict[str, Any] = {
            "gpu_hours_used": used_h,
            "gpu_hours_entitled": entitled_h,
            "used_over_entitled": used_h / entitled_h if entitled_h else None,
            "entitled_delivered": books.team_delivered_s.get(q.name, 0.0) / owed if owed > 0
            else None,
            "queue_mean_s": _mean(wait),
            "jct_p50_s": _pct(jct, 50),
            "jct_mean_s": _mean(jct),
            "slowdown_mean": _mean(slow),
            "jobs_finished": int(done.sum()),
            "jobs_total": int(ours.sum()),
            "spend_usd": ledger.total.get(q.name, 0.0) / MICRO,
        }
        if q.budget is not None:
            row.update(budget_figures(books, q.name, q.budget.usd))
        per[q.name] = row
    # the fleet's bill that no team's work was on (booting, empty, CPU-only nodes)
    spent = sum(ledger.total.values()) / MICRO
    return {"per_team": per, "jain_index": jain_index(ratios),
            "jain_index_delivered": jain_index(delivered),
            "worst_entitled_delivered": min(delivered) if delivered else None,
            "slowdown_mean": _mean(np.concatenate(slow_all) if slow_all else []),
            "unattributed_usd": cost_usd - spent}


def budget_figures(books: TeamBooks, team: str, budget_usd: float) -> dict[str, Any]:
    """Spend against one team's budget: the highest period's spend, the overspend and the
    overspend in hours of the rate at which the budget's action first applied (module
    docstring); 0 hours when it never overspent."""
    assert books.ledger is not None
    worst_usd: float = 0.0
    worst_h: float | None = 0.0
    peak = 0.0
    for period_end, spent_micro in books.ledger.periods_spent(team):
        spent = spent_micro / MICRO
        peak = max(peak, spent)
        over = spent - budget_usd
        if over > worst_usd:
            worst_usd = over
            rate = books.budget_triggers.get((team, period_end), 0.0) * 3600 / MICRO
            worst_h = over / rate if rate > 0 else None  # spent over with no action: none
    b = books.budgets[team]
    return {"budget_usd": budget_usd, "budget_period": b.period, "budget_action": b.action,
            "budget_peak_spend_usd": peak, "overspend_usd": worst_usd,
            "overspend_hours": worst_h}
