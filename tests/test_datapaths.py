from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.datapaths import ENV_VAR, data_dir, data_file
from gpufleet.errors import MissingDataError


def test_env_var_wins_and_does_not_fall_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    assert data_dir() == tmp_path
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "typo"))
    assert data_dir(required=False) is None
    with pytest.raises(MissingDataError, match="typo"):
        data_dir()


def test_missing_file_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    with pytest.raises(MissingDataError, match=r"philly_jobs\.csv"):
        data_file("philly", "philly_jobs.csv")
