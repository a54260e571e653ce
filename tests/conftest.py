"""Shared fixtures: where the shared trace data lives (tests skip clearly when it is absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.datapaths import ENV_VAR, data_dir


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The ../shared/data folder (or $GPUFLEET_DATA); skips the test when it is not laid out."""
    found = data_dir(required=False)
    if found is None:
        pytest.skip(f"shared data folder absent: set {ENV_VAR} or lay out ../shared/data")
    return found
