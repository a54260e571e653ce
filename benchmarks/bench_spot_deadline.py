"""Spot-deadline benchmark, main setting, every policy plus the optimum, timed.

Prints the per-trace table (mean $ over 300 starts) and the wall time of the whole run; the
protocol is ``shared/benchmarks/spot-deadline-protocol.md``. ``--all-settings`` adds the other
five settings (D 52/60/70 h × d 0.2/0.05 h).
"""

from __future__ import annotations

import sys
import time

from rich.console import Console
from rich.table import Table

from gpufleet.errors import MissingDataError
from gpufleet.market.deadline.bench.protocol import (
    ALL_SETTINGS,
    MAIN_SETTING,
    OPTIMAL,
    default_traces,
    load_traces,
    render,
    run_setting,
)
from gpufleet.tables import OutputFormat, print_tables

POLICIES = ["on_demand", "greedy", "up", OPTIMAL, "markov", "ours"]


def main() -> int:
    console = Console()
    try:
        traces = load_traces(default_traces())
    except MissingDataError as exc:
        console.print(f"skipped: {exc}")
        return 0
    availability = {t.name: t.availability for t in traces}
    settings = ALL_SETTINGS if "--all-settings" in sys.argv else (MAIN_SETTING,)
    timing = Table(title="spot-deadline wall time (6 traces × 300 starts)")
    timing.add_column("setting")
    for p in POLICIES:
        timing.add_column(p, justify="right")
    timing.add_column("total", justify="right")
    for setting in settings:
        took: dict[str, float] = {}
        results = []
        for policy in POLICIES:
            t0 = time.perf_counter()
            results.extend(run_setting(traces, setting, [policy], 300))
            took[policy] = time.perf_counter() - t0
        print_tables([render(results, setting, availability)], OutputFormat.table, console)
        timing.add_row(setting.label, *[f"{took[p]:.1f} s" for p in POLICIES],
                       f"{sum(took.values()):.1f} s")
    console.print(timing)
    return 0


if __name__ == "__main__":
    sys.exit(main())
