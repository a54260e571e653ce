"""The AWS credential environment the provider tests run in: nothing in boto3's chain.

Every ``AWS_*`` variable is removed, the shared credentials and config files point at empty
files and the instance metadata service is off, so a test that then sets keys knows they are
the only ones boto3 finds, and a test that sets none sees "no credentials".
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def clear_aws_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No credential anywhere in the chain: no env keys, empty shared files, no IMDS."""
    for var in list(os.environ):
        if var.startswith("AWS_"):
            monkeypatch.delenv(var)
    for name in ("credentials", "config"):
        (tmp_path / name).write_text("")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
