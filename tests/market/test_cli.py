"""``gpufleet bench spot-deadline`` option values: finite, bounded, outputs checked first."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from gpufleet.cli import _register, app

_register()
runner = CliRunner()


def tiny_trace(path: Path) -> Path:
    """100 one-hour ticks: enough for an 80 h window."""
    data = (np.random.default_rng(0).random(100) < 0.6).astype(int).tolist()
    path.write_text(json.dumps({"metadata": {"gap_seconds": 3600}, "data": data}))
    return path


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--task-hours", "inf"], "--task-hours"),  # used to hang
        (["--task-hours", "nan"], "--task-hours"),
        (["--task-hours", "1e400"], "--task-hours"),
        (["--deadline-hours", "nan"], "--deadline-hours"),
        (["--overhead-hours", "-1"], "--overhead-hours"),
        (["--overhead-hours", "inf"], "--overhead-hours"),
        (["--starts", "100000000"], "field 'starts'"),  # used to be a MemoryError
        (["--starts", "-4"], "field 'starts'"),
    ],
)
def test_bad_values_exit_2(tmp_path: Path, args: list[str], needle: str) -> None:
    res = runner.invoke(
        app, ["bench", "spot-deadline", "--trace", str(tiny_trace(tmp_path / "t.json")), *args]
    )
    assert res.exit_code == 2, res.output
    assert needle in res.output and "Traceback" not in res.output


def test_unwritable_json_fails_before_reading_traces(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    res = runner.invoke(
        app,
        ["bench", "spot-deadline", "--trace", str(tmp_path / "absent.json"),
         "--json", str(blocker / "r.json")],
    )
    assert res.exit_code == 2, res.output
    assert "field '--json'" in res.output and "absent.json" not in res.output


def test_json_into_a_new_folder_is_created(tmp_path: Path) -> None:
    out = tmp_path / "new" / "r.json"
    res = runner.invoke(
        app,
        ["bench", "spot-deadline", "--trace", str(tiny_trace(tmp_path / "t.json")),
         "--starts", "2", "--deadline-hours", "60", "--task-hours", "10", "--json", str(out)],
    )
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["results"][0]["policy"] == "ours"
