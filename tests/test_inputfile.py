"""Reading user files: a directory, bad bytes or an oversized file is one InputError."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.errors import InputError
from gpufleet.inputfile import read_text


def test_reads_utf8_and_drops_a_bom(tmp_path: Path) -> None:
    p = tmp_path / "f.csv"
    p.write_bytes(b"\xef\xbb\xbfa,b\n1,2\n")
    assert read_text(p) == "a,b\n1,2\n"


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="workload file not found") as ei:
        read_text(tmp_path / "nope.csv", "workload file")
    assert ei.value.path == str(tmp_path / "nope.csv")


def test_directory_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is a directory; expected the scenario file") as ei:
        read_text(tmp_path, "scenario file")
    assert ei.value.path == str(tmp_path)


def test_latin1_bytes_name_line_and_column(tmp_path: Path) -> None:
    p = tmp_path / "f.csv"
    p.write_bytes(b"a,b\n1,2\nx,caf\xe9\n")
    with pytest.raises(InputError) as ei:
        read_text(p)
    assert ei.value.line == 3
    assert "byte 0xe9 at column 6" in str(ei.value)


def test_oversized_file_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    p = tmp_path / "big.csv"
    p.write_bytes(b"x" * 2048)
    with pytest.raises(InputError, match="larger than"):
        read_text(p, max_bytes=1024)
    assert read_text(p, max_bytes=2048) == "x" * 2048
