"""A live test without what it needs: skip with the reason, except under CI (env ``CI`` set),
where the live suite may never skip — there it is a failure naming what is missing."""

from __future__ import annotations

import os

import pytest


def skip_or_fail(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"CI runs the live suite with no skips: {reason}")
    pytest.skip(reason)
