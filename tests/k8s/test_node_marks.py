"""The shared reading of gpufleet's Node marks: JSON-object errors, epoch seconds, warn once."""

from __future__ import annotations

import logging

import pytest

from gpufleet.k8s.translate.node_marks import epoch_seconds, json_object, read_mark


def node(ann: dict[str, str] | None) -> dict:
    return {"metadata": {"name": "n1", "annotations": ann}}


def test_json_object_names_the_annotation() -> None:
    assert json_object('{"a": 1}', "x/y") == {"a": 1}
    with pytest.raises(ValueError, match=r"^x/y: not JSON"):
        json_object("{", "x/y")
    with pytest.raises(ValueError, match=r"^x/y: expected a JSON object$"):
        json_object("[1]", "x/y")


def test_epoch_seconds() -> None:
    assert epoch_seconds(1.5) and epoch_seconds(0)
    assert not any(epoch_seconds(v) for v in (True, float("nan"), float("inf"), "1", None))


def test_read_mark_parses_or_warns_once_per_node_and_value(
        caplog: pytest.LogCaptureFixture) -> None:
    def parse(text: str) -> dict:
        return json_object(text, "gpufleet.io/test-mark")

    assert read_mark(node(None), "gpufleet.io/test-mark", parse, "not acting") is None
    assert read_mark(node({"gpufleet.io/test-mark": '{"k": 2}'}), "gpufleet.io/test-mark",
                     parse, "not acting") == {"k": 2}
    with caplog.at_level(logging.WARNING, logger="gpufleet.k8s.translate.node_marks"):
        for _ in range(3):  # every cycle hands the same Node back
            assert read_mark(node({"gpufleet.io/test-mark": "garbage-7f3"}),
                             "gpufleet.io/test-mark", parse, "not acting") is None
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1
    assert warned[0].startswith("node n1: gpufleet.io/test-mark: not JSON")
    assert warned[0].endswith("; not acting")
