from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.config import LEVERS, builtin_scenarios, load_scenarios
from gpufleet.errors import InputError


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


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("scan_interval_s", ".inf"),
        ("scan_interval_s", "1e-6"),
        ("provisioning_delay_s", ".inf"),
        ("provisioning_delay_s", ".nan"),
        ("sample_interval_s", "1e-6"),
        ("fixed_nodes", "100000000"),
        ("max_nodes", "100000000"),
        ("gpu_mtbf_hours", "1e-7"),
        ("checkpoint_interval_s", "1e-6"),
        ("price_tick_s", "1e-6"),
        ("price_volatility", ".inf"),
        ("scale_down_unneeded_s", ".inf"),
        ("starvation_s", "1e300"),
        ("utilization_threshold", ".nan"),
    ],
)
def test_values_that_never_end_or_mean_nothing_are_refused(
    tmp_path: Path, field: str, value: str
) -> None:
    f = tmp_path / "s.yaml"
    f.write_text(f"scenarios:\n  - name: a\n  - name: b\n    {field}: {value}\n")
    with pytest.raises(InputError) as exc:
        load_scenarios(f)
    assert (exc.value.path, exc.value.line, exc.value.field) == (str(f), 3, field)


def test_bounds_are_inclusive(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("name: edge\nscan_interval_s: 1\nsample_interval_s: 60\nprice_tick_s: 60\n"
                 "checkpoint_interval_s: 60\ngpu_mtbf_hours: 10\nfixed_nodes: 10000\n")
    (sc,) = load_scenarios(f)
    assert (sc.scan_interval_s, sc.fixed_nodes, sc.gpu_mtbf_hours) == (1, 10_000, 10)


def test_unknown_instance_type_names_file_and_line(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("scenarios:\n  - name: a\n  - name: b\n    spot: false\n"
                 "    instance_types: [p3.2xlarge, p9.huge]\n")
    with pytest.raises(InputError, match=r"unknown aws instance type\(s\) \['p9.huge'\]") as exc:
        load_scenarios(f)
    assert (exc.value.path, exc.value.line, exc.value.field) == (str(f), 5, "instance_types")


def test_availability_dir_without_traces_is_an_error(tmp_path: Path) -> None:
    empty = tmp_path / "traces"
    empty.mkdir()
    (empty / "notes.json").write_text("{}")
    f = tmp_path / "s.yaml"
    f.write_text(f"name: a\navailability_dir: {empty}\n")
    with pytest.raises(InputError, match="holds no availability trace") as exc:
        load_scenarios(f)
    assert (exc.value.line, exc.value.field) == (2, "availability_dir")
    f.write_text(f"name: a\navailability_dir: {tmp_path / 'nowhere'}\n")
    with pytest.raises(InputError, match="is not a folder"):
        load_scenarios(f)
    (empty / "us-east-1a_v100_1.json").write_text('{"metadata": {"gap_seconds": 600}, "data": [1]}')
    f.write_text(f"name: a\navailability_dir: {empty}\n")
    assert load_scenarios(f)[0].availability_dir == str(empty)


def test_scenario_yaml_hostile_shapes(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("name: a\nspot: true\nspot: false\n")
    with pytest.raises(InputError, match="duplicate key 'spot'") as exc:
        load_scenarios(f)
    assert exc.value.line == 3
    f.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(InputError, match="not UTF-8"):
        load_scenarios(f)
    with pytest.raises(InputError, match="is a directory"):
        load_scenarios(tmp_path)


def test_teams_section_loads_and_bad_teams_name_the_field(tmp_path: Path) -> None:
    f = tmp_path / "t.yaml"
    f.write_text("name: t\nteams:\n  queues:\n    - {name: a, gpus: 2.5, cohort: lab}\n")
    (sc,) = load_scenarios(f)
    assert sc.teams is not None and sc.teams.quotas()[0].nominal_milli == 2500
    (plain,) = load_scenarios(_write(tmp_path / "p.yaml", "name: p\n"))
    assert plain.teams is None  # absent: no quotas, today's behaviour
    g = _write(tmp_path / "bad.yaml", "name: t\nteams:\n  queues:\n    - {name: a, gpu: 2}\n")
    with pytest.raises(InputError) as exc:
        load_scenarios(g)
    assert "teams.queues.0" in str(exc.value.field) and "\n" not in str(exc.value).strip()


def _write(p: Path, text: str) -> Path:
    p.write_text(text)
    return p
