"""Python's cyclic garbage collector, tuned for gpufleet's long-running, allocation-heavy work.

The controller and the simulator keep large heaps (the informers' objects, a queue of pending
units, a run's jobs and nodes) and allocate many short-lived objects per scheduling pass. With
CPython's defaults a young collection runs every 700 net allocations and the older generations
are walked again and again, so a pass over 100,000 pending units spends about a third of its
CPU in the collector (``benchmarks/bench_backlog.py``). gpufleet creates few reference cycles,
so it collects less often instead: what is alive once start-up is done (modules, catalogs,
caches) is frozen out of later collections (``gc.freeze``), and the young generation is
collected every 50,000 net allocations. Memory held by cyclic garbage lives a little longer;
nothing else changes (no result depends on when the collector runs).

``GPUFLEET_GC=default`` in the environment keeps CPython's settings.
"""

from __future__ import annotations

import gc
import os

THRESHOLDS = (50_000, 20, 100)  # young every 50,000 net allocations; then 20 and 100 of those
ENV = "GPUFLEET_GC"


def tune_collector() -> bool:
    """Collect once, freeze the survivors and raise the thresholds (module docstring); False
    (nothing changed) when ``GPUFLEET_GC=default``."""
    if os.environ.get(ENV, "").strip().lower() == "default":
        return False
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
    return True
