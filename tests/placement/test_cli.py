"""``gpufleet bench packing`` option values: bounded seed ranges, outputs checked before work."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli import _register, app
from gpufleet.errors import InputError
from gpufleet.placement.cli import MAX_SEEDS, parse_seeds

_register()
runner = CliRunner()


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("0-99999999999", "seeds must be in 0..4294967295"),  # used to be a MemoryError
        (f"0-{MAX_SEEDS}", f"at most {MAX_SEEDS} seeds"),  # one too many
        ("1-600,700-1200", f"at most {MAX_SEEDS} seeds"),
        ("-5", "expected seeds like"),
        ("5-1", "expected seeds like"),
        ("1e8", "expected seeds like"),
        (",,", "no seeds given"),
    ],
)
def test_seed_ranges_are_bounded_before_expanding(text: str, why: str) -> None:
    with pytest.raises(InputError, match=why) as exc:
        parse_seeds(text)
    assert exc.value.field == "--seeds"


def test_largest_allowed_seed_list() -> None:
    assert parse_seeds(f"0-{MAX_SEEDS - 1}") == list(range(MAX_SEEDS))
    assert parse_seeds("4294967295") == [4294967295]


@pytest.mark.parametrize("option", ["--json", "--plot", "--html"])
def test_unwritable_output_fails_before_loading_data(tmp_path: Path, option: str) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    absent = tmp_path / "absent.csv"
    res = runner.invoke(
        app,
        ["bench", "packing", "--nodes", str(absent), "--pods", str(absent), "-p", "fgd",
         "--seeds", "1", option, str(blocker / "x")],
    )
    assert res.exit_code == 2, res.output
    assert f"field '{option}'" in res.output and "missing" not in res.output


def test_output_that_is_a_folder_is_refused(tmp_path: Path) -> None:
    res = runner.invoke(app, ["bench", "packing", "--seeds", "1", "--json", str(tmp_path)])
    assert res.exit_code == 2 and "it is a folder" in res.output
