"""The one YAML reader: nesting, alias bombs, recursive aliases, duplicate keys, bad dates."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from gpufleet.catalog.yamlfile import (
    MAX_ALIAS_NODES,
    MAX_DEPTH,
    parse_yaml,
    read_yaml,
    short_repr,
    validation_to_input_error,
)
from gpufleet.errors import InputError

BOMB = "\n".join(
    [
        'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]',
        *(
            f"{x}: &{x} [{', '.join([f'*{p}'] * 9)}]"
            for p, x in zip("abcdefgh", "bcdefghi", strict=True)
        ),
    ]
)


def refused(text: str) -> InputError:
    with pytest.raises(InputError) as ei:
        parse_yaml(text, "f.yaml")
    return ei.value


def test_plain_documents_still_load() -> None:
    doc = parse_yaml("base: &b {x: 1, y: 2}\nuse:\n  <<: *b\n  y: 3\nwhen: 2017-10-09\n")
    assert doc.data["use"] == {"x": 1, "y": 3}  # a merge key may be overridden: not a duplicate
    assert str(doc.data["when"]) == "2017-10-09"
    assert doc.node is not None


def test_deep_nesting_is_refused_not_a_recursion_error() -> None:
    err = refused("x: " + "[" * 5000 + "]" * 5000)
    assert err.path == "f.yaml" and err.line == 1
    assert f"nested deeper than {MAX_DEPTH} levels" in str(err)
    parse_yaml("x: " + "[" * (MAX_DEPTH - 2) + "]" * (MAX_DEPTH - 2))  # just inside the limit


def test_alias_bomb_is_refused_with_a_short_message() -> None:
    err = refused(BOMB)
    assert "aliases expand the document" in str(err)
    assert f"{MAX_ALIAS_NODES:,}" in str(err)
    assert len(str(err)) < 200


def test_modest_alias_use_is_fine() -> None:
    text = "d: &d {a: 1, b: 2}\n" + "".join(f"s{i}: {{<<: *d, c: {i}}}\n" for i in range(200))
    assert parse_yaml(text).data["s199"] == {"a": 1, "b": 2, "c": 199}


def test_self_referencing_alias_is_refused() -> None:
    err = refused("a: &a [1, *a]\n")
    assert "refers to the collection that contains it" in str(err)


@pytest.mark.parametrize(
    ("text", "line", "first"),
    [
        ("a: 1\nb: 2\na: 3\n", 3, 1),
        ("jobs:\n  - {job_id: x, num_gpu: 1, num_gpu: 2}\n", 2, 2),
        ("outer:\n  inner: 1\n  inner: 2\n", 3, 2),
    ],
)
def test_duplicate_keys_are_errors(text: str, line: int, first: int) -> None:
    err = refused(text)
    assert err.line == line
    assert "duplicate key" in str(err) and f"first on line {first}" in str(err)


def test_impossible_date_stays_text() -> None:
    assert parse_yaml("d: 2017-13-45\n").data == {"d": "2017-13-45"}


def test_syntax_error_names_the_line() -> None:
    err = refused("a: 1\nb: [1, 2\n")
    assert err.line is not None and "not valid YAML" in str(err)


def test_read_yaml_non_utf8_and_directory(tmp_path: Path) -> None:
    p = tmp_path / "s.yaml"
    p.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(InputError, match="not UTF-8"):
        read_yaml(p)
    with pytest.raises(InputError, match="is a directory"):
        read_yaml(tmp_path)


def test_validation_error_quotes_a_bounded_repr() -> None:
    class M(BaseModel):
        x: int

    with pytest.raises(ValidationError) as ei:
        M.model_validate({"x": ["y" * 10_000] * 10_000})
    err = validation_to_input_error(ei.value, "f.yaml", 3)
    assert err.field == "x" and len(str(err)) < 300
    assert len(short_repr(list(range(10**6)))) < 100
