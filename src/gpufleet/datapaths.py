"""Where the shared trace data lives.

The data is never copied into the repository: it is read in place from ``$GPUFLEET_DATA`` or from
``../shared/data`` beside the checkout (where CI lays it), so tests and benchmarks find it without
configuration and skip with a clear reason where it is absent.
"""

from __future__ import annotations

import os
from pathlib import Path

from gpufleet.errors import MissingDataError

ENV_VAR = "GPUFLEET_DATA"


def _candidates() -> list[Path]:
    env = os.environ.get(ENV_VAR)
    if env:
        # An explicit setting is the only candidate: a typo must not silently fall back.
        return [Path(env)]
    found: list[Path] = []
    repo_root = Path(__file__).resolve().parents[2]
    found.append(repo_root.parent / "shared" / "data")
    found.append(Path.cwd().resolve().parent / "shared" / "data")
    found.append(Path.cwd().resolve() / "shared" / "data")
    return found


def data_dir(required: bool = True) -> Path | None:
    """The data folder, or None (``required=False``) / MissingDataError when none exists."""
    for cand in _candidates():
        if cand.is_dir():
            return cand
    if required:
        tried = ", ".join(str(c) for c in _candidates())
        raise MissingDataError(
            f"shared data folder not found (tried {tried}); set {ENV_VAR} to the folder that "
            "holds openb/, philly/ and spot-traces/"
        )
    return None


def data_file(*parts: str) -> Path:
    """A file under the data folder; MissingDataError naming it when absent."""
    base = data_dir(required=True)
    assert base is not None
    path = base.joinpath(*parts)
    if not path.exists():
        raise MissingDataError(f"expected data file {path} is missing", path=path)
    return path
