"""A running lab as seen by code that uses it: tests, benchmarks, notebooks.

:class:`LabSession` wraps a started lab with API clients and helpers (add nodes, make a fresh
namespace, run the built kubectl). :func:`shared_session` hands every caller in one process the
same cluster and stops it when the last one releases it, so the live test suite starts one
cluster per session however many test directories ask for it.
"""

from __future__ import annotations

import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpufleet.catalog.instances import default_instance_catalog
from gpufleet.k8s.translate.node_objects import GpuNodeSpec, spec_from_instance
from gpufleet.lab.binaries import binary
from gpufleet.lab.cluster import LabInfo, LabOptions, api_client, down, up
from gpufleet.lab.dra import publish_slices
from gpufleet.lab.errors import LabError
from gpufleet.lab.fleet import create_nodes, wait_nodes_ready
from gpufleet.node_plugin import POOL_LABEL


@dataclass
class LabSession:
    """A started lab: kubeconfig, an API client and helpers."""

    info: LabInfo
    api: Any = field(init=False)  # kubernetes.client.ApiClient, admin credentials

    def __post_init__(self) -> None:
        self.api = api_client(self.info.kubeconfig)

    @property
    def kubeconfig(self) -> Path:
        return self.info.kubeconfig

    @property
    def directory(self) -> Path:
        return self.info.directory

    @property
    def core(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self.api)

    @property
    def batch(self) -> Any:
        from kubernetes import client

        return client.BatchV1Api(self.api)

    def add_nodes(self, specs: Iterable[GpuNodeSpec], *, wait: bool = True) -> list[str]:
        """Create KWOK GPU nodes (see :mod:`gpufleet.k8s.translate.node_objects`) and, unless the
        lab is ``--classic``, their ResourceSlices; wait until Ready."""
        specs = list(specs)
        names = create_nodes(self.api, specs,
                             device_plugin=self.info.device_plugin or not self.info.dra)
        if self.info.dra:
            publish_slices(self.api, specs)
        if wait:
            wait_nodes_ready(self.api, names)
        return names

    def add_instance_nodes(
        self,
        instance_type: str,
        count: int = 1,
        *,
        prefix: str | None = None,
        capacity_type: str = "on-demand",
        mig_config: str | None = None,
        zone: str | None = None,
        gpu_pool: str | None = None,
    ) -> list[str]:
        """``count`` nodes of a catalog instance type, uniquely named (``prefix-<hex>-<i>``);
        ``gpu_pool`` labels them ``gpufleet.io/gpu-pool`` (``shared``: their GPUs are published
        as gpufleet's node plugin would, :func:`gpufleet.lab.dra.shared_pool_slices`)."""
        it = default_instance_catalog()[instance_type]
        tag = uuid.uuid4().hex[:6]
        base = prefix or instance_type.replace(".", "-")
        specs = [
            spec_from_instance(
                it,
                f"{base}-{tag}-{i}",
                zone=zone,
                capacity_type=capacity_type,
                mig_config=mig_config,
            )
            for i in range(count)
        ]
        if gpu_pool is not None:
            specs = [replace(sp, extra_labels={**sp.extra_labels, POOL_LABEL: gpu_pool})
                     for sp in specs]
        return self.add_nodes(specs)

    def namespace(self, prefix: str = "t", timeout_s: float = 30.0) -> str:
        """A fresh namespace, returned once its ``default`` ServiceAccount exists (pods can be
        created in it right away: the ServiceAccount admission plugin needs it)."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        core = self.core
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                core.read_namespaced_service_account("default", name)
                return name
            except ApiException as exc:
                if exc.status != 404 or time.monotonic() > deadline:
                    raise
            time.sleep(0.1)

    def kubectl(
        self, *args: str, check: bool = True, input: str | None = None, timeout_s: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        """Run the built kubectl against the lab."""
        return subprocess.run(
            [str(binary("kubectl")), f"--kubeconfig={self.kubeconfig}", *args],
            capture_output=True,
            text=True,
            check=check,
            input=input,
            timeout=timeout_s,
        )


_lock = threading.Lock()
_shared: LabSession | None = None
_users = 0
_tmp: tempfile.TemporaryDirectory[str] | None = None


def acquire_shared(**options: Any) -> LabSession:
    """The process-wide lab (started on first use in a temporary directory, no controller;
    its GPU nodes advertise the device plugin's ``nvidia.com/gpu`` beside their slices, so
    tests exercise both paths on one fleet)."""
    global _shared, _users, _tmp
    with _lock:
        if _shared is None:
            _tmp = tempfile.TemporaryDirectory(prefix="gpufleet-lab-")
            opts = {"controller": False, "device_plugin": True, **options}
            info = up(LabOptions(directory=Path(_tmp.name), **opts))
            try:
                _shared = LabSession(info)
            except Exception:
                down(Path(_tmp.name))
                raise
        _users += 1
        return _shared


def release_shared() -> None:
    """Drop one user of the shared lab; the last one stops it and removes its directory."""
    global _shared, _users, _tmp
    with _lock:
        if _users == 0:
            return
        _users -= 1
        if _users == 0 and _shared is not None:
            try:
                down(_shared.directory)
            finally:
                _shared = None
                if _tmp is not None:
                    _tmp.cleanup()
                    _tmp = None


__all__ = ["LabError", "LabSession", "acquire_shared", "release_shared"]
