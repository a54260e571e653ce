"""Lease timings sized to the fleet, and the KWOK configuration the lab hands KWOK."""

from __future__ import annotations

from pathlib import Path

import yaml

from gpufleet.lab.cluster import _stages_file
from gpufleet.lab.node_liveness import (
    KUBELET_LEASE_S,
    MAX_RENEWALS_PER_S,
    liveness_for,
    renewals_per_s,
)


def test_small_fleets_keep_kubelets_timings() -> None:
    for n in (0, 1, 4, 100):
        lv = liveness_for(n)
        assert (lv.lease_s, lv.grace_s, lv.startup_grace_s) == (KUBELET_LEASE_S, 50, 60)


def test_large_fleets_bound_the_renewal_rate_and_keep_the_grace_ratio() -> None:
    for n in (1213, 5000):
        lv = liveness_for(n)
        assert lv.lease_s > KUBELET_LEASE_S
        assert renewals_per_s(n, lv) <= MAX_RENEWALS_PER_S
        # a node is declared Unknown only after more than one missed renewal window
        assert lv.startup_grace_s >= lv.grace_s >= lv.lease_s > lv.lease_s / 4
    assert renewals_per_s(1213, liveness_for(40)) > MAX_RENEWALS_PER_S  # kubelet's 40 s: 121/s


def test_kwok_config_file_holds_the_stages_and_the_parallelism(tmp_path: Path) -> None:
    docs = list(yaml.safe_load_all(_stages_file(tmp_path).read_text()))
    kinds = [d["kind"] for d in docs]
    assert kinds.count("Stage") == 7 and kinds.count("KwokConfiguration") == 1
    opts = next(d for d in docs if d["kind"] == "KwokConfiguration")["options"]
    assert min(opts[k] for k in ("nodeLeaseParallelism", "nodePlayStageParallelism",
                                 "podPlayStageParallelism")) > 4  # KWOK's default
