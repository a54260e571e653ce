"""The finite-float parser every float option goes through: nan, inf and out-of-range refused."""

from __future__ import annotations

import pytest
import typer

from gpufleet.optiontypes import finite


@pytest.mark.parametrize("text", ["nan", "NaN", "inf", "-inf", "1e400", "abc", ""])
def test_non_finite_or_non_numbers_are_bad_parameters(text: str) -> None:
    with pytest.raises(typer.BadParameter):
        finite(0, 10)(text)


def test_bounds_and_open_low_end() -> None:
    parse = finite(0, 10, low_open=True)
    assert parse("10") == 10.0 and parse("1e-9") == 1e-9 and parse(2.5) == 2.5
    for bad in ("0", "-5", "10.0001"):
        with pytest.raises(typer.BadParameter, match="out of range"):
            parse(bad)
    assert finite(0)("0") == 0.0  # closed low end
