"""The simulated spot market: when a zone's spot capacity goes away, and what spot costs.

Two reclaim models, chosen per scenario:

* ``trace`` — availability traces (SkyPilot's spot-traces, NSDI'24 "Can't Be Late"): a zone is
  reclaimable while its trace says unavailable. When a tick flips 1 → 0 every spot node of that
  instance type in that zone gets its notice; launches into an unavailable zone fail
  (insufficient capacity). Traces shorter than the workload repeat cyclically. Spot prices are
  the snapshot in ``aws-spot-prices/`` (flat over the run, as AWS prices have been since 2017).
* ``price`` — Aliyun ``SpotWithPriceLimit``: a seeded mean-reverting (log Ornstein-Uhlenbeck)
  price per zone around the snapshot price; a node is reclaimed at the first tick after its
  1-hour protection period where the market price exceeds its bid. Billing integrates the price.

Multi-GPU nodes: a p3.16xlarge is harder to get on spot than a p3.2xlarge (eight GPUs in one
host). Where the data has a trace for the node's size (``<zone>_<gpu>_8.json``) it is used;
elsewhere the node's availability is the family's 1-GPU trace in that zone *thinned* by a
two-state Markov chain fitted to the data (``SizeThinning``): available only in ticks where the
1-GPU trace is available **and** the chain is up. Measured on the one collection that has both
sizes in one zone (aws-10-26-2022, us-west-2a, 3,895 ticks of 600 s): V100 1-GPU is available
79.3 % of ticks, 8-GPU 48.0 %; 8-GPU up-periods last 6.9 ticks on average against 24.3 (269
drops against 126). Over ticks where the 1-GPU trace stays up, the 8-GPU trace drops with
probability 0.126 per tick and recovers with 0.180; the thinned trace reproduces 46.2 %
availability and ~295 drops (mean of 50 seeds): no better than the measured 8-GPU trace, and
never better than the 1-GPU one. The fit is per GPU family where a pair exists (V100, K80),
pooled over the pairs otherwise; every size above one GPU uses it (4-GPU nodes have no trace of
their own, so they are treated like 8-GPU ones: conservative). The chain is seeded per (run
seed, zone, family, size), so every scenario of a run sees the same spot market.

Spot prices per catalog zone come from ``catalog.spot_prices.spot_price_table`` (AZ ids mapped
to zone names there).
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import numpy as np

from gpufleet.catalog.instances import InstanceType
from gpufleet.errors import InputError
from gpufleet.market.bidding import ZoneMarket
from gpufleet.traces.spot_availability import load_availability

PROTECTION_S = 3600.0  # Aliyun's spot protection period
TRACE_NAME = re.compile(r"^(?P<zone>[a-z]+-[a-z]+-\d[a-z])_(?P<gpu>[a-z0-9]+)_(?P<n>\d+)\.json$")
GPU_FAMILY = {"v100": ("V100-16GB",), "k80": ("K80",), "a100": ("A100-40GB",), "t4": ("T4",)}


@dataclass(frozen=True)
class Availability:
    """One zone's availability ticks (1 = spot can be had), repeating with period len·gap."""

    gap_s: float
    data: np.ndarray
    name: str = ""

    def __post_init__(self) -> None:
        if self.gap_s <= 0 or self.data.size == 0:
            raise InputError(f"availability trace {self.name!r}: needs gap > 0 and some ticks")
        d = (self.data > 0).astype(np.int8)
        object.__setattr__(self, "data", d)
        prev = np.roll(d, 1)
        drops = np.flatnonzero((prev > 0) & (d == 0))
        object.__setattr__(self, "_drops", drops.astype(np.int64))

    @property
    def period_s(self) -> float:
        return self.gap_s * self.data.size

    def tick(self, t: float) -> int:
        return int(t // self.gap_s)

    def available(self, t: float) -> bool:
        return bool(self.data[self.tick(t) % self.data.size])

    def next_drop(self, t: float) -> float | None:
        """First time > t at which the zone turns unavailable (None: never)."""
        drops: np.ndarray = self._drops  # type: ignore[attr-defined]
        if drops.size == 0:
            return None
        n = self.data.size
        k = self.tick(t) + 1  # ticks strictly after the current one
        cycle, pos = divmod(k, n)
        i = int(np.searchsorted(drops, pos))
        if i < drops.size:
            return float((cycle * n + int(drops[i])) * self.gap_s)
        return float(((cycle + 1) * n + int(drops[0])) * self.gap_s)

    def history(self, t: float, window: int) -> tuple[int, ...]:
        """The last ``window`` ticks up to and including now (never the future)."""
        k = self.tick(t)
        lo = max(0, k - window + 1)
        n = self.data.size
        if k - lo + 1 <= n and lo % n <= k % n:
            return tuple(self.data[lo % n : k % n + 1].tolist())
        return tuple(self.data[np.arange(lo, k + 1) % n].tolist())


@dataclass(frozen=True)
class SizeThinning:
    """How a multi-GPU node's spot availability falls short of a 1-GPU node's (module doc).

    A two-state Markov chain z: up → down with ``p_drop`` per tick, down → up with
    ``p_recover``; the multi-GPU node is available where the 1-GPU trace and z both are.
    """

    p_drop: float
    p_recover: float
    source: str = ""

    @property
    def stationary_up(self) -> float:
        total = self.p_drop + self.p_recover
        return self.p_recover / total if total > 0 else 1.0

    def apply(self, one: Availability, rng: np.random.Generator, name: str = "") -> Availability:
        """``one`` thinned by a fresh draw of the chain (never available where ``one`` is not)."""
        n = one.data.size
        u = rng.random(n)
        z = np.empty(n, dtype=np.int8)
        up = bool(u[0] < self.stationary_up)
        for i in range(n):
            if i:
                up = bool(u[i] >= self.p_drop) if up else bool(u[i] < self.p_recover)
            z[i] = up
        return Availability(one.gap_s, one.data & z, name or f"{one.name} thinned")


def fit_thinning(one: Availability, many: Availability, source: str = "") -> SizeThinning:
    """Fit ``SizeThinning`` to a 1-GPU and a multi-GPU trace of one zone and collection: the
    multi-GPU trace's drop and recovery rates over the ticks where the 1-GPU one stays up."""
    if one.gap_s != many.gap_s:
        raise InputError(f"cannot fit {many.name} to {one.name}: different tick lengths")
    n = min(one.data.size, many.data.size)
    x, y = one.data[:n] > 0, many.data[:n] > 0
    both = x[:-1] & x[1:]
    up, down = both & y[:-1], both & ~y[:-1]
    p_drop = float((up & ~y[1:]).sum() / up.sum()) if up.any() else 1.0
    p_recover = float((down & y[1:]).sum() / down.sum()) if down.any() else 0.0
    return SizeThinning(p_drop, p_recover, source or f"{one.name} vs {many.name}")


def fit_thinning_dir(path: Path) -> dict[str, SizeThinning]:
    """Per GPU family (and ``"*"`` pooled): the thinning fitted to every folder holding both a
    1-GPU and a larger trace of the same zone and family (one collection, same ticks)."""
    pairs: dict[str, list[tuple[Availability, Availability]]] = {}
    if not path.is_dir():
        return {}
    for folder in sorted({f.parent for f in path.rglob("*.json")}):
        found: dict[tuple[str, str], dict[int, Path]] = {}
        for f in sorted(folder.glob("*.json")):
            m = TRACE_NAME.match(f.name)
            if m:
                found.setdefault((m["zone"], m["gpu"]), {})[int(m["n"])] = f
        for (_, gpu), sizes in found.items():
            if 1 not in sizes or len(sizes) < 2:
                continue
            one = _trace(sizes[1])
            for n, f in sorted(sizes.items()):
                if n > 1:
                    pairs.setdefault(gpu, []).append((one, _trace(f)))
    out = {}
    for gpu, ps in pairs.items():
        fits = [fit_thinning(a, b) for a, b in ps]
        out[gpu] = SizeThinning(max(f.p_drop for f in fits), min(f.p_recover for f in fits),
                                "; ".join(f.source for f in fits))
    if out:
        out["*"] = SizeThinning(
            float(np.mean([t.p_drop for t in out.values()])),
            float(np.mean([t.p_recover for t in out.values()])),
            "pooled: " + "; ".join(t.source for t in out.values()),
        )
    return out


def _trace(f: Path) -> Availability:
    raw = load_availability(f)
    return Availability(float(raw.gap_seconds), np.asarray(raw.data), f"{f.parent.name}/{f.name}")


@dataclass(frozen=True, slots=True)
class PricePath:
    """A spot price sampled every ``gap_s`` (USD/hour), fixed for the run."""

    gap_s: float
    prices: np.ndarray

    def at(self, t: float) -> float:
        return float(self.prices[min(int(t // self.gap_s), self.prices.size - 1)])

    def history(self, t: float, window: int) -> np.ndarray:
        k = min(int(t // self.gap_s), self.prices.size - 1)
        return self.prices[max(0, k - window + 1) : k + 1]

    def first_above(self, t: float, bid: float) -> float | None:
        """First tick start ≥ t where the price exceeds ``bid``."""
        k = math.ceil(t / self.gap_s)
        if k >= self.prices.size:
            return None
        over = np.flatnonzero(self.prices[k:] > bid)
        return float((k + int(over[0])) * self.gap_s) if over.size else None

    def integral_usd(self, t0: float, t1: float) -> float:
        """USD paid for one node held from t0 to t1 (per-second billing at the tick's price)."""
        if t1 <= t0:
            return 0.0
        g = self.gap_s
        k0, k1 = int(t0 // g), int(t1 // g)
        n = self.prices.size
        if k0 == k1:
            return self.prices[min(k0, n - 1)] * (t1 - t0) / 3600.0
        idx = np.minimum(np.arange(k0, k1 + 1), n - 1)
        secs = np.full(idx.size, g)
        secs[0] = (k0 + 1) * g - t0
        secs[-1] = t1 - k1 * g
        return float((self.prices[idx] * secs).sum() / 3600.0)


def ou_path(
    base: float, horizon_s: float, gap_s: float, sigma: float, theta: float,
    rng: np.random.Generator,
) -> PricePath:
    """Log-OU around ``base``: x += theta·(0 − x) + sigma·N(0,1) per tick; price = base·e^x."""
    n = int(horizon_s // gap_s) + 2
    eps = rng.standard_normal(n)
    x = np.empty(n)
    x[0] = 0.0
    for i in range(1, n):
        x[i] = x[i - 1] * (1 - theta) + sigma * eps[i]
    return PricePath(gap_s, base * np.exp(x))


def load_availability_dir(path: Path) -> dict[tuple[str, int, str], Availability]:
    """``{(gpu_family, gpus, zone): trace}`` from ``<zone>_<gpu>_<n>.json`` files (longest wins)."""
    out: dict[tuple[str, int, str], Availability] = {}
    if not path.is_dir():
        raise InputError("expected a folder of spot availability traces", path=path)
    for f in sorted(path.rglob("*.json")):
        m = TRACE_NAME.match(f.name)
        if not m:
            continue
        key = (m["gpu"], int(m["n"]), m["zone"])
        tr = _trace(f)
        if key not in out or tr.period_s > out[key].period_s:
            out[key] = tr
    return out


class SpotMarket:
    """Per (instance type, zone): spot price and reclaim process. Answers the control layer's
    questions as ``gpufleet.market.view.SpotMarketView`` (``markets``, ``best_price``, ``signal``)
    and the simulated cloud's (``available``, ``price``, ``reclaim_time``, ``cost_usd``)."""

    def __init__(
        self,
        types: Iterable[InstanceType],
        prices: dict[tuple[str, str], float],
        *,
        availability: dict[tuple[str, int, str], Availability] | None = None,
        paths: dict[tuple[str, str], PricePath] | None = None,
        protection_s: float = PROTECTION_S,
        history_window: int = 96,
        thinning: dict[str, SizeThinning] | None = None,
        seed: int = 0,
    ) -> None:
        self.types = {t.name: t for t in types}
        self.prices = prices
        self.mode = "price" if paths is not None else "trace"
        self.paths = paths or {}
        self.protection_s = protection_s
        self.window = history_window
        self.avail: dict[tuple[str, str], Availability] = {}
        self._thinned: dict[tuple[str, int, str], Availability] = {}
        if availability is not None:
            for it in self.types.values():
                fams = [f for f, models in GPU_FAMILY.items() if it.gpu_model in models]
                for zone in it.zones:
                    for fam in fams:
                        tr = availability.get((fam, it.gpus, zone))
                        if tr is None:
                            tr = self._derived(availability, fam, it.gpus, zone,
                                               thinning or {}, seed)
                        if tr is not None and (it.name, zone) in prices:
                            self.avail[(it.name, zone)] = tr
        if self.mode == "trace":
            self.offered = sorted(self.avail)
        else:
            self.offered = sorted(k for k in self.paths if k in prices)
        self._cache: dict[tuple[str, tuple[int, ...]], list[ZoneMarket]] = {}
        gaps = [a.gap_s for a in self.avail.values()] + [p.gap_s for p in self.paths.values()]
        # every process changes on a boundary of its own gap: the index of each gap's current
        # step names everything a market answer reads (``tick_key``)
        self._gaps = tuple(sorted(set(gaps))) or (60.0,)
        self._zones: dict[str, list[str]] = {}
        for name, z in self.offered:
            self._zones.setdefault(name, []).append(z)

    def _derived(
        self, availability: dict[tuple[str, int, str], Availability], fam: str, gpus: int,
        zone: str, thinning: dict[str, SizeThinning], seed: int,
    ) -> Availability | None:
        """A size without its own trace: the family's 1-GPU trace in the zone, thinned for a
        multi-GPU node (module doc); derived once per (family, size, zone) and seed."""
        one = availability.get((fam, 1, zone))
        if one is None or gpus <= 1:
            return one
        rule = thinning.get(fam) or thinning.get("*")
        if rule is None:  # no pair of sizes in the data to fit: the 1-GPU trace (no better)
            return one
        key = (fam, gpus, zone)
        hit = self._thinned.get(key)
        if hit is None:
            rng = np.random.default_rng([seed, zlib.crc32(f"{fam}/{gpus}/{zone}".encode())])
            hit = rule.apply(one, rng, f"{one.name} thinned for {gpus} GPUs")
            self._thinned[key] = hit
        return hit

    def availability_gap(self, default_s: float) -> float:
        """The availability process's tick: the shortest trace gap (``default_s`` in price
        mode, or without traces)."""
        if self.mode == "trace" and self.avail:
            return float(min(a.gap_s for a in self.avail.values()))
        return default_s

    def zones(self, instance_type: str) -> list[str]:
        return self._zones.get(instance_type, [])

    def tick_key(self, t: float) -> tuple[int, ...]:
        """The current step of every distinct trace or price gap at ``t``: each process
        changes only where its step does, so answers at times with equal keys are equal,
        whenever in a step they are first read. (A cache per step of the shortest gap was
        not: with 195 s and 600 s traces, a 600 s trace changes inside a 195 s step, and the
        first read in that step decided what later reads saw.)"""
        return tuple(int(t // g) for g in self._gaps)

    def price(self, instance_type: str, zone: str, t: float) -> float:
        if self.mode == "price":
            return self.paths[(instance_type, zone)].at(t)
        return self.prices[(instance_type, zone)]

    def available(self, instance_type: str, zone: str, t: float) -> bool:
        if self.mode == "price":
            return True
        return self.avail[(instance_type, zone)].available(t)

    def markets(self, instance_type: str, t: float) -> list[ZoneMarket]:
        """Zones a launch could succeed in now, with their past (never the future)."""
        key = (instance_type, self.tick_key(t))
        hit = self._cache.get(key)
        if hit is None:
            hit = self._markets(instance_type, t)
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[key] = hit
        return hit

    def _markets(self, instance_type: str, t: float) -> list[ZoneMarket]:
        od = self.types[instance_type].usd_per_hour
        out = []
        for zone in self.zones(instance_type):
            if not self.available(instance_type, zone, t):
                continue  # the last launch there got "insufficient capacity"
            if self.mode == "price":
                hist = self.paths[(instance_type, zone)].history(t, 10)
                ph = tuple(Decimal(f"{p:.4f}") for p in hist)
                av: tuple[int, ...] = ()
            else:
                ph = (Decimal(f"{self.prices[(instance_type, zone)]:.4f}"),) * 10
                av = self.avail[(instance_type, zone)].history(t, self.window)
            out.append(ZoneMarket(zone, Decimal(od), ph, av))
        return out

    def best_price(self, instance_type: str, t: float) -> float | None:
        ps = [
            self.price(instance_type, z, t)
            for z in self.zones(instance_type)
            if self.available(instance_type, z, t)
        ]
        return min(ps) if ps else None

    def reclaim_time(
        self, instance_type: str, zone: str, launched_s: float, bid: float | None
    ) -> float | None:
        """When a node launched at ``launched_s`` gets its notice (None: never in the run)."""
        if self.mode == "price":
            if bid is None:
                return None
            return self.paths[(instance_type, zone)].first_above(
                launched_s + self.protection_s, bid
            )
        return self.avail[(instance_type, zone)].next_drop(launched_s)

    def cost_usd(self, instance_type: str, zone: str, t0: float, t1: float) -> float:
        if self.mode == "price":
            return self.paths[(instance_type, zone)].integral_usd(t0, t1)
        return self.prices[(instance_type, zone)] * (t1 - t0) / 3600.0

    def signal(self, instance_type: str, t: float, window: int) -> np.ndarray:
        """Fleet-level availability history for a type: 1 where any zone was available."""
        zones = self.zones(instance_type)
        if not zones or self.mode == "price":
            return np.ones(1 if not zones else window, dtype=np.int8)
        rows = [np.asarray(self.avail[(instance_type, z)].history(t, window)) for z in zones]
        width = min(len(r) for r in rows)
        return np.max(np.stack([r[-width:] for r in rows]), axis=0).astype(np.int8)

