"""Build the world for a scenario, run it, and expose it to other tools (``Simulation``).

The world is the instance catalog of the scenario's provider, the spot market (availability
traces and the price snapshot from the shared data when present; otherwise the price-process
model around ``spot_discount`` × on-demand, which the summary states as ``spot_model``), and the
workload (the embedded synthetic default, or a trace).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from gpufleet.catalog.instances import InstanceType, default_instance_catalog
from gpufleet.catalog.spot_prices import shared_price_snapshot
from gpufleet.config import Scenario, default_scenario
from gpufleet.control.admission import mig_models
from gpufleet.datapaths import data_dir
from gpufleet.errors import InputError
from gpufleet.market.spot_model import (
    Availability,
    SizeThinning,
    SpotMarket,
    fit_thinning_dir,
    load_availability_dir,
    ou_path,
)
from gpufleet.sim.cluster import ClusterSim
from gpufleet.sim.summary import summarize
from gpufleet.traces.jobs import JobSource

__all__ = ["Simulation", "build_market", "default_scenario", "scenario_types"]


def scenario_types(sc: Scenario, jobs: JobSource) -> list[InstanceType]:
    """The provider's instance types, narrowed to the GPU models the workload can use."""
    cat = default_instance_catalog()
    types = [t for t in cat if t.provider == sc.provider]
    if sc.instance_types is not None:
        known = {t.name for t in types}
        bad = [n for n in sc.instance_types if n not in known]
        if bad:
            raise InputError(
                f"unknown {sc.provider} instance types {bad}; known: {', '.join(sorted(known))}",
                field="instance_types",
            )
        types = [t for t in types if t.name in sc.instance_types]
    for j in jobs:
        if j.request.mig_profile is not None and not mig_models(j.request):
            raise InputError(
                f"job {j.job_id}: no catalogued GPU offers MIG profile {j.request.mig_profile!r}",
                field="mig_profile",
            )
    if any(j.request.gpu_models is None and j.request.num_gpu > 0
           and j.request.mig_profile is None for j in jobs):
        return types
    models = {m for j in jobs if j.request.gpu_models for m in j.request.gpu_models}
    models |= {m for j in jobs if j.request.mig_profile is not None
               for m in mig_models(j.request)}  # MIG: the models offering the profile
    if not models:
        return types  # CPU-only workload: any instance type hosts it
    narrowed = [t for t in types if t.gpu_model in models]
    if not narrowed:
        raise InputError(
            f"no {sc.provider} instance type offers the GPU models the workload asks for "
            f"({sorted(models)})",
            field="provider",
        )
    return narrowed


@cache
def _availability(path: str) -> dict[tuple[str, int, str], Availability]:
    return load_availability_dir(Path(path))


@cache
def _thinning(path: str) -> dict[str, SizeThinning]:
    return fit_thinning_dir(Path(path))


def build_market(
    sc: Scenario, types: list[InstanceType], horizon_s: float, seed: int
) -> tuple[SpotMarket | None, str]:
    """The spot market for ``sc`` and a one-line description of the model used."""
    if not sc.spot:
        return None, "none"
    prices = shared_price_snapshot()
    avail_dir: Path | None = Path(sc.availability_dir) if sc.availability_dir else None
    if avail_dir is None:
        base = data_dir(required=False)
        if base is not None and (base / "spot-traces" / "availability").is_dir():
            avail_dir = base / "spot-traces" / "availability"
    if sc.spot_market == "trace" and avail_dir is not None and prices:
        market = SpotMarket(types, prices, availability=_availability(str(avail_dir)),
                            thinning=_thinning(str(avail_dir)), seed=seed)
        if market.offered:
            return market, f"availability traces ({avail_dir.name}), price snapshot"
    # price-process model (Aliyun SpotWithPriceLimit), also the fallback without shared data
    rng = np.random.default_rng([seed, 7919])
    paths = {}
    full = dict(prices)
    for t in types:
        for z in t.zones:
            base_price = full.get((t.name, z), float(t.usd_per_hour) * sc.spot_discount)
            full[(t.name, z)] = base_price
            paths[(t.name, z)] = ou_path(
                base_price, horizon_s, sc.price_tick_s, sc.price_volatility, sc.price_reversion, rng
            )
    why = "price process" if sc.spot_market == "price" else "price process (no traces found)"
    return SpotMarket(types, full, paths=paths), why


