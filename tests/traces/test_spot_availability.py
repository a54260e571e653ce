from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpufleet.errors import InputError
from gpufleet.traces.spot_availability import load_availability


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "zone.json"
    p.write_text(text)
    return p


def test_loads_real_trace(shared_data: Path) -> None:
    path = (shared_data / "spot-traces/availability/1-node/aws-02-15-2023/us-east-1a_v100_1.json")
    tr = load_availability(path)
    assert tr.gap_seconds == 195
    assert tr.name == "us-east-1a_v100_1"
    assert tr.data.dtype == np.int8 and len(tr) == 20158
    assert round(tr.availability, 2) == 0.17  # the protocol's table


def test_loads_small_trace(tmp_path: Path) -> None:
    tr = load_availability(write(tmp_path, '{"metadata": {"gap_seconds": 60}, "data": [1, 0, 1]}'))
    assert tr.gap_seconds == 60 and tr.data.tolist() == [1, 0, 1] and tr.name == "zone"


@pytest.mark.parametrize(
    ("text", "field", "line", "words"),
    [
        ('{"metadata": {"gap_seconds": 60},\n "data": [1, 0, 2]}', "data[2]", 2, "got 2"),
        ('{"metadata": {"gap_seconds": 60},\n "data": [1, "1"]}', "data[1]", 2, "got '1'"),
        ('{"metadata": {"gap_seconds": 60},\n "data": [true]}', "data[0]", 2, "got True"),
        ('{"metadata": {"gap_seconds": 60}}', "data", 1, "missing"),
        ('{"metadata": {"gap_seconds": 60}, "data": []}', "data", 1, "empty"),
        ('{"metadata": {},\n "data": [1]}', "metadata.gap_seconds", 1, "missing"),
        ('{"metadata": {"gap_seconds": -5}, "data": [1]}', "metadata.gap_seconds", 1, "-5"),
        ('{"metadata": {"gap_seconds": 1.5}, "data": [1]}', "metadata.gap_seconds", 1, "1.5"),
        ('{"data": [1]}', "metadata", 1, "missing"),
    ],
)
def test_malformed_fields_are_named(
    tmp_path: Path, text: str, field: str, line: int, words: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(InputError) as exc:
        load_availability(path)
    assert exc.value.field == field
    assert exc.value.line == line
    assert exc.value.path == str(path)
    assert words in str(exc.value)


def test_bad_json_names_line(tmp_path: Path) -> None:
    path = write(tmp_path, '{"metadata": {"gap_seconds": 60},\n "data": [1, 0,, 1]}')
    with pytest.raises(InputError, match="not valid JSON") as exc:
        load_availability(path)
    assert exc.value.line == 2


def test_not_an_object_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="JSON object"):
        load_availability(write(tmp_path, "[1, 0]"))
    with pytest.raises(InputError, match="no such file"):
        load_availability(tmp_path / "absent.json")


@pytest.mark.parametrize("gap", ["1e18", "1e400", "NaN", "Infinity", "0", "86401", "-5"])
def test_gap_seconds_bounded_and_finite(tmp_path: Path, gap: str) -> None:
    p = tmp_path / "t.json"
    p.write_text('{"metadata": {"gap_seconds": ' + gap + '},\n "data": [1, 0]}')
    with pytest.raises(InputError) as ei:
        load_availability(p)
    assert (ei.value.path, ei.value.line, ei.value.field) == (str(p), 1, "metadata.gap_seconds")
    assert "1..86,400" in str(ei.value)


@pytest.mark.parametrize(
    "text", ["[" * 100_000 + "]" * 100_000, '{"metadata": {"gap_seconds": 1' + "0" * 5000 + "}}"]
)
def test_deep_or_huge_json_is_an_input_error(tmp_path: Path, text: str) -> None:
    p = tmp_path / "t.json"
    p.write_text(text)
    with pytest.raises(InputError, match=r"not valid JSON|gap_seconds") as ei:
        load_availability(p)
    assert ei.value.path == str(p)


def test_non_utf8_trace(tmp_path: Path) -> None:
    p = tmp_path / "t.json"
    p.write_bytes(b'{"metadata": {"gap_seconds": 600}, "data": [1, 0]}\xff')
    with pytest.raises(InputError, match="not UTF-8"):
        load_availability(p)
