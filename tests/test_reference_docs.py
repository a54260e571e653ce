"""``docs/reference/`` is what the code renders, and what it renders covers the code.

The first test regenerates every page in memory and fails on any committed page that differs
(naming the command that regenerates them). The others check the renderers against the objects
they read, so a page cannot silently lose a command, a key, an annotation or a metric: each
walks the source of truth independently and looks for every item in the rendered text.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator
from typer.testing import CliRunner, Result

import gpufleet.cli
from gpufleet.config import Scenario, default_scenario
from gpufleet.k8s.translate import names
from gpufleet.k8s.translate.api_keys import READ, WRITTEN
from gpufleet.k8s.translate.pod_fields import FIELDS
from gpufleet.reference import __main__ as reference_main
from gpufleet.reference import config_doc, metrics_doc
from gpufleet.reference.pages import PAGES, REGENERATE, render_all, stale
from gpufleet.reference.schema import config_schema

ROOT = Path(__file__).resolve().parent.parent
FOLDER = ROOT / "docs" / "reference"


def test_committed_pages_are_what_the_code_renders() -> None:
    bad = stale(FOLDER)
    assert not bad, (f"docs/reference is out of date ({', '.join(bad)}); regenerate with "
                     f"`{REGENERATE}` from the repository root and commit the result")


def test_rendering_is_deterministic_and_machine_free() -> None:
    """Two renders agree byte for byte, and no page names this machine."""
    first, second = render_all(), render_all()
    assert first == second
    assert set(first) == set(PAGES)
    for name, text in first.items():
        for local in (str(ROOT), str(Path.home()), sys.prefix):
            assert local not in text, f"{name} names {local}"
        assert not re.search(r"\b20\d\d-\d\d-\d\dT\d\d:\d\d", text.replace(
            "2026-12-04T01:00:00Z", "")), f"{name} holds a timestamp"


def test_check_command_fails_on_a_stale_page_and_names_the_fix(tmp_path: Path) -> None:
    """``python -m gpufleet.reference`` writes the pages; ``--check`` passes on them, and fails
    with the regenerating command once one is edited."""
    def run(*args: str) -> Result:
        return CliRunner().invoke(reference_main.app, [*args, "--out", str(tmp_path)])

    assert run().exit_code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(PAGES)
    assert run("--check").exit_code == 0
    (tmp_path / "metrics.md").write_text("edited by hand\n")
    (tmp_path / "old.md").write_text("a page no renderer writes\n")
    done = run("--check")
    assert done.exit_code == 1
    assert "metrics.md, old.md" in done.stderr
    assert "python -m gpufleet.reference" in done.stderr
    assert (tmp_path / "metrics.md").read_text() == "edited by hand\n"  # --check writes nothing


def test_cli_page_lists_every_command_and_option() -> None:
    import typer

    gpufleet.cli._register()
    text = render_all()["cli.md"]
    root = typer.main.get_command(gpufleet.cli.app)

    def walk(cmd: object, path: tuple[str, ...]) -> None:
        subs = getattr(cmd, "commands", None)
        if isinstance(subs, dict):
            for name, sub in subs.items():
                walk(sub, (*path, name))
            return
        section = text.split(f'<a id="{"-".join(path)}"></a>', 1)[1].split("<a id=", 1)[0]
        for p in cmd.params:  # type: ignore[attr-defined]
            for opt in getattr(p, "opts", ()):
                if opt.startswith("-") and not p.hidden:
                    assert f"`{opt}`" in section, f"{' '.join(path)}: {opt} missing"

    walk(root, ("gpufleet",))
    assert "`gpufleet config schema`" in text


def test_config_page_lists_every_key_of_every_model() -> None:
    text = render_all()["config.md"]
    found = config_doc.sections()
    assert Scenario in [m for m, _ in found]
    for model, _ in found:
        for name, field in model.model_fields.items():
            assert f"| `{name}` |" in text, f"{model.__name__}.{name} missing"
            if model is Scenario:
                assert field.description, f"Scenario.{name} has no description"


@pytest.mark.parametrize("kind", ["scenario", "controller"])
def test_schema_accepts_the_examples_and_rejects_what_the_loader_rejects(kind: str) -> None:
    """The schema agrees with the pydantic model on the files that matter: the embedded
    scenario, a list of scenarios (scenario kind only), the controller's cloud settings; and it
    rejects an unknown key and an out-of-range value, as loading does."""
    v = Draft202012Validator(config_schema(kind))  # type: ignore[arg-type]
    Draft202012Validator.check_schema(v.schema)
    one = json.loads(default_scenario().model_dump_json(exclude_none=True))
    assert not list(v.iter_errors(one))
    teams = {"name": "t", "teams": {"queues": [{"name": "a", "gpus": 8,
                                                "models": {"H100-80GB": 4}}]}}
    assert not list(v.iter_errors(teams))
    assert Scenario.model_validate(teams).teams is not None
    many = {"scenarios": [{"name": "a"}, {"name": "b", "spot": False}]}
    assert (not list(v.iter_errors(many))) is (kind == "scenario")
    assert list(v.iter_errors({"name": "x", "spott": True}))
    assert list(v.iter_errors({"name": "x", "max_nodes": 0}))
    settings: dict[str, Any] = {"region": "us-east-1", "zones": {"us-east-1a": "subnet-0abc1234"},
                                "launch_template": {"name": "gpu"},
                                "instance_types": ["p3.8xlarge"]}
    aws = {"name": "x", "cloud": {"name": "aws", "aws": settings}}
    assert not list(v.iter_errors(aws))
    typo = {"name": "x", "cloud": {"name": "aws", "aws": {**settings, "regoin": "x"}}}
    assert bool(list(v.iter_errors(typo))) is (kind == "controller")


def test_config_schema_command_prints_the_committed_schema(tmp_path: Path) -> None:
    """``gpufleet config schema`` prints (or writes with ``--out``) the committed schema; a bad
    kind or an unwritable path is exit 2 naming the option, as every command's bad input."""
    gpufleet.cli._register()
    app = gpufleet.cli.app
    for kind in ("scenario", "controller"):
        done = CliRunner().invoke(app, ["config", "schema", "--kind", kind])
        assert done.exit_code == 0, done.output
        assert done.stdout == (FOLDER / f"{kind}.schema.json").read_text()
    out = tmp_path / "sub" / "s.json"
    assert CliRunner().invoke(app, ["config", "schema", "--out", str(out)]).exit_code == 0
    assert out.read_text() == (FOLDER / "scenario.schema.json").read_text()
    bad = CliRunner().invoke(app, ["config", "schema", "--kind", "x"])
    assert bad.exit_code == 2 and "--kind" in bad.stderr
    (tmp_path / "a-file").write_text("")
    under_file = CliRunner().invoke(app, ["config", "schema", "--out",
                                          str(tmp_path / "a-file" / "s.json")])
    assert under_file.exit_code == 2 and "--out" in under_file.stderr


