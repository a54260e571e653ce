"""``gpufleet.collector``: the collector's settings for long-running work, and the opt-out."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from gpufleet.collector import ENV, THRESHOLDS, tune_collector


@pytest.fixture
def restored() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


@pytest.mark.usefixtures("restored")
def test_tuning_freezes_what_is_alive_and_raises_the_thresholds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    gc.unfreeze()
    assert tune_collector() is True
    assert gc.get_threshold() == THRESHOLDS == (50_000, 20, 100)
    assert gc.get_freeze_count() > 10_000  # the modules imported so far, at least


@pytest.mark.usefixtures("restored")
@pytest.mark.parametrize("value", ["default", " Default "])
def test_gpufleet_gc_default_keeps_cpython_s_settings(
        monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(ENV, value)
    gc.unfreeze()
    before = gc.get_threshold()
    assert tune_collector() is False
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
