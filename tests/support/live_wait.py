"""Polling for the live tests: a real API server answers when it answers, so tests wait for a
condition with a bound instead of sleeping a fixed time (no timing assertion: the bound only
turns a hang into a clear failure)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(what: str, pred: Callable[[], Any], timeout: float = 60.0) -> Any:
    """``pred()``'s first truthy value, polled every 0.2 s; AssertionError naming ``what``."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = pred()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
