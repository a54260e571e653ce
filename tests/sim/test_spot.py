from __future__ import annotations

import numpy as np
import pytest

from gpufleet.catalog.instances import default_instance_catalog
from gpufleet.errors import InputError
from gpufleet.market.spot_model import Availability, PricePath, load_availability_dir


def test_next_drop_and_history_wrap_around() -> None:
    tr = Availability(100.0, np.array([1, 1, 0, 0, 1, 0]))
    # drops (1→0 transitions, cyclic) at ticks 2 and 5
    assert tr.next_drop(0.0) == 200.0
    assert tr.next_drop(200.0) == 500.0
    assert tr.next_drop(550.0) == 800.0  # next cycle: tick 6 + 2
    assert not tr.available(250.0) and tr.available(450.0)
    assert tr.history(250.0, 3) == (1, 1, 0)
    assert tr.history(650.0, 3) == (1, 0, 1)  # ticks 4, 5, 6 (= 0 of the next cycle)
    assert Availability(60.0, np.array([1, 1])).next_drop(0.0) is None


def test_price_path_first_above_and_integral() -> None:
    p = PricePath(3600.0, np.array([1.0, 2.0, 5.0, 1.0]))
    assert p.first_above(0.0, 3.0) == 7200.0
    assert p.first_above(7300.0, 3.0) is None  # only ticks from 10800 on: price 1.0
    # 1800 s at 1.0 + 3600 s at 2.0 + 1800 s at 5.0 = 0.5 + 2 + 2.5
    assert p.integral_usd(1800.0, 9000.0) == pytest.approx(5.0)


def test_real_availability_traces_load(shared_data) -> None:
    traces = load_availability_dir(shared_data / "spot-traces" / "availability")
    assert ("v100", 1, "us-west-2a") in traces
    tr = traces[("v100", 1, "us-west-2a")]
    assert tr.gap_s == 195.0  # the 45-day trace wins over the 13-day one
    assert 0.8 < tr.data.mean() < 0.95


def test_missing_trace_folder_is_input_error(tmp_path) -> None:
    with pytest.raises(InputError):
        load_availability_dir(tmp_path / "nope")


def test_price_model_reclaims_after_protection_when_price_passes_bid() -> None:
    from gpufleet.market.spot_model import SpotMarket

    cat = default_instance_catalog()
    it = cat["ecs.gn6v-c8g1.2xlarge"]
    # hourly ticks: the price passes a bid of 2.0 at 30 min (inside the 1-hour protection)
    # and again at 3 h
    path = PricePath(1800.0, np.array([1.0, 2.5, 1.0, 1.0, 1.0, 1.0, 3.0, 1.0]))
    m = SpotMarket([it], {(it.name, "cn-hangzhou-h"): 1.0},
                   paths={(it.name, "cn-hangzhou-h"): path})
    assert m.mode == "price" and m.zones(it.name) == ["cn-hangzhou-h"]
    assert m.reclaim_time(it.name, "cn-hangzhou-h", 0.0, 2.0) == 10800.0
    assert m.reclaim_time(it.name, "cn-hangzhou-h", 0.0, 5.0) is None
    assert m.available(it.name, "cn-hangzhou-h", 1e9)
    # the strategy sees the last prices, never the next one
    (zm,) = m.markets(it.name, 1800.0)
    assert [float(p) for p in zm.price_history] == [1.0, 2.5]


def test_thinning_fit_hand_worked_and_never_above_the_one_gpu_trace() -> None:
    from gpufleet.market.spot_model import SizeThinning, fit_thinning

    one = Availability(60.0, np.array([1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1]), "one")
    many = Availability(60.0, np.array([1, 0, 0, 1, 1, 0, 1, 1, 1, 1, 0]), "many")
    # ticks t→t+1 with the 1-GPU trace up at both: t = 0..6 and 9; many up at t ∈ {0, 3, 4, 6,
    # 9}: drops after 0, 4, 9 → 3/5; down at t ∈ {1, 2, 5}: recovers after 2 and 5 → 2/3
    fit = fit_thinning(one, many)
    assert fit.p_drop == pytest.approx(3 / 5) and fit.p_recover == pytest.approx(2 / 3)
    rng = np.random.default_rng(0)
    long_one = Availability(60.0, (rng.random(5000) < 0.8).astype(np.int8), "long")
    rule = SizeThinning(0.126, 0.180)
    derived = rule.apply(long_one, np.random.default_rng(1))
    assert not np.any(derived.data > long_one.data)  # never available where 1-GPU is not
    # availability ≈ 1-GPU availability × stationary share of the chain (0.18 / 0.306)
    assert derived.data.mean() == pytest.approx(long_one.data.mean() * rule.stationary_up,
                                                abs=0.05)


