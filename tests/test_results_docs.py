"""README's results table and ``benchmarks/RESULTS.md`` are rendered from the recorded runs.

``benchmarks/results.py`` records each benchmark's run (its own JSON output plus the machine,
date and command) and renders both files from those records; these tests hold the committed files
to the records, and drive the recorder on a real subprocess.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from script_module import load_script

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "results.py"


@pytest.fixture(scope="module")
def results() -> ModuleType:
    return load_script(SCRIPT, "bench_results")


def test_readme_and_results_md_match_the_records() -> None:
    got = subprocess.run([sys.executable, str(SCRIPT), "check"], cwd=ROOT,
                         capture_output=True, text=True, check=False)
    assert got.returncode == 0, got.stderr


def test_every_entry_has_a_record_and_every_readme_row_a_command(results: ModuleType) -> None:
    records = results.load()
    assert not results.missing(records)
    table = results.readme_table(records)
    for entry in results.ENTRIES.values():
        if any(row[3] == entry.name for row in results.ROWS):
            assert f"`{entry.shown()}`" in table
    for rec in records.values():
        assert rec["command"] == results.ENTRIES[rec["name"]].shown()
        assert rec["machine"]["cpus"] >= 1 and rec["wall_s"] > 0 and rec["date"]


def test_check_fails_when_a_figure_is_edited_by_hand(results: ModuleType, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    readme = tmp_path / "README.md"
    text = results.README.read_text()
    body = text.split(results.BEGIN, 1)[1].split(results.END, 1)[0]
    edited = body.replace("×", "x", 1)
    assert edited != body
    readme.write_text(text.replace(body, edited))
    results_md = tmp_path / "RESULTS.md"
    results_md.write_text(results.RESULTS_MD.read_text())
    monkeypatch.setattr(results, "README", readme)
    monkeypatch.setattr(results, "RESULTS_MD", results_md)
    assert results.main(["check"]) == 1
    assert results.main(["render"]) == 0
    assert results.main(["check"]) == 0
    assert readme.read_text() == text


def test_run_records_the_command_machine_and_output(results: ModuleType, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [{"title": "t", "caption": "", "rows": [{"k": 1.5}]}]
    entry = results.Entry(
        "probe", "a probe", ("python", "-c", "import json,sys; json.dump("
                             f"{json.dumps(rows)}, sys.stdout)"),
        results._stdout_json, lambda o: {"k": o[0]["rows"][0]["k"]})
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    path = results.run(entry)
    rec = json.loads(path.read_text())
    assert rec["name"] == "probe" and rec["output"] == rows
    assert rec["command"].startswith("python -c ")
    assert len(rec["load_average_1m"]) == 2 and rec["machine"]["memory_gib"] > 0
    assert rec["commit"]


def test_a_failing_command_records_nothing(results: ModuleType, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    entry = results.Entry("probe", "a probe", ("python", "-c", "raise SystemExit(3)"),
                          results._stdout_json, lambda o: {})
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    with pytest.raises(SystemExit, match="exited 3; nothing recorded"):
        results.run(entry)
    assert not list(tmp_path.iterdir())