def horizon(jobs: JobSource) -> float:
    if not jobs:
        return 0.0
    return max(j.submit_s + j.duration_s for j in jobs) * 3 + 30 * 86400.0


def check_names(sc: Scenario, source: str | Path | None = None) -> None:
    """Resolve every registry name a scenario uses now, not after other scenarios have run."""
    from gpufleet.market.bidding import get_spot_strategy
    from gpufleet.market.deadline import get_deadline_policy
    from gpufleet.placement import get_policy
    from gpufleet.recovery import get_recovery_strategy

    def deadline_policy() -> object:
        name = sc.deadline_policy
        return None if name is None or name == "default" else get_deadline_policy(name)

    checks = [
        ("spot_strategy", lambda: get_spot_strategy(sc.spot_strategy)),
        ("recovery", lambda: get_recovery_strategy(sc.recovery)),
        ("placement", lambda: sc.placement and get_policy(sc.placement)),
        ("deadline_policy", deadline_policy),
    ]
    for field, check in checks:
        try:
            check()
        except InputError as exc:
            raise InputError(f"scenario {sc.name!r}: {exc.detail}", path=source,
                             field=field) from None


class Simulation:
    """One scenario over one workload, advanced by the caller (``run_until``).

    ``Simulation(default_scenario(), seed=0)`` replays the embedded synthetic workload with every
    lever on; ``gpufleet.metrics.live.run_paced`` drives it in scaled real time.
    """

    def __init__(
        self, scenario: Scenario | None = None, seed: int = 0, jobs: JobSource | None = None
    ) -> None:
        from gpufleet.traces.synthetic import generate

        self.scenario = scenario or default_scenario()
        self.seed = seed
        self.jobs = jobs if jobs is not None else generate(seed=seed)
        types = scenario_types(self.scenario, self.jobs)
        self.market, self.spot_model = build_market(
            self.scenario, types, horizon(self.jobs), seed
        )
        self.sim = ClusterSim(self.scenario, self.jobs, types, self.market, seed)
        self._last_snapshot = -1.0
        self._wall = 0.0
        self.cpu_seconds = 0.0  # process CPU time inside run_until (wall misleads under load)

    @property
    def now(self) -> float:
        return self.sim.now

    @property
    def done(self) -> bool:
        return self.sim.finished

    def run_until(self, t_s: float) -> bool:
        """Advance to ``t_s``; False once all work is done."""
        t0, c0 = time.perf_counter(), time.process_time()
        more = self.sim.run_until(t_s)
        self._wall += time.perf_counter() - t0
        self.cpu_seconds += time.process_time() - c0
        return more

    def run(self, progress: Callable[[float, float], None] | None = None) -> dict[str, Any]:
        """Run to the end; ``progress(done_jobs, total_jobs)`` after each simulated day."""
        total = len(self.jobs)
        t = 0.0
        while self.run_until(t):
            t += 86400.0
            if progress is not None:
                progress(self.sim.life.done, total)
        if progress is not None:
            progress(self.sim.life.done, total)
        return self.summary()

    def summary(self, pricing: str | None = None) -> dict[str, Any]:
        """The run's figures; ``pricing``: its on-demand nodes billed at that rate instead
        (``sim.summary.fleet_cost_usd``)."""
        out = summarize(self.sim, self._wall, pricing)
        out["spot_model"] = self.spot_model
        return out

    def snapshot(self):  # -> FleetSnapshot (imported lazily: metrics is optional here)
        from gpufleet.sim.snapshot import fleet_snapshot

        return fleet_snapshot(self.sim)
