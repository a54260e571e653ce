"""``gpufleet simulate`` option values: bounded, and ports/outputs checked before any work."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli import _register, app

_register()
runner = CliRunner()


def simulate(*args: str):  # type: ignore[no-untyped-def]
    return runner.invoke(app, ["simulate", *args])


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--seed", "-1"], "--seed"),
        (["--seed", str(2**32)], "--seed"),
        (["--speed", "0"], "--speed"),
        (["--speed", "-5"], "--speed"),
        (["--speed", "nan"], "--speed"),
        (["--speed", "inf"], "--speed"),
        (["--serve-metrics", "0"], "--serve-metrics"),
        (["--serve-metrics", "99999"], "--serve-metrics"),
        (["--serve-metrics", "-1"], "--serve-metrics"),
    ],
)
def test_out_of_range_values_exit_2_naming_the_option(
    tmp_path: Path, args: list[str], option: str
) -> None:
    res = simulate("--trace", str(tmp_path / "never-read.yaml"), *args)
    assert res.exit_code == 2, res.output
    assert option in res.output and "Traceback" not in res.output


def test_busy_port_fails_before_loading_anything(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        # the trace does not exist: an error about the port proves the bind came first
        res = simulate("--trace", str(tmp_path / "absent.yaml"), "--serve-metrics", str(port))
    assert res.exit_code == 2, res.output
    assert f"127.0.0.1:{port} is already in use" in res.output
    assert "--serve-metrics" in res.output and "absent.yaml" not in res.output


def test_unwritable_out_fails_before_loading_anything(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    res = simulate("--trace", str(tmp_path / "absent.yaml"), "--out", str(blocker / "o"))
    assert res.exit_code == 2, res.output
    assert "field '--out'" in res.output and "is a file, not a folder" in res.output
    assert "absent.yaml" not in res.output
