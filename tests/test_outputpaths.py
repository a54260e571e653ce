"""Output paths are checked before any work, leave nothing behind, and fail as one InputError."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.errors import InputError
from gpufleet.outputpaths import with_parent, writable_dir, writable_file


def test_missing_folder_is_fine_and_not_created(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b"
    assert writable_dir(target, "--out") == target
    assert not (tmp_path / "a").exists()  # the probe ran in tmp_path and cleaned up
    assert list(tmp_path.iterdir()) == []


def test_existing_folder_probe_leaves_nothing(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("x")
    writable_dir(tmp_path, "--out")
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


@pytest.mark.parametrize("below", ["", "sub", "sub/deeper"])
def test_folder_below_a_file_names_option_and_blocker(tmp_path: Path, below: str) -> None:
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    target = blocker / below if below else blocker
    with pytest.raises(InputError) as exc:
        writable_dir(target, "--out")
    assert exc.value.field == "--out" and exc.value.path == str(target)
    assert "is a file, not a folder" in str(exc.value)


def test_file_in_missing_folder_is_fine_and_with_parent_creates_it(tmp_path: Path) -> None:
    target = tmp_path / "new" / "r.json"
    writable_file(target, "--json")
    assert not target.parent.exists()
    with_parent(target).write_text("{}")
    assert target.read_text() == "{}"


def test_file_that_is_a_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="it is a folder") as exc:
        writable_file(tmp_path, "--html")
    assert exc.value.field == "--html"


def test_existing_file_is_not_truncated(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    target.write_text("old")
    writable_file(target, "--json")
    assert target.read_text() == "old"


def test_nul_byte_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError):
        writable_file(tmp_path / "a\0b" / "x.png", "--plot")
