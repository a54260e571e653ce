"""CEL device selectors (DeviceClass and ResourceClaim ``selectors[].cel.expression``), evaluated
against one published device as kube-scheduler's allocator evaluates them
(``k8s.io/dynamic-resource-allocation/cel``).

The environment is Kubernetes' DRA environment:

* one variable, ``device``: ``driver`` (the slice's driver), ``allowMultipleAllocations``
  (false when unset), ``attributes[domain][id]`` and ``capacity[domain][id]``. A slice's attribute
  or capacity name ``gpu.nvidia.com/productName`` is ``productName`` in domain
  ``gpu.nvidia.com``; an unqualified name is in the driver's domain. Attribute values are int,
  bool, string, or a version (a semver); capacities are quantities. A device with an attribute of
  another kind (a list) fails every expression with Kubernetes' ``unsupported attribute value``;
  a version that is not semver with ``parse semantic version``.
* the Kubernetes libraries the DRA environment enables: quantities (``quantity()``,
  ``isQuantity()``, ``compareTo``, ``isGreaterThan``, ``isLessThan``, ``add``, ``sub``,
  ``sign``, ``isInteger``, ``asInteger``, ``asApproximateFloat``), semantic versions
  (``semver(s[, normalize])``, ``isSemver``, the three comparisons, ``major``, ``minor``,
  ``patch``), the strings extension (``lowerAscii``, ``upperAscii``, ``charAt``, ``indexOf``,
  ``lastIndexOf``, ``replace``, ``split``, ``substring``, ``trim``, ``join``,
  ``strings.quote``), Kubernetes' lists library (``isSorted``, ``sum``, ``min``, ``max``,
  ``indexOf``, ``lastIndexOf`` on a list), the lists and sets extensions (``distinct``,
  ``flatten``, ``slice``, ``sort``, ``reverse``, ``first``, ``last``, ``lists.range``,
  ``sets.contains``, ``sets.equivalent``, ``sets.intersects``), and regexes (``matches``,
  ``find``, ``findAll``).

Errors read as kube-scheduler's: a syntax error or an undeclared function or variable is a
compile error (``compilation failed: …``, ``undeclared reference to 'x'``), every device fails
it; a missing attribute is a runtime error ``no such key: <id>``.

Library: ``common-expression-language`` (import ``cel``, a Rust CEL interpreter), chosen over
``cel-python`` (``celpy``) by measurement (``benchmarks/bench_cel.py``): both pass the same
Kubernetes test expressions once the Kubernetes functions are added, and the Rust interpreter
evaluates a device an order of magnitude faster. What it lacks is filled in here or named:

* no custom value types: a quantity is the map ``{"__quantity__": "<decimal>"}`` and a semver
  ``{"__semver__": "<version>"}`` (canonical text, so ``==`` is numeric equality), and the
  Kubernetes functions are Python functions on those maps;
* no type checker: undeclared functions and variables are found from the compiled program's
  references; an expression whose result is not a bool fails when evaluated
  (``must evaluate to bool``), where Kubernetes refuses it when compiling;
* not supported (a compile error saying so): ``cel.bind``, two-variable comprehensions, the
  optional-field syntax ``.?``, and the URL, IP, CIDR and format libraries;
* Kubernetes reads a domain the device has nothing in as an empty map (``"x" in
  device.capacity['other.io']`` is false, not an error) while ``"other.io" in
  device.attributes`` stays false. Where an expression uses ``device.attributes`` and
  ``device.capacity`` only indexed by string literals, the domains it names are added empty
  for its evaluation, which is the same; where it also inspects the domain map itself (``in``,
  a macro, a computed index), a missing domain is a ``no such key`` error;
* no cost accounting: the API server refuses a selector whose estimated cost is over
  Kubernetes' limit (1,000,000) when the object is created, so none reaches a scheduler.
"""

from __future__ import annotations

import functools
import itertools
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, NoReturn

import cel as _cel
from cel import stdlib as _stdlib

from gpufleet.k8s.translate.quantity import quantity as _parse_quantity

# the library logs each failing Python function at WARNING before raising; the error is
# already returned to the caller with its text
logging.getLogger("cel").setLevel(logging.ERROR)

QUANTITY, SEMVER = "__quantity__", "__semver__"
_CACHE_SIZE = 4096


