"""Polling for the live tests: a real API server answers when it answers, so tests wait for a
condition with a bound instead of sleeping a fixed time (no timing assertion: the bound only
turns a hang into a clear failure)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def wait_for(what: str, pred: Callable[[], Any], timeout: float = 60.0,
             log: Path | None = None, poll_s: float = 0.2) -> Any:
    """``pred()``'s first truthy value, polled every ``poll_s``; AssertionError naming ``what``
    (with the last 3,000 characters of ``log``, a subprocess's output, when given)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = pred()
        if got:
            return got
        time.sleep(poll_s)
    tail = log.read_text()[-3000:] if log is not None and log.exists() else ""
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}" +
                         (f"\n{tail}" if tail else ""))


def after_passes(ctl: Any, n: int = 3, timeout: float = 60.0) -> None:
    """Return once the controller ``ctl`` has completed ``n`` more passes (each a cycle and, with
    a cloud, a capacity pass): a check that something does *not* happen waits on the
    controller's own progress, not on a fixed sleep that a loaded machine may not fill."""
    start = ctl.passes
    wait_for(f"{n} more controller passes", lambda: ctl.passes >= start + n, timeout)
