"""Build the capacity controller a scenario's ``cloud:`` key asks for (None: schedule only).

``cloud: {name: kwok}`` is the lab's cloud (``gpufleet.cloud.kwok``): the scenario's
``provisioning_delay_s`` is its boot time and, with ``spot: true``, spot capacity replays the
availability traces (``availability_dir``, default the shared data's) on the market clock of
``cloud.kwok``. The instance types are the catalog's of the scenario's ``provider`` (narrowed by
``instance_types``): kwok nodes take the shapes of real instance types.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from kubernetes import client
from prometheus_client import CollectorRegistry

from gpufleet.catalog.instances import InstanceType, default_instance_catalog
from gpufleet.errors import InputError
from gpufleet.k8s.capacity import CapacityController
from gpufleet.sim.scenario import Scenario


def capacity_types(sc: Scenario) -> list[InstanceType]:
    types = [t for t in default_instance_catalog() if t.provider == sc.provider]
    if sc.instance_types is not None:
        known = {t.name for t in types}
        bad = sorted(set(sc.instance_types) - known)
        if bad:
            raise InputError(f"unknown {sc.provider} instance types {bad}",
                             field="instance_types")
        types = [t for t in types if t.name in set(sc.instance_types)]
    return types


def build_capacity(core: client.CoreV1Api, sc: Scenario, namespace: str,
                   registry: CollectorRegistry,
                   clock: Callable[[], float] = time.time) -> CapacityController | None:
    cloud = sc.cloud
    if cloud is None:
        return None
    types = capacity_types(sc)
    if cloud.name != "kwok":
        raise InputError(f"cloud {cloud.name!r} is not wired into the controller yet; "
                         "expected kwok", field="cloud.name")
    from gpufleet.cloud.kwok import KwokProvider, kwok_market

    k = cloud.kwok
    market = kwok_market(types, Path(sc.availability_dir) if sc.availability_dir else None,
                         sc.spot_discount) if sc.spot else None
    provider = KwokProvider(core, {t.name: t for t in types}, market, namespace=k.namespace,
                            provisioning_delay_s=sc.provisioning_delay_s, notice_s=k.notice_s,
                            speedup=k.speedup, market_start_s=k.market_start_s, clock=clock)
    return CapacityController(core, provider, sc, types, namespace=namespace, registry=registry,
                              registration_timeout_s=cloud.registration_timeout_s, clock=clock)
