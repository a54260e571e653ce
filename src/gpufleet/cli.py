"""The ``gpufleet`` command line.

Each feature keeps its command in its own module (``gpufleet.<feature>.cli``) and registers it
here, so this file stays a table of contents. Every command turns :class:`InputError` into one
red line and exit status 2: bad input never ends in a traceback.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import typer
from rich.console import Console

from gpufleet.errors import InputError

app = typer.Typer(
    name="gpufleet",
    help="Make rented GPU compute cheap and busy: placement, autoscaling, spot, recovery, cost.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
bench_app = typer.Typer(
    help="Reproducible benchmarks against published results.", no_args_is_help=True
)
app.add_typer(bench_app, name="bench")

err_console = Console(stderr=True)


def friendly_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a command so InputError prints one line naming file/line/field and exits 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except InputError as exc:
            err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(code=2) from None

    return wrapper


def _register() -> None:
    """Import feature CLIs; each calls ``app.command``/``bench_app.command`` on import.

    Deferred to ``main`` so that importing ``gpufleet.cli`` (as every feature CLI does) stays
    cheap and free of import cycles.
    """
    import gpufleet.checkpoint.cli
    import gpufleet.k8s.cli
    import gpufleet.lab.cli
    import gpufleet.market.cli
    import gpufleet.metrics.cli
    import gpufleet.placement.cli
    import gpufleet.sim.cli  # noqa: F401


def main() -> None:
    _register()
    app(prog_name="gpufleet")


if __name__ == "__main__":  # pragma: no cover
    # Run as ``python -m gpufleet.cli`` this file is ``__main__``, while feature modules register
    # on ``gpufleet.cli.app``: call the imported module's main so both see the same app.
    from gpufleet.cli import main as _main

    sys.exit(_main())
