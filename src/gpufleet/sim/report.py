"""summary.json, a self-contained report.html (PNG plots inlined as base64) and the rich table."""

from __future__ import annotations

import base64
import html
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.table import Table

from gpufleet.sim.cluster import Series

# (summary key, column title, format) — the side-by-side table in the terminal and the HTML
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("utilization", "GPU util", "{:.1%}"),
    ("cost_usd", "cost $", "{:,.0f}"),
    ("cost_vs_static", "cost vs static", "{:.1%}"),
    ("cost_per_useful_gpu_hour", "$/useful GPU-h", "{:.2f}"),
    ("jct_p50_s", "JCT p50 s", "{:,.0f}"),
    ("jct_p95_s", "JCT p95 s", "{:,.0f}"),
    ("queue_p95_s", "queue p95 s", "{:,.0f}"),
    ("interruptions", "interruptions", "{:,}"),
    ("node_failures", "node failures", "{:,}"),
    ("lost_gpu_hours", "lost GPU-h", "{:,.1f}"),
    ("recovery_p50_s", "recovery p50 s", "{:,.0f}"),
    ("recovery_p95_s", "recovery p95 s", "{:,.0f}"),
    ("deadline_misses", "deadline misses", "{:,}"),
    ("deadline_misses_infeasible", "of which infeasible", "{:,}"),
    ("jobs_finished", "finished", "{:,}"),
    ("jobs_lost", "lost", "{:,}"),
    ("spot_share_gpu_hours", "spot share", "{:.0%}"),
    ("wall_seconds", "wall s", "{:.1f}"),
)


def add_relative(summaries: dict[str, dict[str, Any]]) -> None:
    base = summaries.get("static", {}).get("cost_usd")
    for s in summaries.values():
        s["cost_vs_static"] = s["cost_usd"] / base if base else None


def summary_json(summaries: dict[str, dict[str, Any]], wall_s: float, meta: dict[str, Any]) -> str:
    return json.dumps(
        {"scenarios": summaries, "wall_seconds": wall_s, **meta}, indent=2, sort_keys=False
    )


def _fmt(fmt: str, v: Any) -> str:
    if v is None:
        return "—"
    try:
        return fmt.format(v)
    except (ValueError, TypeError):
        return str(v)


def rich_table(summaries: dict[str, dict[str, Any]], title: str) -> Table:
    t = Table(title=title, show_lines=False)
    t.add_column("metric")
    for name in summaries:
        t.add_column(name, justify="right")
    for key, label, fmt in COLUMNS:
        t.add_row(label, *(_fmt(fmt, s.get(key)) for s in summaries.values()))
    return t


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def plots(series: dict[str, Series]) -> list[tuple[str, str]]:
    """(title, base64 PNG) per plot; each plot has one line per scenario."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = []

    def days(s: Series) -> list[float]:
        return [t / 86400.0 for t in s.t]

    def util(s: Series) -> list[float]:
        return [a / max(1, o + p) for a, o, p in zip(s.alloc_gpus, s.od_gpus, s.spot_gpus,
                                                       strict=True)]

    specs = [
        ("GPU utilisation (allocated / provisioned)", util, "fraction"),
        ("Cumulative cost (USD)", lambda s: s.cost_usd, "USD"),
        ("Spot interruptions (cumulative)", lambda s: s.interruptions, "job interruptions"),
        ("Queue length (pending jobs)", lambda s: s.pending, "jobs"),
    ]
    for title, fn, ylabel in specs:
        fig, ax = plt.subplots(figsize=(9, 3.2))
        for name, s in series.items():
            ax.plot(days(s), fn(s), label=name, linewidth=1)
        ax.set_title(title)
        ax.set_xlabel("day")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=7, ncol=4)
        out.append((title, _png(fig)))
        plt.close(fig)
    fig, ax = plt.subplots(figsize=(9, 3.2))
    for name, s in series.items():
        if not any(s.spot_gpus) and name not in ("static", "gpufleet"):
            continue
        ax.plot(days(s), s.od_gpus, label=f"{name} on-demand", linewidth=1)
        if any(s.spot_gpus):
            ax.plot(days(s), s.spot_gpus, label=f"{name} spot", linewidth=1, linestyle="--")
    ax.set_title("Fleet size by capacity type (GPUs)")
    ax.set_xlabel("day")
    ax.set_ylabel("GPUs")
    ax.legend(fontsize=7, ncol=3)
    out.append(("Fleet size by capacity type", _png(fig)))
    plt.close(fig)
    return out


def report_html(
    summaries: dict[str, dict[str, Any]],
    series: dict[str, Series],
    meta: dict[str, Any],
    notes: Sequence[str] = (),
) -> str:
    head = "".join(f"<th>{html.escape(n)}</th>" for n in summaries)
    rows = "".join(
        f"<tr><td>{html.escape(label)}</td>"
        + "".join(f"<td>{html.escape(_fmt(fmt, s.get(key)))}</td>" for s in summaries.values())
        + "</tr>"
        for key, label, fmt in COLUMNS
    )
    imgs = "".join(
        f'<h3>{html.escape(t)}</h3><img alt="{html.escape(t)}" src="data:image/png;base64,{b}">'
        for t, b in plots(series)
    )
    meta_rows = "".join(
        f"<li><b>{html.escape(str(k))}</b>: {html.escape(str(v))}</li>" for k, v in meta.items()
    )
    note_rows = "".join(f"<li>{html.escape(n)}</li>" for n in notes)
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>gpufleet simulate</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1100px}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}
td:first-child{{text-align:left}}img{{max-width:100%}}</style></head><body>
<h1>gpufleet simulate</h1><ul>{meta_rows}</ul>
<h2>Scenarios side by side</h2><table><tr><th>metric</th>{head}</tr>{rows}</table>
<ul>{note_rows}</ul>
<h2>Over time</h2>{imgs}
</body></html>
"""


def write_outputs(
    out_dir: Path,
    summaries: dict[str, dict[str, Any]],
    series: dict[str, Series],
    wall_s: float,
    meta: dict[str, Any],
    notes: Sequence[str] = (),
) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    js = out_dir / "summary.json"
    js.write_text(summary_json(summaries, wall_s, meta), encoding="utf-8")
    rep = out_dir / "report.html"
    rep.write_text(report_html(summaries, series, meta, notes), encoding="utf-8")
    return js, rep
