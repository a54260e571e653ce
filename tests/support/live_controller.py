"""The gpufleet controller in the test's process against a live lab: one replica (leader
election off), a half-second resync, started and synced before use, stopped after."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from live_wait import wait_for

from gpufleet.config import default_scenario
from gpufleet.k8s.schedule.controller import Controller


@contextmanager
def running_controller(api: Any) -> Iterator[Controller]:
    ctl = Controller(api, default_scenario(), leader_elect=False, resync_s=0.5)
    ctl.start()
    try:
        wait_for("informers to sync", ctl.ready)
        yield ctl
    finally:
        ctl.stop()