class SelectorError(Exception):
    """A selector that cannot say whether a device matches: ``compile`` (every device fails)
    or a runtime error on one device. ``str()`` is kube-scheduler's wording."""

    def __init__(self, expression: str, detail: str, *, compile: bool) -> None:
        self.expression = expression
        self.detail = detail
        self.compile = compile
        super().__init__(f"CEL {'compile' if compile else 'runtime'} error: {detail}")


# -- quantities and semantic versions as CEL values ---------------------------------------------


def _fail(message: str) -> NoReturn:
    """A Kubernetes function's error: the interpreter returns it as the evaluation's error."""
    raise ValueError(message)


def _q(value: Decimal) -> dict[str, str]:
    return {QUANTITY: f"{value.normalize():f}"}


def _qval(x: Any, fn: str) -> Decimal:
    if isinstance(x, Mapping) and QUANTITY in x:
        return Decimal(x[QUANTITY])
    if isinstance(x, int) and not isinstance(x, bool) and fn in ("add", "sub"):
        return Decimal(x)
    _fail(f"no such overload: {fn}")


def quantity_value(text: str) -> dict[str, str]:
    """``quantity('40Gi')``."""
    got = _parse_quantity(text) if isinstance(text, str) else None
    if got is None:
        _fail(f"quantities must match the regular expression "
                     f"'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {text!r}")
    return _q(got)


_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$")


def _normalize_semver(text: str) -> str:
    """Kubernetes' relaxed form: a leading ``v``, missing minor/patch, leading zeros."""
    text = text[1:] if text.startswith("v") else text
    m = re.match(r"^([0-9.]*)(.*)$", text, re.DOTALL)
    assert m is not None  # both groups match the empty string
    parts = m.group(1).split(".")
    if not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        return text
    return ".".join([str(int(p)) for p in parts] + ["0"] * (3 - len(parts))) + m.group(2)


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _semver_parts(text: str) -> tuple[int, int, int, tuple[tuple[int, int | str], ...]] | None:
    m = _SEMVER.match(text)
    if m is None:
        return None
    pre: list[tuple[int, int | str]] = []
    for ident in (m.group(4) or "").split(".") if m.group(4) else ():
        if ident.isdigit():
            if len(ident) > 1 and ident[0] == "0":
                return None
            pre.append((0, int(ident)))
        else:
            pre.append((1, ident))
    return int(m.group(1)), int(m.group(2)), int(m.group(3)), tuple(pre)


def semver_value(text: Any, normalize: bool = False) -> dict[str, str]:
    """``semver('1.2.3')`` (``normalize``: the relaxed form)."""
    if not isinstance(text, str):
        _fail("no such overload: semver")
    src = _normalize_semver(text) if normalize else text
    parts = _semver_parts(src)
    if parts is None:
        _fail(f"could not parse {text!r} as semver")
    return {SEMVER: src.split("+", 1)[0]}  # build metadata does not take part in comparing


def _is_semver(text: Any, normalize: bool = False) -> bool:
    if not isinstance(text, str):
        _fail("no such overload: isSemver")
    return _semver_parts(_normalize_semver(text) if normalize else text) is not None


def _semver_key(x: Any) -> tuple[int, int, int, tuple[tuple[int, int | str], ...]]:
    parts = _semver_parts(str(x[SEMVER]))
    assert parts is not None  # made by semver_value or the device's attribute
    return parts


def _semver_cmp(a: Any, b: Any) -> int:
    ka, kb = _semver_key(a), _semver_key(b)
    if ka[:3] != kb[:3]:
        return -1 if ka[:3] < kb[:3] else 1
    pa, pb = ka[3], kb[3]
    if pa == pb:
        return 0
    if not pa or not pb:  # a release is greater than its pre-releases
        return 1 if not pa else -1
    return -1 if pa < pb else 1


def _kind(x: Any) -> str | None:
    if isinstance(x, Mapping):
        if QUANTITY in x:
            return QUANTITY
        if SEMVER in x:
            return SEMVER
    return None


def _compare(a: Any, b: Any, fn: str) -> int:
    ka, kb = _kind(a), _kind(b)
    if ka is None or ka != kb:
        _fail(f"no such overload: {fn}")
    if ka == SEMVER:
        return _semver_cmp(a, b)
    qa, qb = _qval(a, fn), _qval(b, fn)
    return (qa > qb) - (qa < qb)


