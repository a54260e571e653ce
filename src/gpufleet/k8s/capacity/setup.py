"""Build the capacity controller a scenario's ``cloud:`` key asks for (None: schedule only).

``cloud: {name: kwok}`` is the lab's cloud (``gpufleet.cloud.kwok``): the scenario's
``provisioning_delay_s`` is its boot time and, with ``spot: true``, spot capacity replays the
availability traces (``availability_dir``, default the shared data's) on the market clock of
``cloud.kwok``. The instance types are the catalog's of the scenario's ``provider`` (narrowed by
``instance_types``): kwok nodes take the shapes of real instance types.

``cloud: {name: aws, aws: ...}`` / ``cloud: {name: aliyun, aliyun: ...}``: the provider's settings
inline (the keys of its config file) or the path of that file (relative to the controller's
working directory). The instance types are the catalog's of that cloud, narrowed by the
provider config's ``instance_types`` and the scenario's. The SDKs are imported only here, only
for the cloud named.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from kubernetes import client
from prometheus_client import CollectorRegistry

from gpufleet.catalog.instances import InstanceType, default_instance_catalog
from gpufleet.catalog.yamlfile import load_model, read_yaml
from gpufleet.cloud.provider import CloudProvider
from gpufleet.config import Scenario
from gpufleet.errors import InputError
from gpufleet.k8s.capacity.loop import CapacityController


def capacity_types(sc: Scenario, provider: str | None = None,
                   allowed: Iterable[str] = ()) -> list[InstanceType]:
    """The catalog's types of ``provider`` (default the scenario's), narrowed by ``allowed``
    (the provider config's list; empty: all) and the scenario's ``instance_types``."""
    provider = provider or sc.provider
    types = [t for t in default_instance_catalog() if t.provider == provider]
    allowed = set(allowed)
    if allowed:
        types = [t for t in types if t.name in allowed]
    if sc.instance_types is not None:
        known = {t.name for t in types}
        bad = sorted(set(sc.instance_types) - known)
        if bad:
            raise InputError(f"unknown {provider} instance types {bad}"
                             + (" (not in the provider config's instance_types)" if allowed
                                else ""), field="instance_types")
        types = [t for t in types if t.name in set(sc.instance_types)]
    if not types:
        raise InputError(f"no {provider} instance type of the catalog is left to launch",
                         field="instance_types")
    return types


def _settings(value: dict[str, Any] | str | None, model: type[Any], name: str) -> Any:
    """The provider config from the scenario's ``cloud.<name>``: inline mapping or file path."""
    if isinstance(value, str):
        path = Path(value)
        return load_model(model, read_yaml(path, f"{name} provider config"), path)
    return load_model(model, value, f"cloud.{name}")


def _kubeconfig_client(path: Path) -> client.ApiClient:
    from kubernetes import config
    from kubernetes.config.config_exception import ConfigException

    if not path.is_file():
        raise InputError("kubeconfig file not found", field="cloud.kwok.kubeconfig", path=path)
    try:
        return config.new_client_from_config(config_file=str(path))
    except ConfigException as exc:
        raise InputError(f"cannot use this kubeconfig: {exc}", field="cloud.kwok.kubeconfig",
                         path=path) from None


def cloud_provider(core: client.CoreV1Api, sc: Scenario,
                   clock: Callable[[], float]) -> tuple[CloudProvider, list[InstanceType]]:
    """The scenario's cloud provider and the instance types it may launch."""
    cloud = sc.cloud
    assert cloud is not None
    if cloud.name == "aws":
        from gpufleet.cloud.aws import AwsProvider
        from gpufleet.cloud.aws_config import AwsConfig

        aws_cfg: AwsConfig = _settings(cloud.aws, AwsConfig, "aws")
        return (AwsProvider(aws_cfg, clock=clock),
                capacity_types(sc, "aws", aws_cfg.instance_types))
    if cloud.name == "aliyun":
        from gpufleet.cloud.aliyun import AliyunConfig, AliyunProvider

        ali_cfg: AliyunConfig = _settings(cloud.aliyun, AliyunConfig, "aliyun")
        return (AliyunProvider(ali_cfg, clock=clock),
                capacity_types(sc, "aliyun", ali_cfg.instance_types))
    from gpufleet.cloud.kwok import KwokProvider, kwok_market

    types = capacity_types(sc)
    k = cloud.kwok
    market = kwok_market(types, Path(sc.availability_dir) if sc.availability_dir else None,
                         sc.spot_discount) if sc.spot else None
    if k.kubeconfig is not None:  # the cloud's own credentials (KwokSettings.kubeconfig)
        core = client.CoreV1Api(_kubeconfig_client(Path(k.kubeconfig)))
    provider = KwokProvider(core, {t.name: t for t in types}, market, namespace=k.namespace,
                            provisioning_delay_s=sc.provisioning_delay_s, notice_s=k.notice_s,
                            speedup=k.speedup, market_start_s=k.market_start_s, clock=clock)
    return provider, types


def build_capacity(core: client.CoreV1Api, sc: Scenario, namespace: str,
                   registry: CollectorRegistry,
                   clock: Callable[[], float] = time.time) -> CapacityController | None:
    cloud = sc.cloud
    if cloud is None:
        return None
    provider, types = cloud_provider(core, sc, clock)
    return CapacityController(core, provider, sc, types, namespace=namespace, registry=registry,
                              registration_timeout_s=cloud.registration_timeout_s, clock=clock)
