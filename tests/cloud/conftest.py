"""Fixtures for the cloud providers' tests: the loopback ECS server and a credential environment
(both in tests/support, shared with the live loop in tests/k8s)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aliyun_env import KEY_ID, REGION, SECRET, key_env, set_credential_env
from ecs_loopback import EcsLoopback, running

VSWITCHES = {"vsw-hz-h": "cn-hangzhou-h", "vsw-hz-i": "cn-hangzhou-i", "vsw-hz-j": "cn-hangzhou-j"}
TYPES = {"ecs.gn7i-c8g1.2xlarge", "ecs.gn6i-c4g1.xlarge", "ecs.gn7-c12g1.3xlarge"}


@pytest.fixture
def ecs_server() -> Iterator[Any]:
    """A running loopback ECS endpoint for region cn-hangzhou with three zones' vSwitches."""
    server = EcsLoopback(
        region=REGION,
        access_keys={KEY_ID: SECRET},
        vswitches=VSWITCHES,
        instance_types=TYPES,
    )
    yield from running(server)


@pytest.fixture
def aliyun_credentials(tmp_path: Path) -> Iterator[Any]:
    """A clean credential chain (empty HOME, no ECS metadata) with the test AccessKey in the
    environment; ``set(key_id, secret)`` swaps it for another pair."""

    class Env:
        def set(self, key_id: str | None, secret: str | None) -> None:
            set_credential_env(
                {"ALIBABA_CLOUD_ACCESS_KEY_ID": key_id, "ALIBABA_CLOUD_ACCESS_KEY_SECRET": secret}
            )

    old = set_credential_env(key_env(tmp_path))
    try:
        yield Env()
    finally:
        set_credential_env(old)
