"""Errors a user can act on.

Bad input must never surface as a traceback nor continue with wrong numbers: loaders raise
:class:`InputError` naming the file, the line (1-based, header = line 1) and the field, and the CLI
prints it as one line and exits with status 2.
"""

from __future__ import annotations

from pathlib import Path


class InputError(ValueError):
    """A user-supplied file or value is malformed: says where and what was expected."""

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.path = str(path) if path is not None else None
        self.line = line
        self.field = field
        self.detail = message
        where = ""
        if self.path is not None:
            where = self.path
            if line is not None:
                where += f":{line}"
            where += ": "
        if field is not None:
            where += f"field '{field}': "
        super().__init__(where + message)


class MissingDataError(InputError):
    """A data file the command needs is absent (e.g. ../shared/data not laid out)."""


class NoProgress(RuntimeError):
    """A simulation stopped making progress: past a bound of work at one simulated instant
    that no healthy run reaches. A bug report naming the event kind, the time and the jobs
    involved — never a silent hang. The CLI prints it and exits with status 3."""
