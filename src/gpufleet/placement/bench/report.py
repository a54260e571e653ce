"""Benchmark output: the rich table, the JSON document, and PNG/HTML allocation curves."""

from __future__ import annotations

import base64
import html
import io
import json
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from gpufleet.placement.bench.protocol import SeedResult
from gpufleet.placement.bench.published import PUBLISHED_UNALLOCATED
from gpufleet.tables import DataTable


def medians(
    results: Sequence[SeedResult], loads: Sequence[int]
) -> dict[str, dict[int, tuple[float, float]]]:
    """policy → load → (median unallocated %, median fragmentation ratio %)."""
    out: dict[str, dict[int, tuple[float, float]]] = {}
    for policy in dict.fromkeys(r.policy for r in results):
        runs = [r for r in results if r.policy == policy]
        out[policy] = {
            x: (
                float(np.median([r.unallocated_pct(x) for r in runs])),
                float(np.median([r.frag_ratio_pct.get(x, np.nan) for r in runs])),
            )
            for x in loads
        }
    return out


def table(results: Sequence[SeedResult], loads: Sequence[int]) -> DataTable:
    seeds = sorted({r.seed for r in results})
    t = DataTable(
        f"openb packing: median over {len(seeds)} seed(s) — unallocated GPU % "
        "(published) [fragmentation ratio %]",
        ["policy", *(f"{x}%" for x in loads), "s/seed"],
        numeric=[False, *(True for _ in loads), True],
    )
    for policy, by_load in medians(results, loads).items():
        pub = PUBLISHED_UNALLOCATED.get(policy, {})
        cells = []
        for x in loads:
            un, fr = by_load[x]
            ref = f" ({pub[x]:.2f})" if x in pub else ""
            cells.append(f"{un:.2f}{ref} [{fr:.1f}]")
        wall = float(np.mean([r.wall_seconds for r in results if r.policy == policy]))
        t.add_row(policy, *cells, f"{wall:.1f}",
                  values=[policy, *(by_load[x][0] for x in loads), round(wall, 3)])
    return t


def to_json(results: Sequence[SeedResult], loads: Sequence[int]) -> dict[str, object]:
    wall: dict[str, float] = {}
    for r in results:
        wall[r.policy] = wall.get(r.policy, 0.0) + r.wall_seconds
    return {
        "results": [
            {
                "policy": r.policy,
                "seed": r.seed,
                "load": x,
                "unallocated_pct": round(r.unallocated_pct(x), 4),
                "frag_ratio_pct": round(r.frag_ratio_pct.get(x, float("nan")), 4),
            }
            for r in results
            for x in loads
        ],
        "wall_seconds": {k: round(v, 3) for k, v in wall.items()},
        "published_unallocated_pct": {
            p: {str(x): v for x, v in d.items()} for p, d in PUBLISHED_UNALLOCATED.items()
        },
    }


def _finite(obj: object) -> object:
    """NaN (a load the run never reached) as JSON null: NaN is not valid JSON."""
    if isinstance(obj, float) and obj != obj:
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def write_json(path: Path, results: Sequence[SeedResult], loads: Sequence[int]) -> None:
    doc = _finite(to_json(results, loads))
    path.write_text(json.dumps(doc, indent=1, allow_nan=False), encoding="utf-8")


def plot_png(results: Sequence[SeedResult], published: dict[str, np.ndarray]) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5.5), dpi=110)
    for i, policy in enumerate(dict.fromkeys(r.policy for r in results)):
        curves = np.array([r.alloc_pct[:131] for r in results if r.policy == policy])
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            med = np.nanmedian(curves, axis=0)
        color = f"C{i % 10}"
        ax.plot(np.arange(len(med)), med, color=color, label=policy)
        if policy in published:
            ax.plot(
                np.arange(131),
                published[policy],
                color=color,
                ls="--",
                lw=1,
                label=f"{policy} (published)",
            )
    ax.plot([0, 100], [0, 100], color="grey", lw=0.6, ls=":")
    ax.set_xlim(60, 131)
    ax.set_ylim(60, 100)
    ax.set_xlabel("arrived GPU load, % of capacity")
    ax.set_ylabel("allocated GPU, % of capacity (median over seeds)")
    ax.set_title("openb packing: allocation vs arrived load")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2, loc="lower right")
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def write_html(path: Path, results: Sequence[SeedResult], loads: Sequence[int], png: bytes) -> None:
    rows = []
    for policy, by_load in medians(results, loads).items():
        pub = PUBLISHED_UNALLOCATED.get(policy, {})
        cells = "".join(
            f"<td>{by_load[x][0]:.2f}</td><td>{pub.get(x, float('nan')):.2f}</td>"
            f"<td>{by_load[x][1]:.1f}</td>"
            for x in loads
        )
        rows.append(f"<tr><th>{html.escape(policy)}</th>{cells}</tr>")
    head = "".join(f"<th>{x}% ours</th><th>{x}% published</th><th>{x}% frag</th>" for x in loads)
    img = base64.b64encode(png).decode()
    path.write_text(
        "<!doctype html><meta charset=utf-8><title>gpufleet packing benchmark</title>"
        "<style>body{font-family:sans-serif}td,th{padding:2px 8px;text-align:right}</style>"
        "<h1>openb packing benchmark</h1><p>Median unallocated GPU % over seeds "
        f"{sorted({r.seed for r in results})}.</p>"
        f"<table><tr><th>policy</th>{head}</tr>{''.join(rows)}</table>"
        f"<p><img alt='allocation curves' src='data:image/png;base64,{img}'></p>",
        encoding="utf-8",
    )
