"""JSON Schemas of the two configuration files, from their pydantic models.

* ``scenario`` — a ``gpufleet simulate --scenario`` file: one scenario mapping, or
  ``{scenarios: [...]}`` with at most :data:`gpufleet.config.MAX_SCENARIOS` of them
  (:func:`gpufleet.config.load_scenarios`).
* ``controller`` — ``gpufleet controller --config``: the same keys, exactly one scenario
  (:func:`gpufleet.k8s.settings.load_config`); ``cloud.aws`` and ``cloud.aliyun``, validated by
  the controller when it builds the provider, are the provider's config model or the path of its
  file.

Editors complete and check a file against them with the YAML language server's modeline,
``# yaml-language-server: $schema=<path or URL of the schema>`` (docs/reference/config.md). The
schemas describe the shape and the bounds; what only the loader checks (instance types the
catalog knows, an ``availability_dir`` holding traces, unique names) is not in them.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel

from gpufleet.cloud.aliyun import AliyunConfig
from gpufleet.cloud.aws_config import AwsConfig
from gpufleet.config import MAX_SCENARIOS, Scenario

SchemaKind = Literal["scenario", "controller"]
KINDS: tuple[SchemaKind, ...] = ("scenario", "controller")
DIALECT = "https://json-schema.org/draft/2020-12/schema"

_TITLES = {
    "scenario": "gpufleet scenario file (gpufleet simulate --scenario)",
    "controller": "gpufleet controller configuration (gpufleet controller --config)",
}
_DESCRIPTIONS = {
    "scenario": "One scenario mapping, or {scenarios: [...]} with 1 to "
                f"{MAX_SCENARIOS} scenarios of distinct names.",
    "controller": "One scenario: the simulator's keys, so a configuration tuned with gpufleet "
                  "simulate deploys unchanged. A cloud: key turns on the capacity loop.",
}


def _split(model: type[BaseModel]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A model's schema without its ``$defs``, and those ``$defs``."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})
    return schema, defs


def _provider(model: type[BaseModel], what: str) -> dict[str, Any]:
    return {"anyOf": [{"$ref": f"#/$defs/{model.__name__}"},
                      {"type": "string", "minLength": 1,
                       "description": f"The path of the {what} config file."},
                      {"type": "null"}],
            "default": None,
            "description": f"The {what} provider's settings (needed when name is {what!r}): "
                           "a mapping with the keys of its config file, or that file's path."}


def config_schema(kind: SchemaKind) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a ``kind`` file."""
    if kind not in KINDS:
        raise ValueError(f"unknown schema kind {kind!r}; known: {', '.join(KINDS)}")
    scenario, defs = _split(Scenario)
    defs = {**defs, "Scenario": scenario}
    if kind == "controller":
        for model in (AwsConfig, AliyunConfig):
            body, more = _split(model)
            defs.update(more)
            defs[model.__name__] = body
        cloud = defs["CloudSettings"]["properties"]
        cloud["aws"] = _provider(AwsConfig, "aws")
        cloud["aliyun"] = _provider(AliyunConfig, "aliyun")
    most = MAX_SCENARIOS if kind == "scenario" else 1
    listed = {
        "type": "object",
        "properties": {"scenarios": {"type": "array", "items": {"$ref": "#/$defs/Scenario"},
                                     "minItems": 1, "maxItems": most}},
        "required": ["scenarios"],
        "additionalProperties": False,
    }
    return {
        "$schema": DIALECT,
        "title": _TITLES[kind],
        "description": _DESCRIPTIONS[kind],
        "anyOf": [{"$ref": "#/$defs/Scenario"}, listed],
        "$defs": dict(sorted(defs.items())),
    }


def schema_text(kind: SchemaKind) -> str:
    """The schema as the committed file holds it: two-space JSON, one trailing newline."""
    return json.dumps(config_schema(kind), indent=2, ensure_ascii=False) + "\n"