def _as_integer(x: Any) -> int:
    v = _qval(x, "asInteger")
    if v != v.to_integral_value() or not -(1 << 63) <= v < (1 << 63):
        _fail("cannot convert value to integer")
    return int(v)


def _sign(x: Any) -> int:
    v = _qval(x, "sign")
    return (v > 0) - (v < 0)


def _is_integer(x: Any) -> bool:
    v = _qval(x, "isInteger")
    return bool(v == v.to_integral_value())


def _semver_field(i: int, name: str) -> Callable[[Any], int]:
    def get(x: Any) -> int:
        if _kind(x) != SEMVER:
            _fail(f"no such overload: {name}")
        major, minor, patch, _ = _semver_key(x)
        return (major, minor, patch)[i]
    return get


# -- the lists library and regexes --------------------------------------------------------------


def _index_of(target: Any, arg: Any, *rest: Any) -> int:
    if isinstance(target, str):
        return int(_stdlib.index_of(target, arg, *rest))
    if isinstance(target, list) and not rest:
        return next((i for i, v in enumerate(target) if v == arg), -1)
    _fail("no such overload: indexOf")


def _last_index_of(target: Any, arg: Any, *rest: Any) -> int:
    if isinstance(target, str):
        return int(_stdlib.last_index_of(target, arg, *rest))
    if isinstance(target, list) and not rest:
        return next((i for i in range(len(target) - 1, -1, -1) if target[i] == arg), -1)
    _fail("no such overload: lastIndexOf")


def _list_extreme(name: str, pick: Callable[..., Any]) -> Callable[..., Any]:
    def f(target: Any, *rest: Any) -> Any:
        if isinstance(target, list) and not rest:
            if not target:
                _fail(f"{name} called on empty list")
            return pick(target)
        return _stdlib.min_(target, *rest) if name == "min" else _stdlib.max_(target, *rest)
    return f


def _sum(target: Any) -> Any:
    if not isinstance(target, list):
        _fail("no such overload: sum")
    if target and all(_kind(v) == QUANTITY for v in target):
        return _q(sum((Decimal(v[QUANTITY]) for v in target), Decimal(0)))
    return sum(target)


def _is_sorted(target: Any) -> bool:
    if not isinstance(target, list):
        _fail("no such overload: isSorted")
    return all(a <= b for a, b in itertools.pairwise(target))


@functools.lru_cache(maxsize=256)
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _find(target: Any, pattern: Any) -> str:
    m = _regex(str(pattern)).search(str(target))
    return m.group(0) if m else ""


def _find_all(target: Any, pattern: Any, limit: int = -1) -> list[str]:
    got = [m.group(0) for m in _regex(str(pattern)).finditer(str(target))]
    return got if limit < 0 else got[:limit]


def _quantity_op(name: str, op: Callable[[Decimal, Decimal], Decimal]) -> Callable[..., Any]:
    def f(a: Any, b: Any) -> dict[str, str]:
        return _q(op(_qval(a, name), _qval(b, name)))
    return f


FUNCTIONS: dict[str, Callable[..., Any]] = {
    **{name: fn for lib in ("strings", "lists", "sets") for name, fn in
       _stdlib.EXTENSIONS[lib].items() if name != "contains"},
    "indexOf": _index_of,
    "lastIndexOf": _last_index_of,
    "min": _list_extreme("min", min),
    "max": _list_extreme("max", max),
    "sum": _sum,
    "isSorted": _is_sorted,
    "find": _find,
    "findAll": _find_all,
    "quantity": quantity_value,
    "isQuantity": lambda s: isinstance(s, str) and _parse_quantity(s) is not None,
    "semver": semver_value,
    "isSemver": _is_semver,
    "compareTo": lambda a, b: _compare(a, b, "compareTo"),
    "isGreaterThan": lambda a, b: _compare(a, b, "isGreaterThan") > 0,
    "isLessThan": lambda a, b: _compare(a, b, "isLessThan") < 0,
    "sign": _sign,
    "isInteger": _is_integer,
    "asInteger": _as_integer,
    "asApproximateFloat": lambda a: float(_qval(a, "asApproximateFloat")),
    "add": _quantity_op("add", lambda a, b: a + b),
    "sub": _quantity_op("sub", lambda a, b: a - b),
    "major": _semver_field(0, "major"),
    "minor": _semver_field(1, "minor"),
    "patch": _semver_field(2, "patch"),
}

