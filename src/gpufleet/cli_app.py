"""The typer apps every feature command registers on, and the InputError wrapper they share.

A leaf module: feature CLIs (``gpufleet.<feature>.cli``) import it to register their commands,
and ``gpufleet.cli`` (the entry point) imports the feature CLIs, so the dependency arrow points
one way: ``cli`` → ``<feature>.cli`` → ``cli_app``. Every command turns :class:`InputError` into
one red line and exit status 2: bad input never ends in a traceback; a simulation that stopped
making progress (:class:`NoProgress`) prints its report and exits 3.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from gpufleet.errors import InputError, NoProgress

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
    """Wrap a command so InputError prints one line naming file/line/field and exits 2, and a
    simulation that stopped making progress prints its report and exits 3. The message is
    printed as text, not markup: a ``[name]`` in it (a path, ``pip install 'gpufleet[ray]'``)
    stays as written."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except InputError as exc:
            err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False,
                              soft_wrap=True)
            raise typer.Exit(code=2) from None
        except NoProgress as exc:
            err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False,
                              soft_wrap=True)
            raise typer.Exit(code=3) from None

    return wrapper
