"""The whole loop on AWS as moto serves it over HTTP, against the lab's real API server.

The real ``Controller`` (informers, placement, the drain, the capacity loop) runs with
``AwsProvider`` on a ``ThreadedMotoServer`` (EC2 + SQS). The test plays the kubelet: for each
instance moto reports running it registers the Node an EC2 node would (``spec.providerID``
``aws:///<zone>/<id>``, the instance type's shape from ``k8s.node_objects``, the labels a launch
template's kubelet arguments would set). Then a pending GPU pod → one launch → the Node registers
→ the pod is bound; a real EventBridge "EC2 Spot Instance Interruption Warning" for that instance
goes into the SQS queue → the Node is marked once (source ``aws-sqs``) → the pod is evicted → the
instance is terminated in EC2 → the Node is deleted, the message is acknowledged (queue empty) and
nothing leaked (every instance moto lists as running has a Node).

The pod selects a label only this test's Nodes carry, so other tests' leftover nodes in the
shared lab never take it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aws_env import clear_aws_credentials
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from live_objects import absent, gpu_pod
from live_wait import wait_for

from gpufleet.catalog.instances import default_instance_catalog
from gpufleet.cloud.provider import TAG_MANAGED
from gpufleet.config import CloudSettings, Scenario
from gpufleet.k8s.schedule.controller import Controller
from gpufleet.k8s.translate import names
from gpufleet.k8s.translate.node_objects import node_object, spec_from_instance

try:
    import boto3
    from moto.server import ThreadedMotoServer
except ImportError:  # pragma: no cover - the dev extra installs them; CI must run these tests
    if os.environ.get("CI"):
        raise
    pytest.skip("moto/boto3 not installed (pip install -e '.[dev]')", allow_module_level=True)

pytestmark = pytest.mark.live

REGION = "us-east-1"
TYPE = "g5.xlarge"
POOL = "gpufleet.io/nodepool"



@pytest.fixture
def moto(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """moto over HTTP with a VPC (a subnet per zone), a launch template and the interruption
    queue; fake keys in the environment (the first link of boto3's chain)."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    clear_aws_credentials(monkeypatch, tmp_path)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    try:
        with urllib.request.urlopen(urllib.request.Request(f"{url}/moto-api/reset",
                                                           method="POST"), timeout=10):
            pass
        kw: dict[str, Any] = {"region_name": REGION, "endpoint_url": url}
        ec2 = boto3.client("ec2", **kw)
        sqs = boto3.client("sqs", **kw)
        vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        zones = {}
        for i, zone in enumerate(("us-east-1a", "us-east-1b")):
            zones[zone] = ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{i}.0/24",
                                            AvailabilityZone=zone)["Subnet"]["SubnetId"]
        ec2.create_launch_template(LaunchTemplateName="gpufleet-nodes",
                                   LaunchTemplateData={"ImageId": "ami-12c6146b"})
        queue = sqs.create_queue(QueueName="gpufleet-interruptions")["QueueUrl"]
        yield {"url": url, "ec2": ec2, "sqs": sqs, "queue": queue, "zones": zones}
    finally:
        server.stop()


def running_instances(ec2: Any) -> list[dict[str, Any]]:
    out = []
    for r in ec2.describe_instances(Filters=[
            {"Name": f"tag:{TAG_MANAGED}", "Values": ["true"]},
            {"Name": "instance-state-name", "Values": ["pending", "running"]}])["Reservations"]:
        out += r["Instances"]
    return out


def queue_depth(sqs: Any, queue: str) -> int:
    attrs = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=[
        "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"]) + int(
        attrs["ApproximateNumberOfMessagesNotVisible"])


class Kubelets:
    """Registers one Node per running gpufleet instance, once, as its kubelet would."""

    def __init__(self, api: client.ApiClient, ec2: Any, pool: str) -> None:
        self.core = client.CoreV1Api(api)
        self.ec2 = ec2
        self.pool = pool
        self.registered: dict[str, str] = {}  # instance id -> node name

    def sync(self) -> None:
        catalog = default_instance_catalog()
        for inst in running_instances(self.ec2):
            iid = inst["InstanceId"]
            if iid in self.registered:
                continue
            zone = inst["Placement"]["AvailabilityZone"]
            name = f"{self.pool}-{iid}"
            spec = spec_from_instance(catalog[inst["InstanceType"]], name, zone=zone)
            node = node_object(spec)
            node["metadata"]["labels"] |= {TAG_MANAGED: "true", POOL: self.pool}
            node["spec"]["providerID"] = f"aws:///{zone}/{iid}"
            self.core.create_node(node)
            self.registered[iid] = name


