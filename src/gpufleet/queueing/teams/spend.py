"""What a team spends: its share of each node's price, idle room included, and the running sum.

**Attribution rule** (the one both drivers use; ``docs/teams.md`` repeats it). A node costs its
price paid — the spot price it was bought at, or the on-demand price — for as long as it is
billed. While at least one team holds GPU on it, the **whole** price is split among the teams
on it **pro rata of the milli-GPU-equivalents they hold** there (``queueing.teams.shares``:
a fraction by its milli, a MIG instance by its compute share). So the idle part of a node is
charged to the teams whose work keeps it up, in proportion to how much of it they use: a team
alone on an 8-GPU node with 2 GPUs busy pays for all 8, two teams with 2 and 6 GPUs pay 1/4 and
3/4. A node on which no team holds any GPU — booting, empty before scale-down, CPU-only work —
is charged to no team: that is the platform's overhead, visible as total cost minus the
teams' sum. Why pro rata of allocation and not of GPUs requested or of equal shares: it is what
a team can change (pack its work, free the node) and the split adds up to the node's price
exactly, so the teams' bills sum to the fleet's bill over the time nodes are in use.

Units: micro-dollars; rates in micro-dollars per second (floats: they are integrated, and the
budget comparison tolerates sub-micro error).

Pure: :func:`node_rates` is a function; :class:`SpendLedger` integrates piecewise-constant rates
under a clock the caller passes in, resetting each team's spend when its budget period renews.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpufleet.queueing.teams.budget import MICRO, Period, period_window


def node_rates(usd_per_hour: float, milli_by_team: Mapping[str, int]) -> dict[str, float]:
    """Each team's spend rate on one node, micro-dollars per second (module docstring).

    >>> node_rates(3.6, {"a": 2000, "b": 6000})
    {'a': 250.0, 'b': 750.0}
    """
    total = sum(m for m in milli_by_team.values() if m > 0)
    if total <= 0 or usd_per_hour <= 0:
        return {}
    per_s = usd_per_hour * MICRO / 3600.0
    return {t: per_s * m / total for t, m in milli_by_team.items() if m > 0}


class SpendLedger:
    """Per-team spend: the whole run's and the current budget period's, from the rates of the
    nodes each team is on. The driver calls :meth:`set_node` whenever a node's split changes
    (a job bound or released, a node gone) and :meth:`advance` before reading; the rates are
    constant in between, so the integral is exact.

    ``periods``: the budget period per budgeted team (others keep only the run's total)."""

    def __init__(self, periods: Mapping[str, Period], start_s: float = 0.0) -> None:
        self.periods = dict(periods)
        self.last_s = start_s
        self.rates: dict[str, float] = {}
        self.total: dict[str, float] = {}
        self.in_period: dict[str, float] = {t: 0.0 for t in self.periods}
        self._end = {t: period_window(start_s, p)[1] for t, p in self.periods.items()}
        self._nodes: dict[str, dict[str, float]] = {}
        # the spend of each budgeted team's finished periods: (period end, micro-dollars)
        self.closed: dict[str, list[tuple[float, float]]] = {t: [] for t in self.periods}

    def advance(self, now_s: float) -> None:
        """Add each team's rate × the time since the last call; a team whose period renewed
        in between keeps only what it spent since the renewal."""
        dt = now_s - self.last_s
        if dt < 0:
            raise ValueError(f"time went backwards: {now_s} < {self.last_s}")
        last = self.last_s
        self.last_s = now_s
        for team, rate in self.rates.items():
            if rate > 0 and dt > 0:
                self.total[team] = self.total.get(team, 0.0) + rate * dt
        for team, period in self.periods.items():
            rate = self.rates.get(team, 0.0)
            t = last
            while now_s >= self._end[team]:  # close each period the interval crosses
                end = self._end[team]
                self.closed[team].append((end, self.in_period[team] + rate * (end - t)))
                self.in_period[team] = 0.0
                t = end
                self._end[team] = period_window(end, period)[1]
            self.in_period[team] += rate * (now_s - t)

    def set_node(self, node: str, rates: Mapping[str, float]) -> None:
        """The node's split is now ``rates`` (``node_rates``; empty: nobody pays for it)."""
        old = self._nodes.pop(node, {})
        for team, r in old.items():
            self.rates[team] = self.rates.get(team, 0.0) - r
            if abs(self.rates[team]) < 1e-9:
                self.rates[team] = 0.0
        for team, r in rates.items():
            self.rates[team] = self.rates.get(team, 0.0) + r
        if rates:
            self._nodes[node] = dict(rates)

    def periods_spent(self, team: str) -> list[tuple[float, float]]:
        """(period end, spend) of each of ``team``'s periods so far, the current one last."""
        return [*self.closed[team], (self._end[team], self.in_period[team])]

    def spent_micro(self) -> dict[str, int]:
        """Spend in each budgeted team's current period (as of the last ``advance``)."""
        return {t: int(v) for t, v in self.in_period.items()}
