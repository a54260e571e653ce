"""The AWS provider against moto in server mode, over HTTP on 127.0.0.1 (EC2 + SQS).

moto runs as a real HTTP endpoint (``ThreadedMotoServer``) and the provider's boto3 clients talk
to it through ``endpoint_url``: requests are serialized, signed, sent and parsed as against AWS.
What moto does not emulate — CreateFleet's per-pool ``Errors``, a rejected credential — is fed
through botocore's Stubber on the provider's own client (responses checked against the EC2
model). moto ignores CreateFleet's ClientToken, so the idempotency test below fails unless the
provider's own lookup by token tag works.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import boto3
import pytest
from aws_env import clear_aws_credentials
from botocore.stub import Stubber

from gpufleet.catalog.instances import default_instance_catalog
from gpufleet.cloud.aws import AwsApiError, AwsProvider
from gpufleet.cloud.aws_config import AwsConfig, aws_config_from
from gpufleet.cloud.provider import (
    TAG_MANAGED,
    TAG_NODEPOOL,
    TAG_TOKEN,
    CapacityShortage,
    CloudProvider,
    CredentialsError,
    Instance,
    InstanceState,
    InterruptionKind,
    LaunchRequest,
)
from gpufleet.decisions import CapacityType

try:
    from moto.server import ThreadedMotoServer
except ImportError:  # pragma: no cover - the dev extra installs it; CI must run these tests
    if os.environ.get("CI"):
        raise
    pytest.skip("moto not installed (pip install -e '.[dev]')", allow_module_level=True)

REGION = "us-east-1"
AMI = "ami-12c6146b"  # any id: moto does not check it
TYPES = ("g5.xlarge", "g4dn.xlarge", "g6.xlarge")


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def world(moto_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    """A fresh moto account: a VPC with one subnet in each of three zones, a launch template and
    an interruption queue whose messages become visible again at once unless deleted."""
    req = urllib.request.Request(f"{moto_url}/moto-api/reset", method="POST")
    with urllib.request.urlopen(req, timeout=10):
        pass
    clear_aws_credentials(monkeypatch, tmp_path)
    # fake keys in the environment: the first link of boto3's standard chain
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    kw: dict[str, Any] = {"region_name": REGION, "endpoint_url": moto_url}
    ec2 = boto3.client("ec2", **kw)
    sqs = boto3.client("sqs", **kw)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnets = {}
    for i, zone in enumerate(("us-east-1a", "us-east-1b", "us-east-1c")):
        sub = ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{i}.0/24", AvailabilityZone=zone)
        subnets[zone] = sub["Subnet"]["SubnetId"]
    ec2.create_launch_template(
        LaunchTemplateName="gpufleet-nodes", LaunchTemplateData={"ImageId": AMI}
    )
    queue = sqs.create_queue(
        QueueName="gpufleet-interruptions", Attributes={"VisibilityTimeout": "0"}
    )["QueueUrl"]
    config = aws_config_from(
        {
            "region": REGION,
            "zones": subnets,
            "launch_template": {"name": "gpufleet-nodes", "version": "$Latest"},
            "instance_types": list(TYPES),
            "queue_url": queue,
            "endpoint_url": moto_url,
            "wait_time_s": 0,
            "page_size": 5,
        }
    )
    return {"ec2": ec2, "sqs": sqs, "subnets": subnets, "queue": queue, "config": config}


def _calls(client: Any, op: str) -> list[dict[str, Any]]:
    """Record the parameters of every ``op`` the client sends (botocore's event hook)."""
    seen: list[dict[str, Any]] = []

    def hook(params: dict[str, Any], **_: Any) -> None:
        seen.append(json.loads(json.dumps(params, default=str)))

    client.meta.events.register(
        f"provide-client-params.{client.meta.service_model.service_name}.{op}", hook
    )
    return seen


def _tags_of(ec2: Any, instance_id: str) -> dict[str, str]:
    raw = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    return {t["Key"]: t["Value"] for t in raw.get("Tags", [])}


def _request(token: str, cap: CapacityType, **kw: Any) -> LaunchRequest:
    return LaunchRequest(
        client_token=token,
        instance_types=kw.pop("types", ("g5.xlarge", "g4dn.xlarge")),
        zones=kw.pop("zones", ("us-east-1b", "us-east-1c")),
        capacity_type=cap,
        **kw,
    )


def test_is_a_cloud_provider(world: dict[str, Any]) -> None:
    assert isinstance(AwsProvider(world["config"]), CloudProvider)


@pytest.mark.parametrize("cap", [CapacityType.ON_DEMAND, CapacityType.SPOT])
def test_create_launches_tagged_instance_in_a_requested_pool(
    world: dict[str, Any], cap: CapacityType
) -> None:
    aws = AwsProvider(world["config"])
    sent = _calls(aws.ec2, "CreateFleet")
    req = _request("tok-1", cap, tags={TAG_NODEPOOL: "gpu"})
    got = aws.create(req)
    assert isinstance(got, Instance), got
    assert got.zone in req.zones and got.instance_type in req.instance_types
    assert got.provider_id == f"aws:///{got.zone}/{got.instance_id}"
    assert got.capacity_type is cap and got.client_token == "tok-1"
    # the tags are on the instance in EC2, not only in our answer
    tags = _tags_of(world["ec2"], got.instance_id)
    assert tags[TAG_MANAGED] == "true" and tags[TAG_TOKEN] == "tok-1"
    assert tags[TAG_NODEPOOL] == "gpu"
    # one fleet request: every type × zone as an override, the strategy of the capacity type
    (params,) = sent
    assert params["Type"] == "instant" and params["ClientToken"] == "tok-1"
    overrides = params["LaunchTemplateConfigs"][0]["Overrides"]
    subnets = world["subnets"]
    assert {(o["InstanceType"], o["SubnetId"]) for o in overrides} == {
        (t, subnets[z]) for t in req.instance_types for z in req.zones
    }
    assert params["TargetCapacitySpecification"] == {
        "TotalTargetCapacity": 1,
        "DefaultTargetCapacityType": cap.value,
    }
    if cap is CapacityType.SPOT:
        assert params["SpotOptions"] == {"AllocationStrategy": "price-capacity-optimized"}
        assert "OnDemandOptions" not in params
        assert all("MaxPrice" not in o for o in overrides)
    else:
        assert params["OnDemandOptions"] == {"AllocationStrategy": "lowest-price"}
        assert "SpotOptions" not in params
    # list reports it the same way (capacity type from InstanceLifecycle)
    (listed,) = aws.list()
    assert listed.instance_id == got.instance_id
    assert listed.capacity_type is cap and listed.zone == got.zone
    assert listed.provider_id == got.provider_id and listed.client_token == "tok-1"
    assert listed.state in (InstanceState.PENDING, InstanceState.RUNNING)


def test_spot_max_price_caps_fleet_and_every_pool(world: dict[str, Any]) -> None:
    aws = AwsProvider(world["config"])
    sent = _calls(aws.ec2, "CreateFleet")
    got = aws.create(_request("tok-p", CapacityType.SPOT, max_price=Decimal("0.42")))
    assert isinstance(got, Instance)
    (params,) = sent
    assert params["SpotOptions"]["MaxTotalPrice"] == "0.42"
    assert {o["MaxPrice"] for o in params["LaunchTemplateConfigs"][0]["Overrides"]} == {"0.42"}


def test_create_is_idempotent_on_the_client_token(world: dict[str, Any]) -> None:
    aws = AwsProvider(world["config"])
    sent = _calls(aws.ec2, "CreateFleet")
    first = aws.create(_request("same-token", CapacityType.SPOT))
    # a restarted controller (a new provider object) asks again with the same token
    again = AwsProvider(world["config"]).create(_request("same-token", CapacityType.SPOT))
    assert isinstance(first, Instance) and isinstance(again, Instance)
    assert again.instance_id == first.instance_id
    assert len(sent) == 1
    assert [i.instance_id for i in aws.list()] == [first.instance_id]
    other = aws.create(_request("other-token", CapacityType.SPOT))
    assert isinstance(other, Instance) and other.instance_id != first.instance_id


def test_zone_without_subnet_is_a_shortage_not_a_launch(world: dict[str, Any]) -> None:
    aws = AwsProvider(world["config"])
    got = aws.create(_request("tok-z", CapacityType.ON_DEMAND, zones=("us-east-1d",)))
    assert isinstance(got, CapacityShortage)
    assert "subnet" in got.reason
    assert aws.list() == []


def test_delete_then_list_leaves_only_live_managed_instances(world: dict[str, Any]) -> None:
    aws = AwsProvider(world["config"])
    a = aws.create(_request("tok-a", CapacityType.ON_DEMAND))
    b = aws.create(_request("tok-b", CapacityType.SPOT))
    assert isinstance(a, Instance) and isinstance(b, Instance)
    # a machine of the same account that gpufleet did not launch
    world["ec2"].run_instances(ImageId=AMI, MinCount=1, MaxCount=1, InstanceType="g5.xlarge")
    assert {i.instance_id for i in aws.list()} == {a.instance_id, b.instance_id}
    aws.delete(a.instance_id)
    assert [i.instance_id for i in aws.list()] == [b.instance_id]
    aws.delete(a.instance_id)  # already terminated: not an error
    aws.delete("i-0123456789abcdef0")  # unknown: not an error
    # the terminated instance is still found by its token, so the token cannot launch again
    again = aws.create(_request("tok-a", CapacityType.ON_DEMAND))
    assert isinstance(again, Instance) and again.instance_id == a.instance_id
    assert again.state is InstanceState.TERMINATED
    assert [i.instance_id for i in aws.list()] == [b.instance_id]


def test_list_follows_pages(world: dict[str, Any]) -> None:
    aws = AwsProvider(world["config"])  # page_size 5
    made = set()
    for k in range(7):
        got = aws.create(_request(f"tok-{k}", CapacityType.ON_DEMAND))
        assert isinstance(got, Instance)
        made.add(got.instance_id)
    pages = _calls(aws.ec2, "DescribeInstances")
    listed = aws.list()
    assert {i.instance_id for i in listed} == made and len(listed) == 7
    assert len(pages) >= 2, "7 instances at 5 a page must take more than one page"
    assert pages[1].get("NextToken")


def test_offerings_spot_from_price_history_on_demand_from_catalog(world: dict[str, Any]) -> None:
    aws = AwsProvider(world["config"])
    sent = _calls(aws.ec2, "DescribeSpotPriceHistory")
    offers = aws.offerings()
    (params,) = sent
    assert params["ProductDescriptions"] == ["Linux/UNIX"] and set(params["InstanceTypes"]) == set(
        TYPES
    )
    zones = set(world["subnets"])
    spot = [o for o in offers if o.capacity_type is CapacityType.SPOT]
    od = [o for o in offers if o.capacity_type is CapacityType.ON_DEMAND]
    assert spot, "moto's price history has GPU types in us-east-1"
    # one offering per pool, only configured types and zones (moto knows other zones too)
    keys = [(o.instance_type, o.zone, o.capacity_type) for o in offers]
    assert len(keys) == len(set(keys))
    assert {(o.instance_type, o.zone) for o in spot} <= {(t, z) for t in TYPES for z in zones}
    assert all(o.price_per_hour == Decimal("0.00001") for o in spot)  # moto's price
    catalog = default_instance_catalog()
    assert {(o.instance_type, o.zone) for o in od} == {(t, z) for t in TYPES for z in zones}
    for o in od:
        assert o.price_per_hour == catalog[o.instance_type].price_per_hour


def _event(detail_type: str, detail: dict[str, Any], source: str = "aws.ec2") -> str:
    return json.dumps(
        {
            "version": "0",
            "id": "7bf73129-1428-4cd3-a780-95db273d1602",
            "detail-type": detail_type,
            "source": source,
            "account": "123456789012",
            "time": "2026-12-03T12:00:00Z",
            "region": REGION,
            "resources": [f"arn:aws:ec2:{REGION}:123456789012:instance/i-0a"],
            "detail": detail,
        }
    )


def _queue_depth(world: dict[str, Any]) -> int:
    attrs = world["sqs"].get_queue_attributes(
        QueueUrl=world["queue"],
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"]) + int(
        attrs["ApproximateNumberOfMessagesNotVisible"]
    )


def test_interruptions_from_the_eventbridge_queue(
    world: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    sqs, queue = world["sqs"], world["queue"]
    bodies = [
        _event(
            "EC2 Spot Instance Interruption Warning",
            {"instance-id": "i-0000000000000000a", "instance-action": "terminate"},
        ),
        _event("EC2 Instance Rebalance Recommendation", {"instance-id": "i-0000000000000000b"}),
        _event(
            "EC2 Instance State-change Notification",
            {"instance-id": "i-0000000000000000c", "state": "shutting-down"},
        ),
        _event(
            "AWS Health Event",
            {
                "eventArn": "arn:aws:health:us-east-1::event/EC2/AWS_EC2_INSTANCE_STOP_SCHEDULED/x",
                "service": "EC2",
                "eventTypeCode": "AWS_EC2_INSTANCE_STOP_SCHEDULED",
                "eventTypeCategory": "scheduledChange",
                "startTime": "Thu, 10 Dec 2026 15:00:00 GMT",
                "affectedEntities": [
                    {"entityValue": "i-0000000000000000d"},
                    {"entityValue": "i-0000000000000000e"},
                ],
            },
            source="aws.health",
        ),
        # not a loss: deleted, not reported
        _event(
            "EC2 Instance State-change Notification",
            {"instance-id": "i-0000000000000000f", "state": "running"},
        ),
        # poison: deleted and logged, never seen again
        "this is not json {",
    ]
    for body in bodies:
        sqs.send_message(QueueUrl=queue, MessageBody=body)
    aws = AwsProvider(world["config"])
    with caplog.at_level(logging.WARNING, logger="gpufleet.cloud.aws"):
        got = aws.interruptions()
    by_id = {i.instance_id: i for i in got}
    assert len(got) == 5 and len(by_id) == 5
    assert by_id["i-0000000000000000a"].kind is InterruptionKind.SPOT_INTERRUPTION
    assert by_id["i-0000000000000000a"].deadline == pytest.approx(1796299200.0 + 120)
    assert by_id["i-0000000000000000b"].kind is InterruptionKind.REBALANCE
    assert by_id["i-0000000000000000b"].deadline is None
    assert by_id["i-0000000000000000c"].kind is InterruptionKind.STATE_CHANGE
    for iid in ("i-0000000000000000d", "i-0000000000000000e"):
        assert by_id[iid].kind is InterruptionKind.SCHEDULED
        assert by_id[iid].deadline == pytest.approx(1796914800.0)
    assert all(i.receipt for i in got)
    assert by_id["i-0000000000000000d"].receipt == by_id["i-0000000000000000e"].receipt
    assert len([r for r in caplog.records if "unreadable" in r.getMessage()]) == 1
    # the poison message and the "running" event are gone; the four real events wait for an ack
    assert _queue_depth(world) == 4
    # not acknowledged: delivered again (visibility timeout 0 here)
    assert {i.instance_id for i in aws.interruptions()} == set(by_id)
    for event in got:
        if event.instance_id != "i-0000000000000000e":
            aws.acknowledge(event)
    # the health event's message stays until both of its instances are acknowledged
    assert _queue_depth(world) == 1
    aws.acknowledge(by_id["i-0000000000000000e"])
    assert _queue_depth(world) == 0
    assert aws.interruptions() == []


def test_no_queue_configured_means_no_interruptions(world: dict[str, Any]) -> None:
    cfg = world["config"].model_copy(update={"queue_url": None})
    assert AwsProvider(cfg).interruptions() == []


def test_missing_credentials_is_one_line_credentials_error(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clear_aws_credentials(monkeypatch, tmp_path)
    aws = AwsProvider(world["config"])
    for call in (
        aws.list,
        aws.offerings,
        aws.interruptions,
        lambda: aws.create(_request("t", CapacityType.SPOT)),
    ):
        with pytest.raises(CredentialsError) as err:
            call()
        text = str(err.value)
        assert "\n" not in text and "no credentials" in text and "standard chain" in text


@pytest.fixture
def static() -> dict[str, Any]:
    """A config for the Stubber tests (no moto call is made): fixed subnets, fake keys."""
    subnets = {"us-east-1b": "subnet-0000000b", "us-east-1c": "subnet-0000000c"}
    config = aws_config_from(
        {
            "region": REGION,
            "zones": subnets,
            "launch_template": {"name": "gpufleet-nodes"},
            "instance_types": list(TYPES),
        }
    )
    return {"config": config, "subnets": subnets}


def _stubbed(config: AwsConfig) -> tuple[AwsProvider, Stubber]:
    session = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION
    )
    aws = AwsProvider(config, session=session)
    stub = Stubber(aws.ec2)
    stub.activate()
    return aws, stub


@pytest.mark.parametrize(
    ("code", "words"),
    [
        ("AuthFailure", "rejected (AuthFailure)"),
        ("UnrecognizedClientException", "rejected (UnrecognizedClientException)"),
        ("UnauthorizedOperation", "not allowed"),
    ],
)
def test_rejected_credentials_is_credentials_error(
    static: dict[str, Any], code: str, words: str
) -> None:
    aws, stub = _stubbed(static["config"])
    stub.add_client_error(
        "describe_instances",
        service_error_code=code,
        service_message="secret-looking message AKIA0000",
    )
    with pytest.raises(CredentialsError) as err:
        aws.list()
    assert words in str(err.value) and "AKIA" not in str(err.value)


def _fleet_error(itype: str, subnet: str, code: str) -> dict[str, Any]:
    return {
        "LaunchTemplateAndOverrides": {
            "LaunchTemplateSpecification": {"LaunchTemplateName": "gpufleet-nodes", "Version": "1"},
            "Overrides": {"InstanceType": itype, "SubnetId": subnet},
        },
        "Lifecycle": "spot",
        "ErrorCode": code,
        "ErrorMessage": "There is no Spot capacity available that matches your request.",
    }


def test_no_capacity_in_any_pool_is_a_capacity_shortage(static: dict[str, Any]) -> None:
    aws, stub = _stubbed(static["config"])
    sub = static["subnets"]
    stub.add_response("describe_instances", {"Reservations": []})
    stub.add_response(
        "create_fleet",
        {
            "FleetId": "fleet-0123",
            "Errors": [
                _fleet_error("g5.xlarge", sub["us-east-1b"], "InsufficientInstanceCapacity"),
                _fleet_error("g4dn.xlarge", sub["us-east-1c"], "InsufficientInstanceCapacity"),
            ],
            "Instances": [],
        },
    )
    got = aws.create(_request("tok-s", CapacityType.SPOT))
    assert isinstance(got, CapacityShortage)
    assert got.reason == "InsufficientInstanceCapacity"
    assert got.pools == (("g5.xlarge", "us-east-1b"), ("g4dn.xlarge", "us-east-1c"))
    stub.assert_no_pending_responses()


def test_other_fleet_errors_are_faults_not_shortages(static: dict[str, Any]) -> None:
    aws, stub = _stubbed(static["config"])
    stub.add_response("describe_instances", {"Reservations": []})
    stub.add_response(
        "create_fleet",
        {
            "FleetId": "fleet-0124",
            "Errors": [
                _fleet_error(
                    "g5.xlarge",
                    static["subnets"]["us-east-1b"],
                    "InvalidLaunchTemplateName.NotFoundException",
                )
            ],
            "Instances": [],
        },
    )
    with pytest.raises(AwsApiError) as err:
        aws.create(_request("tok-e", CapacityType.SPOT))
    assert err.value.code == "InvalidLaunchTemplateName.NotFoundException"


def _gpufleet(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    code = "import sys; from gpufleet.cli import main; sys.argv[0] = 'gpufleet'; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300, env=env
    )


def _config_file(world: dict[str, Any], tmp_path: Path) -> Path:
    path = tmp_path / "aws.yaml"
    path.write_text(json.dumps(world["config"].model_dump(mode="json", exclude_none=True)))
    return path


def test_cli_lists_managed_instances(world: dict[str, Any], tmp_path: Path) -> None:
    aws = AwsProvider(world["config"])
    got = aws.create(_request("tok-cli", CapacityType.SPOT))
    assert isinstance(got, Instance)
    res = _gpufleet(
        "cloud",
        "instances",
        "--provider",
        "aws",
        "--config",
        str(_config_file(world, tmp_path)),
        env=dict(os.environ),
    )
    assert res.returncode == 0, res.stderr
    assert got.instance_id in res.stdout and "spot" in res.stdout


def test_cli_without_credentials_exits_2_with_one_line(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = _config_file(world, tmp_path)
    clear_aws_credentials(monkeypatch, tmp_path)
    res = _gpufleet(
        "cloud", "offerings", "--provider", "aws", "--config", str(path), env=dict(os.environ)
    )
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "no credentials found in the standard chain" in lines[0]
    assert "DescribeSpotPriceHistory" in lines[0] and "Traceback" not in res.stderr


def test_unreachable_endpoint_is_a_fault_after_bounded_attempts(static: dict[str, Any]) -> None:
    # port 1 on loopback: nothing listens, the connection is refused at once
    cfg = static["config"].model_copy(
        update={"endpoint_url": "http://127.0.0.1:1", "max_attempts": 2}
    )
    session = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION
    )
    aws = AwsProvider(cfg, session=session)
    sends = _calls(aws.ec2, "DescribeInstances")
    attempts: list[int] = []
    aws.ec2.meta.events.register(
        "before-send.ec2.DescribeInstances", lambda **_: attempts.append(1)
    )
    with pytest.raises(AwsApiError) as err:
        aws.list()
    assert "EndpointConnectionError" in str(err.value)
    assert len(sends) == 1 and len(attempts) == 2  # one call, two attempts, then give up
