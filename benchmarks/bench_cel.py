"""DRA CEL selectors: the two Python CEL libraries compared, by what gpufleet needs of them.

For each library: how many of the test case tables' expressions (``tests/k8s/dra/test_cel.py``:
the cases of Kubernetes' ``cel/compile_test.go`` and selectors as NVIDIA's examples write them)
it gets right with the Kubernetes functions added, and the cost of one device evaluation (µs)
for four typical selectors — warm (the device already converted, as gpufleet keeps it while the
slices are unchanged) and cold (converting the device first).

* ``common-expression-language`` (``cel``, Rust): through :mod:`gpufleet.k8s.dra.cel`, what
  gpufleet runs.
* ``cel-python`` (``celpy``, pure Python): the same device variable and the same Kubernetes
  functions, adapted to its types. It is not a dependency: install it to compare
  (``pip install cel-python``); its row says so when it is absent.

Usage: ``python benchmarks/bench_cel.py [--repeat N]``
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from gpufleet.k8s.dra import cel as gcel
from gpufleet.k8s.dra.slices import DRIVER

NV = f"device.attributes['{DRIVER}']"
TIMED = [
    f"device.driver == '{DRIVER}' && {NV}.type == 'gpu'",
    f"{NV}.productName.lowerAscii().matches('^.*a100.*$')",
    f"device.capacity['{DRIVER}'].memory.compareTo(quantity('40Gi')) >= 0",
    f"{NV}.driverVersion.isGreaterThan(semver('535.0.0'))",
]


def _cases() -> tuple[list[tuple[str, str, dict[str, Any], Any]], dict[str, Any]]:
    """(expression, driver, device, expected) from the tests' tables, and the lab's gpu-0."""
    path = Path(__file__).resolve().parents[1] / "tests" / "k8s" / "dra" / "test_cel.py"
    spec = importlib.util.spec_from_file_location("cel_cases", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    gpu = mod._lab_gpu()
    out = [(e, d, dev, want) for _, e, d, dev, want in mod.UPSTREAM]
    out += [(e, DRIVER, gpu, want) for e, want in mod.NVIDIA]
    return out, gpu


def _rust_eval(expr: str, device: dict[str, Any], driver: str) -> Any:
    try:
        return gcel.matches(expr, gcel.DeviceInput(device, driver))
    except gcel.SelectorError:
        return "error"


def _celpy_backend() -> tuple[Callable[[str, dict[str, Any], str], Any], Any] | None:
    """cel-python with gpufleet's device variable and Kubernetes functions, or None."""
    try:
        import celpy
    except ImportError:
        return None
    env = celpy.Environment()

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            try:
                return celpy.json_to_cel(fn(*args))
            except Exception as e:  # a failing function is a CEL error value
                return celpy.CELEvalError(str(e), type(e), None)
        return call

    funcs = {name: wrap(fn) for name, fn in gcel.FUNCTIONS.items() if "." not in name}
    programs: dict[str, Any] = {}

    def activation(device: dict[str, Any], driver: str, expr: str) -> Any:
        d = gcel.DeviceInput(device, driver)
        if d.error is not None:
            return None
        var = {**d.variable, "attributes": dict(d.variable["attributes"]),
               "capacity": dict(d.variable["capacity"])}
        for m, dom in gcel.compile_selector(expr).domains:
            var[m].setdefault(dom, {})
        return {"device": celpy.json_to_cel(var)}

    def evaluate(expr: str, device: dict[str, Any], driver: str) -> Any:
        try:
            prog = programs.get(expr)
            if prog is None:
                prog = programs[expr] = env.program(env.compile(expr), functions=funcs)
            act = activation(device, driver, expr)
            if act is None:
                return "error"
            got = prog.evaluate(act)
        except Exception:  # parse or evaluation error
            return "error"
        return bool(got) if isinstance(got, bool) or type(got).__name__ == "BoolType" \
            else "error"

    def timed(expr: str, gpu: dict[str, Any]) -> tuple[Callable[[], Any], Callable[[], Any]]:
        prog = env.program(env.compile(expr), functions=funcs)
        act = activation(gpu, DRIVER, expr)
        return (lambda: prog.evaluate(act)), (
            lambda: prog.evaluate(activation(gpu, DRIVER, expr)))

    return evaluate, timed


def _rust_timed(expr: str, gpu: dict[str, Any]) -> tuple[Callable[[], Any], Callable[[], Any]]:
    warm = gcel.DeviceInput(gpu, DRIVER)
    return (lambda: gcel.matches(expr, warm)), (
        lambda: gcel.matches(expr, gcel.DeviceInput(gpu, DRIVER)))


def _us(fn: Callable[[], Any], n: int) -> float:
    fn()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n * 1e6


def _passed(evaluate: Callable[[str, dict[str, Any], str], Any],
            cases: list[tuple[str, str, dict[str, Any], Any]]) -> tuple[int, list[str]]:
    ok, wrong = 0, []
    for expr, driver, device, want in cases:
        got = evaluate(expr, device, driver)
        if got == ("error" if isinstance(want, tuple) else want):
            ok += 1
        else:
            wrong.append(expr.strip().splitlines()[0][:60])
    return ok, wrong


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2000, help="evaluations per timing")
    args = ap.parse_args()
    console = Console()
    cases, gpu = _cases()
    table = Table(title=f"DRA CEL selectors: {len(cases)} test expressions; µs per device "
                        f"evaluation, mean of {len(TIMED)} selectors")
    for col in ("library", "cases right", "warm µs", "cold µs", "wrong"):
        table.add_column(col, justify="left" if col in ("library", "wrong") else "right")
    backends: list[tuple[str, Any, Any]] = [
        ("common-expression-language (cel)", _rust_eval, _rust_timed)]
    celpy = _celpy_backend()
    if celpy is not None:
        backends.append(("cel-python (celpy)", *celpy))
    for name, evaluate, timed in backends:
        ok, wrong = _passed(evaluate, cases)
        warm = cold = 0.0
        for expr in TIMED:
            w, c = timed(expr, gpu)
            warm += _us(w, args.repeat) / len(TIMED)
            cold += _us(c, max(args.repeat // 10, 50)) / len(TIMED)
        table.add_row(name, f"{ok}/{len(cases)}", f"{warm:.1f}", f"{cold:.1f}",
                      "; ".join(wrong) or "-")
    if celpy is None:
        table.add_row("cel-python (celpy)", "not installed", "-", "-",
                      "pip install cel-python to compare")
    console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
