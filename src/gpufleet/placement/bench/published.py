"""The FGD paper's published medians (openb_pod_list_default, 10 seeds) and per-seed curves.

Figures from ``shared/benchmarks/packing-protocol.md`` / hkust-adsl/kubernetes-scheduler-simulator
``experiments/analysis/expected_results``; the per-seed allocation curves are read from
``fgd-expected/openb_default_allocation_by_seed.csv`` when the data folder has them.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

PUBLISHED_UNALLOCATED: dict[str, dict[int, float]] = {
    "random": {100: 13.75, 110: 13.23, 120: 12.84, 130: 12.615},
    "dotprod": {100: 9.445, 110: 9.37, 120: 9.29, 130: 9.20},
    "gpuclustering": {100: 8.42, 110: 8.335, 120: 8.265, 130: 8.205},
    "gpupacking": {100: 8.195, 110: 8.12, 120: 8.05, 130: 7.94},
    "bestfit": {100: 7.09, 110: 7.015, 120: 6.955, 130: 6.89},
    "fgd": {100: 4.77, 110: 4.68, 120: 4.63, 130: 4.60},
}
_CSV_NAMES = {
    "01-Random": "random",
    "02-DotProd": "dotprod",
    "03-GpuClustering": "gpuclustering",
    "04-GpuPacking": "gpupacking",
    "05-BestFit": "bestfit",
    "06-FGD": "fgd",
}


def published_curves(path: Path) -> dict[str, np.ndarray]:
    """Median published allocation % per arrived load 0..130, per policy ({} if absent)."""
    if not path.exists():
        return {}
    per: dict[str, list[list[float]]] = {}
    with path.open(encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh):
            name = _CSV_NAMES.get(row.get("sc_policy", ""))
            if name is None:
                continue
            curve = [float(row[str(x)]) if row.get(str(x)) else np.nan for x in range(131)]
            per.setdefault(name, []).append(curve)
    return {k: np.nanmedian(np.array(v), axis=0) for k, v in per.items()}
