"""``gpufleet exporter`` option values are finite and bounded: refused by the parser, exit 2."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gpufleet.cli import _register, app
from gpufleet.errors import InputError
from gpufleet.metrics.exporter import check_pace

_register()


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--interval", "nan"], "--interval"),
        (["--interval", "inf"], "--interval"),
        (["--interval", "0"], "--interval"),
        (["--interval", "1e9"], "--interval"),
        (["--speed", "nan"], "--speed"),
        (["--speed", "inf"], "--speed"),
        (["--speed", "-1"], "--speed"),
        (["--port", "70000"], "--port"),
        (["--seed", "-3"], "--seed"),
    ],
)
def test_bad_values_exit_2_before_serving(args: list[str], option: str) -> None:
    res = CliRunner().invoke(app, ["exporter", "--source", "sim", *args])
    assert res.exit_code == 2, res.output
    assert option in res.output and "Traceback" not in res.output


@pytest.mark.parametrize(
    ("speed", "interval", "field"),
    [
        (float("nan"), 1.0, "speed"),
        (60.0, float("nan"), "interval"),
        (60.0, float("inf"), "interval"),
    ],
)
def test_library_pace_check_rejects_nan_too(speed: float, interval: float, field: str) -> None:
    with pytest.raises(InputError) as exc:
        check_pace(speed, interval)
    assert exc.value.field == field
