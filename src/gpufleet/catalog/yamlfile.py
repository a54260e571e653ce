"""Load a YAML file into a pydantic model, turning validation errors into InputError.

One place for the "which file, which field, what was expected" wording so every catalog and config
loader reports bad input the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from gpufleet.errors import InputError

M = TypeVar("M", bound=BaseModel)


def read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise InputError("file not found", path=path) from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise InputError(
            f"not valid YAML: {getattr(exc, 'problem', exc)}", path=path, line=line
        ) from exc


def validation_to_input_error(
    exc: ValidationError, path: Path | str | None = None, line: int | None = None
) -> InputError:
    """First pydantic error as an InputError whose field is the dotted location.

    The offending value is quoted only for a field error: a model-level error's input is the
    whole record, which would bury the message.
    """
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err["loc"]) or None
    got = f" (got {err['input']!r})" if field and "input" in err else ""
    return InputError(f"{err['msg']}{got}", path=path, line=line, field=field)


def load_model(model: type[M], data: Any, path: Path | str) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_to_input_error(exc, path) from exc
