"""The gpu-fraction admission policy and its share templates as code: hand-worked capacity
requests, and the shipped manifests equal to the code (the CEL itself runs in the live test
tests/lab/test_dra_checks_live.py, against the real API server and kube-scheduler's allocator)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpufleet.k8s.dra.shares import (
    SHARE_MILLIS,
    fraction_policy,
    fraction_text,
    manifest_files,
    memory_sizes,
    share_claim_template,
)

REPO = Path(__file__).resolve().parents[3]


def _requests(milli: int) -> dict[str, str]:
    (req,) = share_claim_template(milli)["spec"]["spec"]["devices"]["requests"]
    return {s["name"]: s["capacity"]["requests"]["memory"] for s in req["firstAvailable"]}


# (milli, subrequest, memory asked): milli × device memory / 1000, rounded up to whole MiB
CASES = [
    (250, "gpu-40gi", "10Gi"),  # 0.25 × 40960 MiB = 10240 MiB
    (500, "gpu-16gi", "8Gi"),
    (50, "gpu-12gi", "615Mi"),  # 0.05 × 12288 = 614.4 → 615
    (125, "gpu-141gi", "18048Mi"),  # 0.125 × 144384 = 18048
    (1000, "gpu-80gi", "80Gi"),
    (375, "gpu-24gi", "9Gi"),  # 0.375 × 24576 = 9216
]


@pytest.mark.parametrize(("milli", "sub", "memory"), CASES)
def test_share_is_milli_times_device_memory(milli: int, sub: str, memory: str) -> None:
    assert _requests(milli)[sub] == memory


def test_one_subrequest_per_memory_size_within_the_apis_eight() -> None:
    subs = _requests(250)
    assert len(subs) == len(memory_sizes()) <= 8
    assert all(re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", s) for s in subs)


def test_shipped_shares_every_twentieth_and_eighth() -> None:
    assert len(SHARE_MILLIS) == 24 and SHARE_MILLIS[0] == 50 and SHARE_MILLIS[-1] == 1000
    assert {125, 375, 625, 875, 250, 500, 750} <= set(SHARE_MILLIS)
    assert [fraction_text(m) for m in (50, 125, 500, 1000)] == ["0.05", "0.125", "0.5", "1"]
    variables = {v["name"]: v["expression"] for v in fraction_policy()["spec"]["variables"]}
    assert variables["shipped"] == "[" + ", ".join(map(str, SHARE_MILLIS)) + "]"


def test_shipped_manifests_are_the_codes_output() -> None:
    for path, text in manifest_files().items():
        assert (REPO / path).read_text() == text, (
            f"{path} differs from the code: run `python -m gpufleet.k8s.dra.shares` "
            "from the repository root")
