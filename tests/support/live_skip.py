"""A live test without what it needs: skip with the reason, except under CI (env ``CI`` set),
where the live suite may never skip — there it is a failure naming what is missing."""

from __future__ import annotations

import os
import shutil
import sys

import pytest

from gpufleet.lab.real_node import missing_prerequisite


def skip_or_fail(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"CI runs the live suite with no skips: {reason}")
    pytest.skip(reason)


def need_real_node_and_image() -> None:
    """What a lab with ``--real-node`` running the chart's pods needs: the real node's
    prerequisites, the image build's tools, and this Python (the image is built from its
    wheels)."""
    why = missing_prerequisite()
    if why is not None:
        skip_or_fail(why)
    missing = [t for t in ("mmdebstrap", "umoci") if shutil.which(t) is None]
    if missing:
        skip_or_fail(f"building the image needs {', '.join(missing)} (make image-deps)")
    if sys.version_info[:2] != (3, 11):
        skip_or_fail("the image is built from this Python's wheels: needs Python 3.11")