def test_v100_8_gpu_relationship_measured_on_the_shared_traces(shared_data) -> None:
    from gpufleet.market.spot_model import fit_thinning_dir

    fits = fit_thinning_dir(shared_data / "spot-traces" / "availability")
    v100 = fits["v100"]
    # the documented figures (docs/simulator.md, market/spot_model.py): us-west-2a, aws-10-26-2022
    assert v100.p_drop == pytest.approx(0.1264, abs=1e-3)
    assert v100.p_recover == pytest.approx(0.1803, abs=1e-3)
    assert set(fits) >= {"v100", "k80", "*"}


def test_market_uses_own_size_trace_else_a_thinned_one(shared_data) -> None:
    from gpufleet.market.spot_model import SpotMarket, fit_thinning_dir

    base = shared_data / "spot-traces" / "availability"
    traces = load_availability_dir(base)
    cat = default_instance_catalog()
    types = [cat["p3.2xlarge"], cat["p3.16xlarge"]]
    prices = {(t.name, z): 1.0 for t in types for z in t.zones}
    m = SpotMarket(types, prices, availability=traces, thinning=fit_thinning_dir(base), seed=0)
    # us-west-2a has an 8-GPU trace: used as is
    assert m.avail[("p3.16xlarge", "us-west-2a")] is traces[("v100", 8, "us-west-2a")]
    # us-east-1a has only the 1-GPU trace: the 8-GPU node is thinned from it, never better
    one = m.avail[("p3.2xlarge", "us-east-1a")]
    eight = m.avail[("p3.16xlarge", "us-east-1a")]
    assert one is traces[("v100", 1, "us-east-1a")]
    assert eight is not one and not np.any(eight.data > one.data)
    assert eight.data.mean() < 0.8 * one.data.mean()
    assert eight.next_drop(0.0) is not None
    # the same seed gives the same market (every scenario of a run sees the same one)
    again = SpotMarket(types, prices, availability=traces, thinning=fit_thinning_dir(base))
    assert np.array_equal(again.avail[("p3.16xlarge", "us-east-1a")].data, eight.data)


def test_tick_key_steps_with_every_gap() -> None:
    """One index per distinct gap: 60 s and 90 s prices give (t // 60, t // 90); 70 s and
    100 s share the 60 s step but not the 90 s one, so they are different keys."""
    from gpufleet.market.spot_model import SpotMarket

    it = default_instance_catalog()["ecs.gn6v-c8g1.2xlarge"]
    a, b = (it.name, "cn-hangzhou-h"), (it.name, "cn-hangzhou-i")
    m = SpotMarket([it], {a: 1.0, b: 2.0}, paths={a: PricePath(60.0, np.ones(4)),
                                                  b: PricePath(90.0, np.ones(3))})
    assert m.tick_key(70.0) == (1, 0) and m.tick_key(100.0) == (1, 1)
    assert m.tick_key(119.0) == m.tick_key(100.0)


def test_a_market_answer_does_not_depend_on_when_in_its_tick_it_is_first_read() -> None:
    """Two zones' prices at 60 s and 90 s: the 90 s one changes at 90 s, inside what a 60 s
    tick would call [60, 120). Read first at 70 s or first at 100 s, each read at 100 s sees
    the 90 s change (a per-tick cache with 60 s ticks kept the 70 s answer)."""
    from gpufleet.market.spot_model import SpotMarket

    it = default_instance_catalog()["ecs.gn6v-c8g1.2xlarge"]
    a = (it.name, "cn-hangzhou-h")
    b = (it.name, "cn-hangzhou-i")
    paths = {a: PricePath(60.0, np.array([1.0, 1.0, 1.0, 1.0])),
             b: PricePath(90.0, np.array([2.0, 0.5, 0.5]))}

    def at_100(first: float | None) -> list[float]:
        m = SpotMarket([it], {a: 1.0, b: 2.0}, paths=paths)
        if first is not None:
            m.markets(it.name, first)
        return [float(z.price) for z in m.markets(it.name, 100.0)]

    assert at_100(70.0) == at_100(100.0) == at_100(None)
    assert sorted(at_100(70.0)) == [0.5, 1.0]