# CEL's standard functions and macros (what the interpreter has built in)
_STANDARD = frozenset({
    "size", "matches", "contains", "startsWith", "endsWith", "int", "uint", "double", "string",
    "bool", "bytes", "type", "dyn", "duration", "timestamp", "getDate", "getDayOfMonth",
    "getDayOfWeek", "getDayOfYear", "getFullYear", "getHours", "getMilliseconds", "getMinutes",
    "getMonth", "getSeconds", "all", "exists", "exists_one", "map", "filter", "has",
})
_KNOWN = _STANDARD | frozenset(FUNCTIONS)
_LOOP_VARS = re.compile(
    r"\.\s*(?:all|exists|exists_one|map|filter)\s*\(\s*([A-Za-z_]\w*)\s*,")
_PARSE_PREFIX = re.compile(r"^Failed to parse expression .*?': ", re.DOTALL)
_PY_FAILED = re.compile(r"Python function call failed: \w+: (.*?)\. Check function arguments",
                        re.DOTALL)


@dataclass(frozen=True, slots=True)
class Compiled:
    """One expression compiled (``program``), or why it cannot be (``error``)."""

    expression: str
    program: Any = None
    error: str | None = None
    # (map, domain) indexed by a literal, when those are the expression's only uses of the
    # maps (see the module: such domains are added empty where the device has none)
    domains: frozenset[tuple[str, str]] = frozenset()


@functools.lru_cache(maxsize=_CACHE_SIZE)
def compile_selector(expression: str) -> Compiled:
    """The expression compiled once (cached by its text): a syntax error, an undeclared
    reference and an unsupported feature are compile errors, as Kubernetes' compiler reports
    them."""
    if re.search(r"\bcel\s*\.\s*bind\s*\(", expression):
        return Compiled(expression, error="cel.bind is not supported by gpufleet's evaluator")
    try:
        program = _cel.compile(expression)
    except Exception as e:  # the library raises ValueError on a parse error
        text = _PARSE_PREFIX.sub("", str(e)).strip()
        if ".?" in text or "unsupported syntax" in text:
            text = f"unsupported syntax (gpufleet's evaluator): {text}"
        return Compiled(expression, error=f"compilation failed: {text}")
    refs = program.references()
    bound = set(_LOOP_VARS.findall(expression))
    for name in refs["variables"]:
        if name != "device" and name not in bound:
            return Compiled(expression, error=f"compilation failed: ERROR: <input>: "
                            f"undeclared reference to '{name}' (in container '')")
    for name in refs["functions"]:
        if name[:1] not in ("_", "@", "!", "-") and name not in _KNOWN:
            return Compiled(expression, error=f"compilation failed: ERROR: <input>: "
                            f"undeclared reference to '{name}' (in container '')")
    return Compiled(expression, program, domains=_literal_domains(expression))


_MAP_USE = re.compile(r"\bdevice\s*\.\s*(attributes|capacity)\b")
_LITERAL_INDEX = re.compile(r"""\s*\[\s*(?:'([^'\\]*)'|"([^"\\]*)")\s*\]""")


def _literal_domains(expression: str) -> frozenset[tuple[str, str]]:
    out: set[tuple[str, str]] = set()
    for use in _MAP_USE.finditer(expression):
        m = _LITERAL_INDEX.match(expression, use.end())
        if m is None:
            return frozenset()
        out.add((use.group(1), m.group(1) if m.group(1) is not None else m.group(2)))
    return frozenset(out)


def compile_cache_info() -> Any:
    """How often :func:`compile_selector` compiled and how often it reused (``hits``)."""
    return compile_selector.cache_info()


# -- devices ------------------------------------------------------------------------------------


def _qualified(name: str, driver: str) -> tuple[str, str]:
    domain, sep, ident = name.partition("/")
    return (domain, ident) if sep else (driver, name)


