"""Fixtures for the cloud providers' tests: the loopback ECS server and a credential environment.

``ecs_loopback.py`` is loaded by path (the tests run with ``--import-mode=importlib``, so a test
module cannot import its neighbour by name).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REGION = "cn-hangzhou"
KEY_ID = "LTAI5tGpufleetTestKey"
SECRET = "gpufleet-test-secret-0123456789"
VSWITCHES = {"vsw-hz-h": "cn-hangzhou-h", "vsw-hz-i": "cn-hangzhou-i", "vsw-hz-j": "cn-hangzhou-j"}
TYPES = {"ecs.gn7i-c8g1.2xlarge", "ecs.gn6i-c4g1.xlarge", "ecs.gn7-c12g1.3xlarge"}


def _load_loopback() -> ModuleType:
    name = "gpufleet_tests_ecs_loopback"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("ecs_loopback.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def ecs_server() -> Iterator[Any]:
    """A running loopback ECS endpoint for region cn-hangzhou with three zones' vSwitches."""
    loopback = _load_loopback()
    server = loopback.EcsLoopback(
        region=REGION,
        access_keys={KEY_ID: SECRET},
        vswitches=VSWITCHES,
        instance_types=TYPES,
    )
    yield from loopback.running(server)


def _set_credential_env(values: dict[str, str | None]) -> dict[str, str | None]:
    """Set (or unset, for None) environment variables, re-read by alibabacloud_credentials.

    The credentials library reads its environment once, at import (module constants in
    ``auth_util`` / ``auth_constant``); reloading those two modules makes it see the test's
    environment, exactly as a freshly started process would."""
    old = {k: os.environ.get(k) for k in values}
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    from alibabacloud_credentials.utils import auth_constant, auth_util

    importlib.reload(auth_util)
    importlib.reload(auth_constant)
    return old


@pytest.fixture
def aliyun_credentials(tmp_path: Path) -> Iterator[Any]:
    """A clean credential chain (empty HOME, no ECS metadata) with the test AccessKey in the
    environment; ``set(key_id, secret)`` swaps it for another pair."""

    class Env:
        def set(self, key_id: str | None, secret: str | None) -> None:
            _set_credential_env(
                {"ALIBABA_CLOUD_ACCESS_KEY_ID": key_id, "ALIBABA_CLOUD_ACCESS_KEY_SECRET": secret}
            )

    old = _set_credential_env(
        {
            "HOME": str(tmp_path),
            "ALIBABA_CLOUD_ACCESS_KEY_ID": KEY_ID,
            "ALIBABA_CLOUD_ACCESS_KEY_SECRET": SECRET,
            "ALIBABA_CLOUD_SECURITY_TOKEN": None,
            "ALIBABA_CLOUD_ECS_METADATA_DISABLED": "true",
            "ALIBABA_CLOUD_CREDENTIALS_FILE": None,
            "ALIBABA_CLOUD_PROFILE": None,
            "ALIBABA_CLOUD_CREDENTIALS_URI": None,
        }
    )
    try:
        yield Env()
    finally:
        _set_credential_env(old)
