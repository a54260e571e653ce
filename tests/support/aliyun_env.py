"""The Aliyun credential environment the ECS tests run in: the test AccessKey, a clean chain.

``alibabacloud_credentials`` reads its environment once, at import (module constants in
``auth_util`` / ``auth_constant``); reloading those two modules makes it see the test's
environment, exactly as a freshly started process would. Shared by the provider tests
(tests/cloud) and the live loop on the loopback endpoint (tests/k8s).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

REGION = "cn-hangzhou"
KEY_ID = "LTAI5tGpufleetTestKey"
SECRET = "gpufleet-test-secret-0123456789"


def set_credential_env(values: dict[str, str | None]) -> dict[str, str | None]:
    """Set (or, for None, unset) ``values`` in the environment and make the credentials library
    re-read it; returns the previous values, to be passed back here afterwards."""
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


def key_env(home: Path) -> dict[str, str | None]:
    """The test AccessKey in the environment and nothing else the chain could find: an empty
    HOME (no ~/.alibabacloud profile), no STS token, no ECS metadata, no credentials file/URI."""
    return {
        "HOME": str(home),
        "ALIBABA_CLOUD_ACCESS_KEY_ID": KEY_ID,
        "ALIBABA_CLOUD_ACCESS_KEY_SECRET": SECRET,
        "ALIBABA_CLOUD_SECURITY_TOKEN": None,
        "ALIBABA_CLOUD_ECS_METADATA_DISABLED": "true",
        "ALIBABA_CLOUD_CREDENTIALS_FILE": None,
        "ALIBABA_CLOUD_PROFILE": None,
        "ALIBABA_CLOUD_CREDENTIALS_URI": None,
    }