def test_annotations_page_lists_every_key_read_and_written() -> None:
    text = render_all()["annotations.md"]
    for f in FIELDS:
        for _, key in f.keys:
            assert f"`{key}`" in text
    for r in READ:
        for key in r.keys:
            assert f"`{key}`" in text
    for w in WRITTEN:
        assert f"`{w.key}`" in text
    # every gpufleet.io/ name the driver defines is in one of the tables
    ours = {v for k, v in vars(names).items()
            if k.isupper() and isinstance(v, str) and v.startswith("gpufleet.io/")}
    listed = {w.key.split(":")[0] for w in WRITTEN} | {k for r in READ for k in r.keys} | {
        key for f in FIELDS for _, key in f.keys}
    assert ours <= listed, f"not in a table: {sorted(ours - listed)}"


def test_metrics_page_lists_every_family_each_part_serves() -> None:
    text = render_all()["metrics.md"]
    for part in metrics_doc.PARTS:
        registry, _ = part.build()
        fams = list(registry.collect())
        assert fams, part.when
        for fam in fams:
            assert f"`{fam.name}" in text, f"{fam.name} missing"
    assert "`gpufleet_launches_total` | counter | `capacity_type`, `instance_type` |" in text
    assert "`gpufleet_queue_budget_state` | gauge | `cohort`, `queue`, `state` |" in text


def test_the_yaml_modeline_in_the_docs_names_a_committed_schema() -> None:
    text = render_all()["config.md"]
    line = next(s for s in text.splitlines() if s.startswith("# yaml-language-server:"))
    target = (ROOT / line.split("$schema=", 1)[1]).resolve()
    assert target == FOLDER / "scenario.schema.json" and target.is_file()
    doc = yaml.safe_load(text.split("```yaml", 1)[1].split("```", 1)[0])
    assert not list(Draft202012Validator(config_schema("scenario")).iter_errors(doc))
