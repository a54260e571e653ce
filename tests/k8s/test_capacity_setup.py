"""The kwok cloud's own credentials (``cloud.kwok.kubeconfig``): the provider's client comes
from that kubeconfig, not the controller's; a missing file is an error naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kubernetes import client

from gpufleet.cloud.kwok import KwokProvider
from gpufleet.config import Scenario
from gpufleet.errors import InputError
from gpufleet.k8s.capacity.setup import cloud_provider


def kubeconfig(path: Path, server: str) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    return path


def scenario(kwok: dict[str, str]) -> Scenario:
    return Scenario.model_validate({"name": "s", "spot": False,
                                    "instance_types": ["g4dn.xlarge"],
                                    "cloud": {"name": "kwok", "kwok": kwok}})


def controllers_core() -> client.CoreV1Api:
    cfg = client.Configuration()
    cfg.host = "https://controller.invalid:6443"
    return client.CoreV1Api(client.ApiClient(cfg))


def test_the_kwok_cloud_uses_its_own_kubeconfig(tmp_path: Path) -> None:
    kc = kubeconfig(tmp_path / "cloud.kc", "https://cloud.invalid:6443")
    own, _ = cloud_provider(controllers_core(), scenario({"kubeconfig": str(kc)}), lambda: 0.0)
    assert isinstance(own, KwokProvider)
    assert own.core.api_client.configuration.host == "https://cloud.invalid:6443"
    shared, _ = cloud_provider(controllers_core(), scenario({}), lambda: 0.0)
    assert isinstance(shared, KwokProvider)
    assert shared.core.api_client.configuration.host == "https://controller.invalid:6443"


def test_a_missing_kwok_kubeconfig_names_the_field(tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:
        cloud_provider(controllers_core(), scenario({"kubeconfig": str(tmp_path / "none")}),
                       lambda: 0.0)
    assert err.value.field == "cloud.kwok.kubeconfig"
    assert "kubeconfig file not found" in str(err.value)
