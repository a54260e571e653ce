"""``docs/reference/config.md``: every key of the scenario and controller files, from the models.

One section per pydantic model, starting at :class:`gpufleet.config.Scenario` and following the
models its fields hold (``cloud`` → :class:`~gpufleet.config.CloudSettings` → …), then the cloud
providers' settings ``cloud.aws`` / ``cloud.aliyun`` take. Each key's type, default, bounds and
description are the model's own: its annotation, ``Field`` default and constraints and
``Field(description=...)``; the section's text is the model's docstring.
"""

from __future__ import annotations

import inspect
import json
import re
import types
from collections.abc import Iterator
from typing import Any, Literal, Union, get_args, get_origin

from annotated_types import Ge, Gt, Le, Lt, MaxLen, MinLen
from pydantic import BaseModel, WithJsonSchema
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from gpufleet.cloud.aliyun import AliyunConfig
from gpufleet.cloud.aws_config import AwsConfig
from gpufleet.config import MAX_SCENARIOS, Scenario
from gpufleet.reference.markdown import cell, table

# (model, the key path it sits under) — the roots; nested models are found from their fields
ROOTS: tuple[tuple[type[BaseModel], str], ...] = (
    (Scenario, ""), (AwsConfig, "cloud.aws"), (AliyunConfig, "cloud.aliyun"))

HEADER = f"""# Configuration reference

Generated from the pydantic models by `python -m gpufleet.reference` (`make reference`); do not
edit by hand.

A **scenario file** (`gpufleet simulate --scenario FILE`) is one scenario mapping, or
`{{scenarios: [...]}}` with 1 to {MAX_SCENARIOS} of them. The **controller's configuration**
(`gpufleet controller --config FILE`, the Helm chart's `config:`) is one scenario with the same
keys, so a configuration tuned in simulation deploys unchanged. Unknown keys are errors; every
error names the file, the line and the key. `cloud.aws` and `cloud.aliyun` hold the provider's
settings (their sections below) or the path of a file with them.

## Editor completion: the JSON Schemas

[`scenario.schema.json`](scenario.schema.json) and
[`controller.schema.json`](controller.schema.json) describe both files (the same as
`gpufleet config schema --kind scenario|controller` prints). An editor with the YAML language
server (VS Code's YAML extension, Neovim's yamlls, JetBrains IDEs) completes keys, shows each
key's description and flags wrong types and bounds when the file's first line names the schema:

```yaml
# yaml-language-server: $schema=docs/reference/scenario.schema.json
name: my-fleet
spot: true
spot_swap: true
```

The path is relative to the YAML file (here one at the repository's root); an absolute path or an
`https://` URL of the committed schema works too, and
`gpufleet config schema --kind controller --out controller.schema.json` writes it for a
deployment repository. A controller file names `controller.schema.json` the same way. What only
the loader checks — instance types the catalog knows, an `availability_dir` holding traces,
unique scenario names — the schema does not.
"""


def _type(tp: Any, anchors: dict[type[BaseModel], str]) -> str:
    origin, args = get_origin(tp), get_args(tp)
    if origin in (Union, types.UnionType):
        parts = [_type(a, anchors) for a in args if a is not type(None)]
        return " or ".join(parts) + (" or null" if type(None) in args else "")
    if origin is Literal:
        return " or ".join(f"`{json.dumps(a)}`" for a in args)
    if origin in (tuple, list) and args:
        return f"list of {_type(args[0], anchors)}"
    if origin is dict:
        return f"mapping of {_type(args[0], anchors)} to {_type(args[1], anchors)}"
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return f"[{tp.__name__}](#{anchors[tp]})" if tp in anchors else tp.__name__
    return {str: "string", int: "integer", float: "number", bool: "boolean",
            Any: "any"}.get(tp, getattr(tp, "__name__", str(tp)))


def _schema_type(schema: dict[str, Any]) -> str:
    """The type a hand-written JSON Schema states (a field written as a mapping but kept as
    pairs describes itself with one)."""
    if schema.get("type") == "object":
        return f"mapping of string to {_schema_type(schema.get('additionalProperties') or {})}"
    return {"number": "number", "integer": "integer", "string": "string",
            "boolean": "boolean"}.get(str(schema.get("type")), "any")


def _field_type(field: FieldInfo, anchors: dict[type[BaseModel], str]) -> str:
    for m in field.metadata:
        if isinstance(m, WithJsonSchema) and m.json_schema is not None:
            return _schema_type(dict(m.json_schema))
    return _type(field.annotation, anchors)


def _models(tp: Any) -> Iterator[type[BaseModel]]:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        yield tp
    for a in get_args(tp):
        yield from _models(a)


def sections() -> list[tuple[type[BaseModel], str]]:
    """Every model with the key path it sits under, roots first, each nested model right after
    the model that holds it (depth first, in field order)."""
    out: list[tuple[type[BaseModel], str]] = []
    seen: set[type[BaseModel]] = set()

    def visit(model: type[BaseModel], at: str) -> None:
        if model in seen:
            return
        seen.add(model)
        out.append((model, at))
        for name, field in model.model_fields.items():
            for sub in _models(field.annotation):
                visit(sub, f"{at}.{name}" if at else name)

    for model, at in ROOTS:
        visit(model, at)
    return out


def _default(field: FieldInfo) -> str:
    extra = field.json_schema_extra
    if isinstance(extra, dict) and "default" in extra:
        value: Any = extra["default"]
    elif field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if isinstance(value, BaseModel):
        return "its defaults"
    if value is None:
        return "null"
    return f"`{json.dumps(value, default=str)}`"


def _bounds(field: FieldInfo) -> str:
    out: list[str] = []
    for m in field.metadata:
        if isinstance(m, Ge):
            out.append(f"≥ {m.ge:g}")
        elif isinstance(m, Gt):
            out.append(f"> {m.gt:g}")
        elif isinstance(m, Le):
            out.append(f"≤ {m.le:g}")
        elif isinstance(m, Lt):
            out.append(f"< {m.lt:g}")
        elif isinstance(m, MinLen):
            out.append(f"length ≥ {m.min_length}")
        elif isinstance(m, MaxLen):
            out.append(f"length ≤ {m.max_length}")
        elif getattr(m, "pattern", None) is not None:
            out.append(f"matches `{m.pattern}`")
    return ", ".join(out)


def _anchor(model: type[BaseModel], at: str) -> str:
    return re.sub(r"[^a-z0-9_-]", "", (at or model.__name__).lower().replace(".", "-"))


def render() -> str:
    found = sections()
    anchors = {m: _anchor(m, at) for m, at in found}
    out = [HEADER]
    for model, at in found:
        title = f"`{at}`: {model.__name__}" if at else f"{model.__name__}: the top level"
        out.append(f'\n<a id="{anchors[model]}"></a>\n\n## {title}\n')
        doc = inspect.cleandoc(model.__doc__ or "")
        if doc:
            out.append(doc + "\n")
        rows = []
        for name, field in model.model_fields.items():
            rows.append((f"`{name}`", cell(_field_type(field, anchors)),
                         cell(_default(field)), cell(_bounds(field)),
                         cell(field.description or "")))
        out.append(table(("key", "type", "default", "bounds", "description"), rows))
    return "\n".join(out)
