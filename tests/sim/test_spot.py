from __future__ import annotations

from datetime import datetime
from decimal import Decimal

import numpy as np
import pytest

from gpufleet.catalog.instances import default_instance_catalog
from gpufleet.catalog.spot_prices import SpotPrice
from gpufleet.errors import InputError
from gpufleet.sim.spot import Availability, PricePath, load_availability_dir, spot_price_table


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


def test_spot_price_table_maps_az_ids_in_letter_order() -> None:
    ts = datetime(2022, 5, 31, 18, 0)
    rows = [
        SpotPrice("use1-az1", "p3.2xlarge", "Linux/UNIX", Decimal("3.06"), ts),
        SpotPrice("use1-az2", "p3.2xlarge", "Linux/UNIX", Decimal("0.918"), ts),
        SpotPrice("usw2-az1", "p3.2xlarge", "Linux/UNIX", Decimal("0.9"), ts),
    ]
    table = spot_price_table(rows, default_instance_catalog())
    assert table[("p3.2xlarge", "us-east-1a")] == 3.06
    assert table[("p3.2xlarge", "us-east-1b")] == 0.918
    assert table[("p3.2xlarge", "us-east-1c")] == pytest.approx((3.06 + 0.918) / 2)
    assert table[("p3.2xlarge", "us-west-2a")] == 0.9
    assert table[("p3.2xlarge", "us-east-2a")] == 0.918  # no us-east-2 rows: overall median
    assert ("p3.16xlarge", "us-east-1a") not in table


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
    from gpufleet.sim.spot import SpotMarket

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
