"""Does the spot lever pay? gpufleet against its no-spot row and the seed's bidder, per workload
shape, spot market model and seed: a policy that pays must hold on other traces too.

For each cell (workload × market × seed) four scenarios run on the same jobs: ``static`` (the
baseline every ratio is against), ``gpufleet``, ``gpufleet-no-spot`` (the spot lever's
leave-one-out row) and ``gpufleet-bid-agent`` (the seed's ``SpotBidAgent``). Markets:

* ``trace``: the shared availability traces with the price snapshot (the default; spot is
  scarce in the p3 zones much of the time), falling back to the price process without data;
* ``price``: the price-process model (Aliyun SpotWithPriceLimit style: spot always offered, its
  price a log-OU walk), where spot is plentiful.

Workloads (``traces.synthetic.SyntheticWorkload``): the embedded default; ``bursty-long``
(1,500 jobs over 2 days, diurnal amplitude 0.9, median long run 2 h, 95 % checkpointable);
``short-heavy`` (3,000 jobs over 3 days, 60 % short runs, median long run 20 min, 50 %
checkpointable, 20 % fractional). Nothing here is tuned: the scenarios are the defaults.

Per cell the table gives each row's cost vs static, the spot lever's saving (no-spot − gpufleet,
as a share of no-spot: negative = spot made it dearer), which row is cheapest (ties within
0.5 % go to gpufleet, as the issue counts them), gpufleet's p50/p95 JCT against static, jobs
lost, spot share of GPU-hours, reclaims and lost GPU-hours. A last table sums each workload and
market over its seeds. ``--gpufleet NAME`` has another built-in scenario play the gpufleet
row (``gpufleet-plain``: without the capacity rules headroom and the on-demand → spot swap;
``gpufleet-no-swap``: headroom only; ``gpufleet-no-headroom``: the swap only).
Usage:

    .venv/bin/python benchmarks/bench_spot_lever.py [--seeds 0,1,2] [--markets trace,price]
        [--workloads default,bursty-long,short-heavy] [--workers 2] [--gpufleet NAME]
        [--format table|json|csv|markdown]
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from typing import Any

from rich.console import Console

from gpufleet.config import Scenario, scenarios_named
from gpufleet.sim.batch import run_all
from gpufleet.tables import DataTable, OutputFormat, print_tables
from gpufleet.traces.jobs import JobSpec
from gpufleet.traces.synthetic import SyntheticWorkload, generate

NAMES = ("static", "gpufleet", "gpufleet-no-spot", "gpufleet-bid-agent")
SHAPES: dict[str, SyntheticWorkload] = {
    "default": SyntheticWorkload(),
    "bursty-long": SyntheticWorkload(jobs=1500, days=2.0, diurnal_amplitude=0.9,
                                     long_median_s=7200.0, checkpointable_share=0.95),
    "short-heavy": SyntheticWorkload(jobs=3000, days=3.0, short_share=0.6,
                                     long_median_s=1200.0, checkpointable_share=0.5,
                                     fractional_share=0.2),
}
TIE = 0.005  # ties within 0.5 % count as cheapest


def check_grid(ap: argparse.ArgumentParser, markets: list[str], shapes: list[str]) -> None:
    """``--markets`` and ``--workloads`` name known markets and shapes (else argparse's error)."""
    for m in markets:
        if m not in ("trace", "price"):
            ap.error(f"--markets: unknown market {m!r}; expected trace or price")
    for w in shapes:
        if w not in SHAPES:
            ap.error(f"--workloads: unknown workload {w!r}; expected one of {', '.join(SHAPES)}")


def cell(jobs: list[JobSpec], market: str, seed: int, workers: int, gpufleet: str = "gpufleet"
         ) -> dict[str, dict[str, Any]]:
    """The four rows of one cell; ``gpufleet``: the scenario that plays the gpufleet row."""
    names = [gpufleet if n == "gpufleet" else n for n in NAMES]
    scs: list[Scenario] = [s.model_copy(update={"spot_market": market}) if s.spot else s
                           for s in scenarios_named(names)]
    got = {n: o.summary for n, o in run_all(jobs, scs, seed=seed, workers=workers).items()}
    return {n: got[m] for n, m in zip(NAMES, names, strict=True)}


def cheapest(rows: dict[str, dict[str, Any]]) -> str:
    best = min(r["cost_usd"] for r in rows.values())
    if rows["gpufleet"]["cost_usd"] <= best * (1 + TIE):
        return "gpufleet"
    return min(rows, key=lambda n: rows[n]["cost_usd"])


def saving(rows: dict[str, dict[str, Any]]) -> float:
    ns = rows["gpufleet-no-spot"]["cost_usd"]
    return (ns - rows["gpufleet"]["cost_usd"]) / ns if ns else 0.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--markets", default="trace,price")
    ap.add_argument("--workloads", default=",".join(SHAPES))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--format", type=OutputFormat, default=OutputFormat.table,
                    choices=list(OutputFormat))
    ap.add_argument("--gpufleet", default="gpufleet",
                    help="the built-in scenario that plays the gpufleet row")
    a = ap.parse_args(argv)
    seeds = [int(s) for s in a.seeds.split(",")]
    markets = a.markets.split(",")
    shapes = a.workloads.split(",")
    check_grid(ap, markets, shapes)
    console = Console()
    progress = Console(stderr=True)
    t = DataTable(f"The spot lever per cell (cost vs static; saving = no-spot − gpufleet; "
                  f"gpufleet = {a.gpufleet})",
                  ["workload", "market", "seed", "gpufleet", "no-spot", "bid-agent",
                   "spot saving", "cheapest", "JCT p50 × static", "JCT p95 × static",
                   "jobs lost", "spot share", "reclaims", "lost GPU-h"],
                  numeric=[False, False, *([True] * 5), False, *([True] * 6)])
    sums: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    wins: dict[tuple[str, str], int] = defaultdict(int)
    for w in shapes:
        for seed in seeds:
            jobs = generate(SHAPES[w], seed=seed)
            for m in markets:
                rows = cell(jobs, m, seed, a.workers, a.gpufleet)
                st, gf = rows["static"], rows["gpufleet"]
                for n, r in rows.items():
                    sums[(w, m)][n] += r["cost_usd"]
                won = cheapest(rows)
                wins[(w, m)] += won == "gpufleet"
                ratios = [rows[n]["cost_usd"] / st["cost_usd"] for n in NAMES[1:]]
                p50 = gf["jct_p50_s"] / st["jct_p50_s"]
                p95 = gf["jct_p95_s"] / st["jct_p95_s"]
                t.add_row(
                    w, m, str(seed), *(f"{x:.4f}" for x in ratios),
                    f"{saving(rows):+.1%}", won, f"{p50:.2f}", f"{p95:.2f}",
                    str(gf["jobs_lost"]), f"{gf['spot_share_gpu_hours']:.1%}",
                    str(gf["spot_reclaims"]), f"{gf['lost_gpu_hours']:.1f}",
                    values=[w, m, seed, *(round(x, 6) for x in ratios),
                            round(saving(rows), 6), won, round(p50, 4), round(p95, 4),
                            gf["jobs_lost"], round(gf["spot_share_gpu_hours"], 6),
                            gf["spot_reclaims"], round(gf["lost_gpu_hours"], 3)])
                progress.print(f"done: {w} seed {seed} market {m}", style="dim")
    s = DataTable(f"Summed over seeds {a.seeds}: cost $ and the spot lever",
                  ["workload", "market", "gpufleet $", "no-spot $", "bid-agent $", "spot saving",
                   "gpufleet cheapest"], numeric=[False, False, *([True] * 5)])
    for (w, m), c in sums.items():
        ns = c["gpufleet-no-spot"]
        s.add_row(w, m, f"{c['gpufleet']:,.0f}", f"{ns:,.0f}", f"{c['gpufleet-bid-agent']:,.0f}",
                  f"{(ns - c['gpufleet']) / ns:+.1%}" if ns else "-",
                  f"{wins[(w, m)]} of {len(seeds)}",
                  values=[w, m, round(c["gpufleet"], 2), round(ns, 2),
                          round(c["gpufleet-bid-agent"], 2),
                          round((ns - c["gpufleet"]) / ns, 6) if ns else None, wins[(w, m)]])
    print_tables([t, s], a.format, console)
    return 0


if __name__ == "__main__":
    sys.exit(main())
