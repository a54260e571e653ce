"""Read YAML files safely, and turn pydantic validation errors into InputError.

The one YAML reading path of the project (catalogs, workloads, scenarios), so every YAML file gets
the same guards and the same "which file, which line, which field" wording:

* the text is read through :func:`gpufleet.inputfile.read_text` (size cap, UTF-8, a directory or
  an unreadable file is an InputError);
* nesting deeper than :data:`MAX_DEPTH` is refused while composing (PyYAML's composer recurses:
  a 5,000-deep ``[[[…]]]`` was a RecursionError);
* anchors and aliases are allowed (``<<: *defaults`` is handy in a scenario file) but the document
  they expand to may hold at most :data:`MAX_ALIAS_NODES` nodes more than the file itself, and a
  self-referencing alias is refused — a "billion laughs" file is one line of error, not minutes of
  building a repr;
* a mapping that repeats a key is an error naming both lines (PyYAML keeps the last silently);
* a value the YAML resolver misreads and then cannot build (``2017-13-45`` as a date) is an error
  with its line, not a ValueError.
"""

from __future__ import annotations

import reprlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from gpufleet.errors import InputError
from gpufleet.inputfile import read_text

M = TypeVar("M", bound=BaseModel)

MAX_DEPTH = 64  # nesting of collections; real files use 3-5 levels
MAX_ALIAS_NODES = 100_000  # extra nodes aliases may add once expanded

_MERGE_TAG = "tag:yaml.org,2002:merge"


class _Refused(Exception):
    """Raised inside the loader; carries the message and the mark for the InputError."""

    def __init__(self, message: str, mark: yaml.Mark | None) -> None:
        super().__init__(message)
        self.message = message
        self.mark = mark


class _GuardedLoader(yaml.SafeLoader):
    """SafeLoader with a nesting limit, duplicate-key detection and checked timestamps."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise _Refused(f"nested deeper than {MAX_DEPTH} levels", mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                    continue  # merged keys may be overridden; unhashable keys: PyYAML's error
                key = self.construct_object(key_node, deep=True)
                if key in seen:
                    raise _Refused(
                        f"duplicate key {short_repr(key)} (first on line {seen[key]})",
                        key_node.start_mark,
                    )
                seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_timestamp(self, node: Any) -> Any:
        try:
            return super().construct_yaml_timestamp(node)
        except (ValueError, OverflowError):
            # looks like a date but is not one (2017-13-45): keep the text, the model decides
            return self.construct_scalar(node)


_GuardedLoader.add_constructor(
    "tag:yaml.org,2002:timestamp", _GuardedLoader.construct_yaml_timestamp
)


def _check_aliases(root: Any) -> None:
    """Refuse a self-referencing alias, or aliases that expand the document past the budget.

    Sizes are computed once per node (iteratively: the graph can be as deep as ``MAX_DEPTH``
    times the number of alias levels), so the check costs one pass over the composed file.
    """
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        nid = id(node)
        if done:
            on_path.discard(nid)
            kids = _children(node)
            size[nid] = 1 + sum(size[id(k)] for k in kids)
            depth[nid] = 1 + max((depth[id(k)] for k in kids), default=0)
            if depth[nid] > MAX_DEPTH:
                raise _Refused(
                    f"aliases nest the document deeper than {MAX_DEPTH} levels", node.start_mark
                )
            continue
        if nid in size:
            continue
        on_path.add(nid)
        stack.append((node, True))
        for kid in _children(node):
            if id(kid) in on_path:
                raise _Refused("an alias refers to the collection that contains it",
                               kid.start_mark)
            if id(kid) not in size:
                stack.append((kid, False))
    if size[id(root)] - len(size) > MAX_ALIAS_NODES:
        raise _Refused(
            f"aliases expand the document by {size[id(root)] - len(size):,} nodes; at most "
            f"{MAX_ALIAS_NODES:,} allowed",
            root.start_mark,
        )


def _children(node: Any) -> list[Any]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


@dataclass(frozen=True)
class YamlDocument:
    """A parsed YAML file: the Python data and the node tree (for line numbers)."""

    data: Any
    node: Any


def parse_yaml(text: str, path: Path | str | None = None) -> YamlDocument:
    """Compose, check and construct ``text``; every defect an InputError naming the line."""
    loader: _GuardedLoader | None = None
    try:
        loader = _GuardedLoader(text)
        node = loader.get_single_node()
        if node is not None:
            _check_aliases(node)
        data = loader.construct_document(node) if node is not None else None
    except _Refused as exc:
        raise InputError(
            f"refused YAML: {exc.message}",
            path=path,
            line=exc.mark.line + 1 if exc.mark is not None else None,
        ) from None
    except yaml.reader.ReaderError as exc:  # a control character such as NUL
        raise InputError(
            f"not valid YAML: character #x{exc.character:04x} is not allowed",
            path=path,
            line=text.count("\n", 0, max(exc.position, 0)) + 1,
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
        raise InputError(f"not valid YAML: {problem}", path=path, line=line) from None
    finally:
        if loader is not None:
            loader.dispose()
    return YamlDocument(data, node)


def read_yaml_document(path: Path, what: str = "YAML file") -> YamlDocument:
    return parse_yaml(read_text(path, what), path)


def read_yaml(path: Path, what: str = "YAML file") -> Any:
    """The data of a YAML file (see the module doc for what is refused)."""
    return read_yaml_document(path, what).data


_short = reprlib.Repr()
_short.maxstring = 60
_short.maxother = 60
_short.maxlist = _short.maxtuple = _short.maxdict = _short.maxset = 4
_short.maxlevel = 2


def short_repr(value: Any) -> str:
    """A repr bounded in length whatever ``value`` is (a huge list, a deep mapping)."""
    text = _short.repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def validation_to_input_error(
    exc: ValidationError, path: Path | str | None = None, line: int | None = None
) -> InputError:
    """First pydantic error as an InputError whose field is the dotted location.

    The offending value is quoted only for a field error (a model-level error's input is the
    whole record, which would bury the message), and always shortened.
    """
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err["loc"]) or None
    got = f" (got {short_repr(err['input'])})" if field and "input" in err else ""
    return InputError(f"{err['msg']}{got}", path=path, line=line, field=field)


def load_model(model: type[M], data: Any, path: Path | str) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_to_input_error(exc, path) from exc
