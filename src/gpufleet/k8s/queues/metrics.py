"""Per-queue metrics for the dashboard's "Team queues" row, from the last cycle's views.

GPU amounts are GPU-equivalents (``queueing.teams.shares``), money is dollars. Spend is for the
queue's current budget period (month without a budget), so it is a gauge that drops to 0 when a
period starts, not a counter. Exported only by the leading replica, as the fleet metrics are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpufleet.k8s.queues.status import QueueView
from gpufleet.queueing.teams.budget import MICRO, BudgetState

LABELS = ["queue", "cohort"]
STATES = [s.value for s in BudgetState]


def queue_families(views: list[QueueView]) -> list[Metric]:
    def gauge(name: str, doc: str, extra: list[str] | None = None) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, doc, labels=LABELS + (extra or []))

    usage = gauge("gpufleet_queue_gpu_usage", "GPU-equivalents held by the queue's pods")
    nominal = gauge("gpufleet_queue_gpu_nominal", "The queue's nominal quota, GPU-equivalents")
    borrowed = gauge("gpufleet_queue_gpu_borrowed",
                     "GPU-equivalents the queue uses above its nominal quota (borrowed)")
    pending = gauge("gpufleet_queue_pending_pods", "The queue's pods waiting to be scheduled")
    spend = gauge("gpufleet_queue_period_spend_dollars",
                  "The queue's spend in its current budget period, dollars")
    rate = gauge("gpufleet_queue_spend_dollars_per_second",
                 "The queue's current spend rate, dollars per second")
    budget = gauge("gpufleet_queue_budget_dollars", "The queue's budget per period, dollars")
    left = gauge("gpufleet_queue_budget_remaining_dollars",
                 "What is left of the queue's budget this period, dollars")
    state = gauge("gpufleet_queue_budget_state",
                  "1 for the queue's budget state (ok, low: runs out within the look-ahead at "
                  "the current rate, exhausted)", ["state"])
    valid = gauge("gpufleet_queue_valid", "1 when the GpuQueue's spec is valid")
    for v in sorted(views, key=lambda v: v.name):
        lv = [v.name, v.cohort]
        valid.add_metric(lv, 0.0 if v.parsed.error else 1.0)
        if v.settings is None:
            continue
        usage.add_metric(lv, v.usage_milli / 1000)
        nominal.add_metric(lv, v.nominal_milli / 1000)
        borrowed.add_metric(lv, v.borrowed_milli / 1000)
        pending.add_metric(lv, float(v.pending))
        if v.spend is not None:
            spend.add_metric(lv, v.spend.spent_micro / MICRO)
            rate.add_metric(lv, v.spend.rate_micro_per_s / MICRO)
        if v.budget_micro is not None and v.spend is not None:
            budget.add_metric(lv, v.budget_micro / MICRO)
            left.add_metric(lv, max(0, v.budget_micro - v.spend.spent_micro) / MICRO)
            for s in STATES:
                cur = v.budget_state.value if v.budget_state else "ok"
                state.add_metric([*lv, s], 1.0 if s == cur else 0.0)
    return [usage, nominal, borrowed, pending, spend, rate, budget, left, state, valid]


class QueueCollector(Collector):
    def __init__(self, views: Callable[[], list[QueueView]],
                 active: Callable[[], bool]) -> None:
        self.views, self.active = views, active

    def collect(self) -> Iterator[Metric]:
        if self.active():
            yield from queue_families(self.views())