def _attribute_value(name: str, raw: Any) -> Any:
    if isinstance(raw, Mapping):
        for kind in ("int", "bool", "string"):
            if kind in raw and raw[kind] is not None:
                return raw[kind]
        if raw.get("version") is not None:
            text = str(raw["version"])
            if _semver_parts(text) is None:
                raise ValueError(f"attribute {name}: parse semantic version: "
                                 f"Invalid character(s) found in {text!r}")
            return {SEMVER: text.split("+", 1)[0]}
    raise ValueError(f"attribute {name}: unsupported attribute value")


class DeviceInput:
    """One device as the ``device`` variable (converted once, evaluated against many
    expressions), or why it cannot be (``error``: every expression fails on it, as in
    Kubernetes)."""

    __slots__ = ("_context", "_filled", "error", "name", "variable")

    def __init__(self, device: Mapping[str, Any], driver: str) -> None:
        self.name = str(device.get("name", ""))
        self.error: str | None = None
        attributes: dict[str, dict[str, Any]] = {}
        capacity: dict[str, dict[str, Any]] = {}
        try:
            for name, raw in (device.get("attributes") or {}).items():
                domain, ident = _qualified(str(name), driver)
                attributes.setdefault(domain, {})[ident] = _attribute_value(str(name), raw)
            for name, raw in (device.get("capacity") or {}).items():
                domain, ident = _qualified(str(name), driver)
                value = raw.get("value") if isinstance(raw, Mapping) else None
                q = _parse_quantity(value)
                if q is None:
                    raise ValueError(f"capacity {name}: not a quantity: {value!r}")
                capacity.setdefault(domain, {})[ident] = _q(q)
        except ValueError as e:
            self.error = str(e)
        self.variable: dict[str, Any] = {
            "driver": driver,
            "allowMultipleAllocations": bool(device.get("allowMultipleAllocations")),
            "attributes": attributes, "capacity": capacity}
        self._context: Any = None
        self._filled: dict[frozenset[tuple[str, str]], Any] = {}

    @staticmethod
    def _new_context(variable: Mapping[str, Any]) -> Any:
        ctx = _cel.Context()
        for name, fn in FUNCTIONS.items():
            ctx.add_function(name, fn)
        ctx.add_variable("device", variable)
        return ctx

    def context(self, domains: frozenset[tuple[str, str]] = frozenset()) -> Any:
        """The evaluation context; ``domains`` (map, domain) the device has nothing in are
        added as empty maps (Kubernetes' default for a missing domain)."""
        missing = frozenset((m, d) for m, d in domains if d not in self.variable[m])
        if missing:
            got = self._filled.get(missing)
            if got is None:
                var = {**self.variable, "attributes": dict(self.variable["attributes"]),
                       "capacity": dict(self.variable["capacity"])}
                for m, d in missing:
                    var[m][d] = {}
                got = self._filled[missing] = self._new_context(var)
            return got
        if self._context is None:
            self._context = self._new_context(self.variable)
        return self._context


def _runtime_detail(e: Exception) -> str:
    if isinstance(e, KeyError):
        return f"no such key: {e.args[0] if e.args else ''}"
    text = str(e)
    if (m := _PY_FAILED.search(text)) is not None:
        return m.group(1)
    if text.startswith("No such overload"):
        return "no such overload"
    return text


def matches(expression: str, device: DeviceInput) -> bool:
    """Whether ``device`` satisfies ``expression``; :class:`SelectorError` when that cannot be
    said (the claim cannot be allocated: kube-scheduler stops at the first such error)."""
    compiled = compile_selector(expression)
    if compiled.error is not None:
        raise SelectorError(expression, compiled.error, compile=True)
    if device.error is not None:
        raise SelectorError(expression, device.error, compile=False)
    try:
        got = compiled.program.execute(device.context(compiled.domains))
    except Exception as e:  # KeyError, TypeError, RuntimeError…
        raise SelectorError(expression, _runtime_detail(e), compile=False) from None
    if not isinstance(got, bool):
        raise SelectorError(expression, f"must evaluate to bool, not {type(got).__name__}",
                            compile=False)
    return got


def all_match(expressions: Sequence[str], device: DeviceInput) -> bool:
    """``expressions`` in order, as one selector list: false at the first that is false."""
    return all(matches(e, device) for e in expressions)
