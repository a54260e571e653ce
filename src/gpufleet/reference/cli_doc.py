"""``docs/reference/cli.md``: every command of the ``gpufleet`` app, from click's own objects.

The typer app is turned into its click group (:func:`typer.main.get_command`) and walked: each
command's help is its docstring, each parameter's name, type, default and help are what click
parses with — never the ``--help`` text, whose layout depends on the terminal. Groups and
commands are listed by name, options in the order the command declares them. The objects are
read through click's public attributes alone (``commands``, ``params``, ``opts``, ``type``,
``default``…), so it works whether typer ships its own copy of click or uses the package.
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Iterator
from pathlib import PurePath
from typing import Any

import typer

from gpufleet.reference.markdown import cell, table

HEADER = """# Command-line reference

Generated from the `gpufleet` typer app by `python -m gpufleet.reference` (`make reference`);
do not edit by hand. Every command exits 2 on bad input with one line naming the file, line or
option (README: Commands).
"""


def _subcommands(cmd: Any) -> dict[str, Any] | None:
    subs = getattr(cmd, "commands", None)
    return subs if isinstance(subs, dict) else None


def commands(group: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(path, command) for ``group`` and everything under it, depth first, by name; hidden
    commands are left out."""
    yield path, group
    for name, sub in sorted((_subcommands(group) or {}).items()):
        if not sub.hidden:
            yield from commands(sub, (*path, name))


def _is_option(param: Any) -> bool:
    return bool(param.param_type_name == "option")


def _range(param: Any) -> str:
    """A number option's bounds (``0 <= x <= 65535``); empty when it has none. Typer keeps them
    on the parameter, click on its type."""
    holder = param if hasattr(param, "min") else param.type
    low, high = getattr(holder, "min", None), getattr(holder, "max", None)
    if low is None and high is None:
        return ""
    parts = [] if low is None else [f"{low} {'<' if getattr(holder, 'min_open', False) else '<='}"]
    parts.append("x")
    if high is not None:
        parts.append(f"{'<' if getattr(holder, 'max_open', False) else '<='} {high}")
    return " ".join(parts)


def _type(param: Any, ctx: Any) -> str:
    """The value's type as the command's help names it (``int``, ``path``, ``a|b`` for a
    choice), its bounds, and whether the option repeats."""
    if _is_option(param) and param.is_flag:
        text = "flag"
    elif hasattr(param, "display_type"):  # typer's own parameters
        text = str(param.display_type(ctx)).strip("<>")
    else:
        text = param.type.name
    choices = text.split("|")
    text = " | ".join(f"`{c}`" for c in choices) if len(choices) > 1 else text
    text = text.replace(" range", "")
    if bounds := _range(param):
        text += f", {bounds}"
    if param.multiple:
        text += ", repeatable"
    return text


def _default(param: Any) -> str:
    if param.required:
        return "required"
    value: Any = param.default
    if callable(value):
        return "computed"
    if _is_option(param) and param.is_flag:
        if param.secondary_opts and value is None:  # decided by other options (its help says)
            return "—"
        if param.secondary_opts:
            return f"`{param.opts[0] if value else param.secondary_opts[0]}`"
        return "on" if value else "off"
    if value is None or (param.multiple and not value):
        return "—"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, PurePath):
        value = value.as_posix()
    if isinstance(value, list | tuple):
        return ", ".join(f"`{v}`" for v in value)
    return f"`{value}`"


def _names(param: Any) -> str:
    if _is_option(param):
        return " / ".join(f"`{o}`" for o in (*param.opts, *param.secondary_opts))
    return f"`{(param.metavar or param.name or '').upper()}`"


def _help(param: Any) -> str:
    return getattr(param, "help", None) or ""


def _command_help(cmd: Any) -> str:
    return inspect.cleandoc(cmd.help or "").strip()


def render(app: typer.Typer, prog: str = "gpufleet") -> str:
    """The page for ``app`` (all its feature CLIs registered)."""
    root = typer.main.get_command(app)
    out = [HEADER]
    listed = list(commands(root, (prog,)))
    out.append("## Commands\n")
    out.append(table(("command", "what it does"), [
        (f"[`{' '.join(p)}`](#{'-'.join(p)})", cell(_command_help(c).split("\n\n")[0]))
        for p, c in listed if _subcommands(c) is None
    ]))
    for path, cmd in listed:
        level = "#" * min(max(len(path), 2), 4)
        out.append(f'\n<a id="{"-".join(path)}"></a>\n\n{level} `{" ".join(path)}`\n')
        text = _command_help(cmd)
        if text:
            out.append(text + "\n")
        ctx = cmd.context_class(cmd, info_name=path[-1])
        usage = " ".join(cmd.collect_usage_pieces(ctx))
        out.append(f"```\n{' '.join(path)} {usage}\n```\n")
        params = [p for p in cmd.params
                  if not getattr(p, "hidden", False) and p.name not in ("help",)]
        if params:
            out.append(table(("option", "type", "default", "help"),
                             [(_names(p), cell(_type(p, ctx)), cell(_default(p)), cell(_help(p)))
                              for p in params]))
    return "\n".join(out)
