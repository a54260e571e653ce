"""The whole loop on Aliyun ECS as the loopback server serves it, against the lab's API server.

The real ``Controller`` runs with ``AliyunProvider`` (the real SDK, signed requests) on the
loopback ECS endpoint of ``tests/support/ecs_loopback.py``, its settings given as the path of the
provider's config file. The test plays the kubelet: each instance ECS reports gets the Node an
ECS node would register (``spec.providerID`` ``alicloud://<region>.<id>``, the instance type's
shape). A pending GPU pod → RunInstances → the Node registers → the pod is bound; the pod
finishes (deleted) → the idle Node is scaled down → DeleteInstances → the Node is deleted, no
instance is left in ECS and no launch record is left.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ecs_loopback
import pytest
import yaml
from aliyun_env import KEY_ID, REGION, SECRET, key_env, set_credential_env
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from live_objects import absent, gpu_pod
from live_wait import after_passes, wait_for

from gpufleet.catalog.instances import default_instance_catalog
from gpufleet.cloud.provider import TAG_MANAGED
from gpufleet.config import CloudSettings, Scenario
from gpufleet.k8s.capacity.launch_records import LaunchRecords
from gpufleet.k8s.schedule.controller import Controller
from gpufleet.k8s.translate.node_objects import node_object, spec_from_instance

pytestmark = pytest.mark.live

TYPE = "ecs.gn7i-c8g1.2xlarge"
VSWITCHES = {"vsw-hz-h": "cn-hangzhou-h", "vsw-hz-i": "cn-hangzhou-i"}
POOL = "gpufleet.io/nodepool"


@pytest.fixture
def ecs(tmp_path: Path) -> Iterator[Any]:
    old = set_credential_env(key_env(tmp_path))
    server = ecs_loopback.EcsLoopback(region=REGION, access_keys={KEY_ID: SECRET},
                                      vswitches=VSWITCHES, instance_types={TYPE})
    try:
        yield from ecs_loopback.running(server)
    finally:
        set_credential_env(old)


class Kubelets:
    """Registers one Node per instance ECS runs for gpufleet, once, as its kubelet would."""

    def __init__(self, api: client.ApiClient, server: Any, pool: str) -> None:
        self.core = client.CoreV1Api(api)
        self.server = server
        self.pool = pool
        self.registered: dict[str, str] = {}  # instance id -> node name

    def sync(self) -> None:
        catalog = default_instance_catalog()
        with self.server.lock:
            running = [i for i in self.server.instances.values()
                       if i.status == "Running" and i.tags.get(TAG_MANAGED) == "true"]
        for inst in running:
            if inst.instance_id in self.registered:
                continue
            name = f"{self.pool}-{inst.instance_id}".lower()
            node = node_object(spec_from_instance(catalog[inst.instance_type], name,
                                                  zone=inst.zone))
            node["metadata"]["labels"] |= {TAG_MANAGED: "true", POOL: self.pool}
            node["spec"]["providerID"] = f"alicloud://{REGION}.{inst.instance_id}"
            self.core.create_node(node)
            self.registered[inst.instance_id] = name


def test_launch_bind_scale_down_delete_on_the_ecs_loopback(lab: Any, ecs: Any,
                                                           tmp_path: Path) -> None:
    core = lab.core
    ns = lab.namespace("ali")
    config = tmp_path / "aliyun.yaml"
    config.write_text(yaml.safe_dump({
        "region": REGION, "zones": {z: v for v, z in VSWITCHES.items()},
        "image_id": "m-gpu-image", "security_group_id": "sg-gpufleet",
        "instance_types": [TYPE], "endpoint": ecs.endpoint, "protocol": "http",
        "timeout_s": 5}))
    sc = Scenario(name="aliyun-live", provider="aliyun", spot=False, instance_types=(TYPE,),
                  pending_gpu_threshold=0.0, max_pending_wait_s=0.0, scale_down_unneeded_s=0.0,
                  cloud=CloudSettings(name="aliyun", aliyun=str(config),
                                      registration_timeout_s=300.0))
    ctl = Controller(lab.api, sc, leader_elect=False, resync_s=0.5, capacity_namespace=ns)
    assert ctl.capacity is not None and ctl.capacity.provider.name == "aliyun"
    kubelets = Kubelets(lab.api, ecs, ns)
    ctl.start()
    try:
        wait_for("informers to sync", ctl.ready)
        core.create_namespaced_pod(ns, gpu_pod("train", 1, {POOL: ns}))

        def bound() -> str | None:
            kubelets.sync()
            return core.read_namespaced_pod("train", ns).spec.node_name

        node = wait_for("the pod bound on a launched instance's Node", bound)
        (iid,) = ecs.instances  # one pod, one RunInstances
        assert kubelets.registered == {iid: node}
        assert core.read_node(node).spec.provider_id == f"alicloud://{REGION}.{iid}"
        (run,) = ecs.calls_of("RunInstances")
        assert run.params["InstanceType"] == TYPE and run.params["Amount"] == "1"
        wait_for("the launch record gone once the Node registered",
                 lambda: LaunchRecords(core, ns).list() == [])

        core.delete_namespaced_pod("train", ns, grace_period_seconds=0)  # the job is done

        wait_for("the idle Node scaled down", lambda: absent(lambda: core.read_node(node)))
        assert ecs.instances == {}  # released in ECS: nothing leaked
        deletes = ecs.calls_of("DeleteInstances")
        assert [c.params["InstanceId.1"] for c in deletes] == [iid]
        assert deletes[0].params["Force"].lower() == "true"
        assert ctl.metrics.registry.get_sample_value("gpufleet_terminations_total",
                                                     {"reason": "empty"}) == 1
        after_passes(ctl)  # more capacity passes: nothing pending, nothing launched again
        assert len(ecs.calls_of("RunInstances")) == 1 and ecs.instances == {}
    finally:
        ctl.stop()
        for name in kubelets.registered.values():
            with contextlib.suppress(ApiException):  # the controller deleted it already
                core.delete_node(name)
        core.delete_namespace(ns)