class MarkLog:
    """Every distinct interruption annotation a Node carried (a watch: nothing is missed)."""

    def __init__(self) -> None:
        self.seen: dict[str, list[str]] = {}
        self.stop = threading.Event()

    def run(self, core: client.CoreV1Api) -> None:
        while not self.stop.is_set():
            w = watch.Watch()
            try:
                for ev in w.stream(core.list_node, timeout_seconds=2):
                    n = ev["object"]
                    ann = (n.metadata.annotations or {}).get(names.ANN_INTERRUPTION)
                    if ann is not None:
                        marks = self.seen.setdefault(n.metadata.name, [])
                        if ann not in marks:
                            marks.append(ann)
                    if self.stop.is_set():
                        break
            except ApiException:
                time.sleep(0.2)
            finally:
                w.stop()


def spot_warning(instance_id: str) -> str:
    """The EventBridge envelope EC2 sends two minutes before it reclaims a spot instance."""
    return json.dumps({
        "version": "0", "id": "1e5527d7-bb36-4607-3370-4164db56a40e",
        "detail-type": "EC2 Spot Instance Interruption Warning", "source": "aws.ec2",
        "account": "123456789012", "time": "2026-12-03T13:00:00Z", "region": REGION,
        "resources": [f"arn:aws:ec2:{REGION}:123456789012:instance/{instance_id}"],
        "detail": {"instance-id": instance_id, "instance-action": "terminate"}})


def test_launch_bind_interrupt_drain_terminate_on_moto(lab: Any, moto: dict[str, Any]) -> None:
    core = lab.core
    ns = lab.namespace("aws")
    aws = {"region": REGION, "zones": moto["zones"],
           "launch_template": {"name": "gpufleet-nodes", "version": "$Latest"},
           "instance_types": [TYPE], "queue_url": moto["queue"], "endpoint_url": moto["url"],
           "wait_time_s": 0}
    sc = Scenario(name="aws-live", provider="aws", spot=False, instance_types=(TYPE,),
                  pending_gpu_threshold=0.0, max_pending_wait_s=0.0,
                  cloud=CloudSettings(name="aws", aws=aws, registration_timeout_s=120.0))
    ctl = Controller(lab.api, sc, leader_elect=False, resync_s=0.5, capacity_namespace=ns)
    assert ctl.capacity is not None and ctl.capacity.provider.name == "aws"
    kubelets = Kubelets(lab.api, moto["ec2"], ns)
    marks = MarkLog()
    watcher = threading.Thread(target=marks.run, args=(core,), daemon=True)
    watcher.start()
    ctl.start()
    try:
        wait_for("informers to sync", ctl.ready)
        core.create_namespaced_pod(ns, gpu_pod("train", 1, {POOL: ns}))

        def bound() -> str | None:
            kubelets.sync()
            return core.read_namespaced_pod("train", ns).spec.node_name

        node = wait_for("the pod bound on a launched instance's Node", bound)
        (inst,) = running_instances(moto["ec2"])  # one pod, one launch
        iid = inst["InstanceId"]
        assert kubelets.registered == {iid: node}
        assert inst["InstanceType"] == TYPE
        assert core.read_node(node).spec.provider_id == (
            f"aws:///{inst['Placement']['AvailabilityZone']}/{iid}")

        moto["sqs"].send_message(QueueUrl=moto["queue"], MessageBody=spot_warning(iid))

        wait_for("the pod evicted", lambda: absent(
            lambda: core.read_namespaced_pod("train", ns)))

        def instance_gone() -> bool:
            return not running_instances(moto["ec2"])

        wait_for("the instance terminated in EC2", instance_gone)

        wait_for("the Node deleted", lambda: absent(lambda: core.read_node(node)))
        wait_for("the message acknowledged", lambda: queue_depth(moto["sqs"], moto["queue"]) == 0)
        (mark,) = marks.seen[node]  # marked once
        assert json.loads(mark)["source"] == "aws-sqs"
        assert json.loads(mark)["kind"] == "spot-interruption"
        reg = ctl.metrics.registry
        assert reg.get_sample_value("gpufleet_interruption_notices_total",
                                    {"kind": "spot-interruption"}) == 1
        assert reg.get_sample_value("gpufleet_terminations_total",
                                    {"reason": "interruption"}) == 1
        # no leak: every instance EC2 runs for gpufleet is a Node (none is left here)
        live = {n.spec.provider_id for n in core.list_node().items}
        for i in running_instances(moto["ec2"]):
            assert f"aws:///{i['Placement']['AvailabilityZone']}/{i['InstanceId']}" in live
        # the cost metrics priced the fleet from the provider's offerings
        assert ctl.fleet.prices.on_demand_offered
    finally:
        ctl.stop()
        marks.stop.set()
        watcher.join(timeout=5)
        for name in kubelets.registered.values():
            with contextlib.suppress(ApiException):  # the test deleted it already
                core.delete_node(name)
        core.delete_namespace(ns)
