from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.errors import InputError
from gpufleet.sim.scenario import LEVERS, builtin_scenarios, load_scenarios


def test_builtin_set_has_baseline_gpufleet_and_each_lever_alone() -> None:
    by = {s.name: s for s in builtin_scenarios()}
    assert not any(by["static"].levers.values())
    assert all(by["gpufleet"].levers.values())
    for lever in LEVERS:
        assert by[lever].levers == {k: k == lever for k in LEVERS}


def test_load_list_and_single(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("scenarios:\n  - name: a\n    spot: false\n  - name: b\n    packing: false\n")
    a, b = load_scenarios(f)
    assert (a.name, a.spot, b.packing) == ("a", False, False)
    g = tmp_path / "one.yaml"
    g.write_text("name: solo\nscale_down_unneeded_s: 300\n")
    (solo,) = load_scenarios(g)
    assert solo.scale_down_unneeded_s == 300


@pytest.mark.parametrize(
    ("text", "line", "field", "words"),
    [
        ("scenarios:\n  - name: a\n  - name: b\n    spott: true\n", 3, "spott", "Extra"),
        ("scenarios:\n  - name: a\n    scan_interval_s: -1\n", 2, "scan_interval_s", "greater"),
        ("name: x\nspot_market: moon\n", 1, "spot_market", "trace"),
        ("scenarios: []\n", None, "scenarios", "non-empty"),
    ],
)
def test_bad_fields_name_file_line_field(
    tmp_path: Path, text: str, line: int | None, field: str, words: str
) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(InputError) as exc:
        load_scenarios(f)
    e = exc.value
    assert e.path == str(f) and e.line == line and e.field == field
    assert words in str(e)


def test_duplicate_names_and_bad_yaml(tmp_path: Path) -> None:
    f = tmp_path / "dup.yaml"
    f.write_text("scenarios:\n  - name: a\n  - name: a\n")
    with pytest.raises(InputError, match="duplicate"):
        load_scenarios(f)
    g = tmp_path / "broken.yaml"
    g.write_text("scenarios: [\n")
    with pytest.raises(InputError, match="not valid YAML"):
        load_scenarios(g)
