"""The Aliyun provider, through the real ECS SDK, against the loopback ECS endpoint.

The server (tests/support/ecs_loopback.py) recomputes every request's ACS3-HMAC-SHA256 signature
from the test secret and checks the parameters before it acts, so each assertion here is on what
the SDK really sent over HTTP.
"""

from __future__ import annotations

import http.client
import subprocess
import sys
import textwrap
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from ecs_loopback import EcsError

from gpufleet.catalog.instances import default_instance_catalog
from gpufleet.cloud.aliyun import (
    AliyunConfig,
    AliyunError,
    AliyunProvider,
    load_aliyun_config,
)
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
from gpufleet.errors import InputError
from gpufleet.market.bidding import SpotBidAgent, ZoneMarket

A10 = "ecs.gn7i-c8g1.2xlarge"
T4 = "ecs.gn6i-c4g1.xlarge"
ZONES = {"cn-hangzhou-h": "vsw-hz-h", "cn-hangzhou-i": "vsw-hz-i", "cn-hangzhou-j": "vsw-hz-j"}


def make_provider(server: Any, **overrides: Any) -> AliyunProvider:
    fields: dict[str, Any] = {
        "region": "cn-hangzhou",
        "zones": ZONES,
        "image_id": "m-gpu-image",
        "security_group_id": "sg-gpufleet",
        "instance_types": (A10, T4),
        "endpoint": server.endpoint,
        "protocol": "http",
        "timeout_s": 5,
    }
    fields.update(overrides)
    return AliyunProvider(AliyunConfig(**fields), sleep=lambda _s: None)


def request(
    token: str = "launch-0001",
    capacity: CapacityType = CapacityType.SPOT,
    max_price: Decimal | None = None,
    types: tuple[str, ...] = (A10,),
    zones: tuple[str, ...] = ("cn-hangzhou-h",),
) -> LaunchRequest:
    return LaunchRequest(
        client_token=token,
        instance_types=types,
        zones=zones,
        capacity_type=capacity,
        max_price=max_price,
        # a value with a space, a slash and a non-ASCII letter: the signature must cover them
        tags={TAG_NODEPOOL: "gpu-a10", "team": "ml infra/zürich"},
    )


def tags_sent(params: dict[str, str]) -> dict[str, str]:
    keys = {k.split(".")[1]: v for k, v in params.items() if k.endswith(".Key")}
    return {v: params.get(f"Tag.{n}.Value", "") for n, v in keys.items()}


def test_is_a_cloud_provider(ecs_server: Any, aliyun_credentials: Any) -> None:
    assert isinstance(make_provider(ecs_server), CloudProvider)


def test_spot_with_price_limit_from_the_bid_agent(ecs_server: Any, aliyun_credentials: Any) -> None:
    limit = SpotBidAgent().max_price(Decimal("5.1234"))  # 6.14808 → 6.148 (3 decimals, down)
    inst = make_provider(ecs_server).create(request(max_price=limit))

    assert isinstance(inst, Instance)
    [call] = ecs_server.calls_of("RunInstances")
    p = call.params
    assert p["SpotStrategy"] == "SpotWithPriceLimit"
    assert Decimal(p["SpotPriceLimit"]) == Decimal("6.148")
    assert p["Amount"] == "1" and p["ClientToken"] == "launch-0001"
    assert p["InstanceType"] == A10 and p["ZoneId"] == "cn-hangzhou-h"
    assert p["VSwitchId"] == "vsw-hz-h" and p["RegionId"] == "cn-hangzhou"
    assert p["ImageId"] == "m-gpu-image" and p["SecurityGroupId"] == "sg-gpufleet"
    assert tags_sent(p) == {
        TAG_MANAGED: "true",
        TAG_TOKEN: "launch-0001",
        TAG_NODEPOOL: "gpu-a10",
        "team": "ml infra/zürich",
    }
    assert inst.provider_id == f"alicloud://cn-hangzhou.{inst.instance_id}"
    assert inst.capacity_type is CapacityType.SPOT and inst.state is InstanceState.PENDING
    assert ecs_server.instances[inst.instance_id].spot_strategy == "SpotWithPriceLimit"


def test_the_bid_agents_launch_decision_reaches_ecs(
    ecs_server: Any, aliyun_credentials: Any
) -> None:
    """The field report's bidder decides; its Launch becomes the ECS request unchanged."""
    from datetime import UTC, datetime

    ecs_server.spot_prices[(A10, "cn-hangzhou-h")] = [(datetime.now(UTC), Decimal("2.0"))]
    od = default_instance_catalog()[A10].price_per_hour
    markets = [
        ZoneMarket("cn-hangzhou-h", od, tuple(Decimal(p) for p in ("3.0", "3.0", "3.0", "2.0"))),
        ZoneMarket("cn-hangzhou-i", od, tuple(Decimal(p) for p in ("3.0", "3.0", "3.0", "2.9"))),
    ]
    [launch] = SpotBidAgent().plan(A10, markets, 1)
    assert launch.max_price == Decimal("3.60")  # 1.2 × the first price seen

    inst = make_provider(ecs_server).create(
        LaunchRequest(
            client_token="bid-0001",
            instance_types=(launch.instance_type,),
            zones=(launch.zone,),
            capacity_type=launch.capacity_type,
            max_price=launch.max_price,
        )
    )

    assert isinstance(inst, Instance) and inst.zone == "cn-hangzhou-h"
    [call] = ecs_server.calls_of("RunInstances")
    assert call.params["SpotStrategy"] == "SpotWithPriceLimit"
    assert Decimal(call.params["SpotPriceLimit"]) == Decimal("3.6")


def test_spot_without_a_limit_goes_as_price_go(ecs_server: Any, aliyun_credentials: Any) -> None:
    inst = make_provider(ecs_server).create(request())

    assert isinstance(inst, Instance)
    [call] = ecs_server.calls_of("RunInstances")
    assert call.params["SpotStrategy"] == "SpotAsPriceGo"
    assert "SpotPriceLimit" not in call.params
    [listed] = make_provider(ecs_server).list()
    assert listed.capacity_type is CapacityType.SPOT


def test_on_demand_sends_no_spot_field(ecs_server: Any, aliyun_credentials: Any) -> None:
    inst = make_provider(ecs_server).create(request(capacity=CapacityType.ON_DEMAND))

    assert isinstance(inst, Instance) and inst.capacity_type is CapacityType.ON_DEMAND
    [call] = ecs_server.calls_of("RunInstances")
    assert not {"SpotStrategy", "SpotPriceLimit"} & call.params.keys()
    assert call.params["InstanceChargeType"] == "PostPaid"
    [listed] = make_provider(ecs_server).list()
    assert listed.capacity_type is CapacityType.ON_DEMAND
    assert listed.instance_id == inst.instance_id and listed.client_token == "launch-0001"
    assert listed.tags["team"] == "ml infra/zürich" and listed.tags[TAG_MANAGED] == "true"


def test_same_token_gives_back_the_same_instance(ecs_server: Any, aliyun_credentials: Any) -> None:
    first = make_provider(ecs_server).create(request(token="tok-a"))
    # a restarted controller (a new provider object) asks again with the same token
    again = make_provider(ecs_server).create(request(token="tok-a"))

    assert isinstance(first, Instance) and isinstance(again, Instance)
    assert again.instance_id == first.instance_id
    assert len(ecs_server.instances) == 1
    assert len(ecs_server.calls_of("RunInstances")) == 1
    other = make_provider(ecs_server).create(request(token="tok-b"))
    assert isinstance(other, Instance) and other.instance_id != first.instance_id


def test_a_token_that_launched_elsewhere_never_launches_twice(
    ecs_server: Any, aliyun_credentials: Any
) -> None:
    """Crash after a launch in pool two, then pool one has stock again and DescribeInstances lags:
    ECS answers IdempotentParameterMismatch for the same token in pool one; the provider must
    not fall through to another launch."""
    ecs_server.stock_out[(A10, "cn-hangzhou-h")] = "OperationDenied.NoStock"
    req = request(token="tok-crash", zones=("cn-hangzhou-h", "cn-hangzhou-i"))
    first = make_provider(ecs_server).create(req)
    assert isinstance(first, Instance) and first.zone == "cn-hangzhou-i"
    del ecs_server.stock_out[(A10, "cn-hangzhou-h")]

    # the restarted controller's first lookup misses it; by the second it shows
    ecs_server.hidden, ecs_server.lag_calls = {first.instance_id}, 1
    again = make_provider(ecs_server).create(req)
    assert isinstance(again, Instance) and again.instance_id == first.instance_id
    assert ecs_server.calls_of("RunInstances")[-1].code == "IdempotentParameterMismatch"
    assert list(ecs_server.instances) == [first.instance_id]

    # lagging longer than that: an error, still no second instance
    ecs_server.lag_calls = 10
    with pytest.raises(AliyunError, match="IdempotentParameterMismatch"):
        make_provider(ecs_server).create(req)
    assert list(ecs_server.instances) == [first.instance_id]


@pytest.mark.parametrize(
    "code", ["OperationDenied.NoStock", "InvalidResourceType.NotSupported", "Zone.NotOnSale"]
)
def test_stock_out_in_pool_one_launches_in_pool_two(
    ecs_server: Any, aliyun_credentials: Any, code: str
) -> None:
    ecs_server.stock_out[(A10, "cn-hangzhou-h")] = code
    inst = make_provider(ecs_server).create(request(zones=("cn-hangzhou-h", "cn-hangzhou-i")))

    assert isinstance(inst, Instance) and inst.zone == "cn-hangzhou-i"
    first, second = ecs_server.calls_of("RunInstances")
    assert (first.params["VSwitchId"], first.code) == ("vsw-hz-h", code)
    assert (second.params["VSwitchId"], second.code) == ("vsw-hz-i", None)
    assert second.params["ClientToken"] == first.params["ClientToken"] == "launch-0001"


def test_all_pools_out_is_a_capacity_shortage(ecs_server: Any, aliyun_credentials: Any) -> None:
    for t in (A10, T4):
        for z in ("cn-hangzhou-h", "cn-hangzhou-i"):
            ecs_server.stock_out[(t, z)] = "OperationDenied.NoStock"
    req = request(types=(A10, T4), zones=("cn-hangzhou-h", "cn-hangzhou-i", "cn-beijing-g"))
    out = make_provider(ecs_server).create(req)

    assert isinstance(out, CapacityShortage)
    assert out.pools == (
        (A10, "cn-hangzhou-h"),
        (A10, "cn-hangzhou-i"),
        (T4, "cn-hangzhou-h"),
        (T4, "cn-hangzhou-i"),
    )
    assert "OperationDenied.NoStock" in out.reason and "cn-beijing-g" in out.reason
    assert ecs_server.instances == {}


def test_price_limit_below_the_market_tries_the_next_pool(
    ecs_server: Any, aliyun_credentials: Any
) -> None:
    from datetime import UTC, datetime

    now = datetime.now(UTC)
    ecs_server.spot_prices[(A10, "cn-hangzhou-h")] = [(now, Decimal("7.5"))]
    ecs_server.spot_prices[(A10, "cn-hangzhou-i")] = [(now, Decimal("4.0"))]
    req = request(max_price=Decimal("6"), zones=("cn-hangzhou-h", "cn-hangzhou-i"))
    inst = make_provider(ecs_server).create(req)

    assert isinstance(inst, Instance) and inst.zone == "cn-hangzhou-i"
    first = ecs_server.calls_of("RunInstances")[0]
    assert first.code == "InvalidSpotPriceLimit.LowerThanPublicPrice"


def test_delete_and_list(ecs_server: Any, aliyun_credentials: Any) -> None:
    provider = make_provider(ecs_server)
    a = provider.create(request(token="t-a"))
    b = provider.create(request(token="t-b", capacity=CapacityType.ON_DEMAND))
    assert isinstance(a, Instance) and isinstance(b, Instance)
    assert {i.instance_id for i in provider.list()} == {a.instance_id, b.instance_id}

    provider.delete(a.instance_id)
    [call] = ecs_server.calls_of("DeleteInstances")
    assert call.params["InstanceId.1"] == a.instance_id
    assert call.params["Force"].lower() == "true"
    assert [i.instance_id for i in provider.list()] == [b.instance_id]

    provider.delete(a.instance_id)  # already gone: not an error
    assert ecs_server.calls_of("DeleteInstances")[-1].code == "InvalidInstanceId.NotFound"
    assert [i.instance_id for i in provider.list()] == [b.instance_id]


def test_list_follows_next_token_and_skips_unmanaged(
    ecs_server: Any, aliyun_credentials: Any
) -> None:
    provider = make_provider(ecs_server, page_size=2)
    launched = [provider.create(request(token=f"t-{n}")) for n in range(5)]
    made = {i.instance_id for i in launched if isinstance(i, Instance)}
    # someone else's machine in the same account: no gpufleet tags
    ecs_server.instances["i-notours"] = type(next(iter(ecs_server.instances.values())))(
        instance_id="i-notours",
        instance_type=A10,
        zone="cn-hangzhou-h",
        vswitch="vsw-hz-h",
        spot_strategy="NoSpot",
        spot_price_limit=0.0,
        tags={"team": "other"},
        created=next(iter(ecs_server.instances.values())).created,
    )
    ecs_server.calls.clear()

    listed = provider.list()

    assert {i.instance_id for i in listed} == made and len(listed) == 5
    calls = ecs_server.calls_of("DescribeInstances")
    assert len(calls) == 3
    assert [bool(c.params.get("NextToken")) for c in calls] == [False, True, True]
    assert all(c.params["MaxResults"] == "2" for c in calls)
    assert all(tags_sent(c.params) == {TAG_MANAGED: "true"} for c in calls)


def test_offerings(ecs_server: Any, aliyun_credentials: Any) -> None:
    from datetime import UTC, datetime, timedelta

    now = datetime.now(UTC)
    ecs_server.spot_prices[(A10, "cn-hangzhou-h")] = [
        (now - timedelta(minutes=50), Decimal("3.10")),
        (now - timedelta(minutes=30), Decimal("3.30")),
        (now - timedelta(minutes=10), Decimal("2.95")),  # latest: on the second page
    ]
    ecs_server.spot_prices[(A10, "cn-hangzhou-i")] = [(now - timedelta(hours=9), Decimal("1"))]
    provider = make_provider(ecs_server, instance_types=(A10,))

    offers = {(o.zone, o.capacity_type): o for o in provider.offerings()}

    catalog_price = default_instance_catalog()[A10].price_per_hour
    assert len(offers) == 6
    spot_h = offers[("cn-hangzhou-h", CapacityType.SPOT)]
    assert spot_h.price_per_hour == Decimal("2.95") and spot_h.available
    # older than the 3-hour window asked for: no current price, not offered
    assert not offers[("cn-hangzhou-i", CapacityType.SPOT)].available
    assert not offers[("cn-hangzhou-j", CapacityType.SPOT)].available
    for zone in ZONES:
        od = offers[(zone, CapacityType.ON_DEMAND)]
        assert od.price_per_hour == catalog_price and od.available
    # one query per type for all zones, paged: h's three points, then i's old one (filtered out
    # by StartTime on the server)
    calls = ecs_server.calls_of("DescribeSpotPriceHistory")
    assert [c.params.get("Offset") for c in calls] == [None, "2"]
    assert all("ZoneId" not in c.params and c.params["InstanceType"] == A10 for c in calls)


def test_interruptions_from_the_recycling_lock(ecs_server: Any, aliyun_credentials: Any) -> None:
    provider = make_provider(ecs_server)
    a = provider.create(request(token="t-a"))
    b = provider.create(request(token="t-b"))
    assert isinstance(a, Instance) and isinstance(b, Instance)
    assert provider.interruptions() == []

    ecs_server.reclaim(a.instance_id)
    [event] = provider.interruptions()

    assert event.instance_id == a.instance_id
    assert event.kind is InterruptionKind.SPOT_INTERRUPTION
    provider.acknowledge(event)  # a no-op: the event stays until the instance is gone
    assert [e.instance_id for e in provider.interruptions()] == [a.instance_id]

    ecs_server.instances[b.instance_id].status = "Stopped"  # reclaimed in stop mode
    kinds = {e.instance_id: e.kind for e in provider.interruptions()}
    assert kinds == {
        a.instance_id: InterruptionKind.SPOT_INTERRUPTION,
        b.instance_id: InterruptionKind.STATE_CHANGE,
    }


def test_throttling_is_retried_a_bounded_number_of_times(
    ecs_server: Any, aliyun_credentials: Any
) -> None:
    throttled = EcsError(400, "Throttling.User", "Request was denied due to flow control.")
    ecs_server.inject = [("RunInstances", throttled), ("RunInstances", throttled)]
    inst = make_provider(ecs_server, max_attempts=3).create(request())
    assert isinstance(inst, Instance)
    assert [c.code for c in ecs_server.calls_of("RunInstances")] == [
        "Throttling.User",
        "Throttling.User",
        None,
    ]

    ecs_server.calls.clear()
    ecs_server.inject = [("DescribeInstances", throttled)] * 5
    with pytest.raises(AliyunError, match=r"Throttling\.User"):
        make_provider(ecs_server, max_attempts=3).list()
    assert len(ecs_server.calls_of("DescribeInstances")) == 3


def test_wrong_secret_is_a_credentials_error(ecs_server: Any, aliyun_credentials: Any) -> None:
    aliyun_credentials.set("LTAI5tGpufleetTestKey", "not-the-secret")
    with pytest.raises(CredentialsError) as err:
        make_provider(ecs_server).list()

    assert ecs_server.rejected == ["SignatureDoesNotMatch"]
    assert ecs_server.calls == []  # refused before any action ran
    message = str(err.value)
    assert "SignatureDoesNotMatch" in message and "\n" not in message
    assert "not-the-secret" not in message
    # the right secret through the same path is accepted: the check is real, not a blanket no
    aliyun_credentials.set("LTAI5tGpufleetTestKey", "gpufleet-test-secret-0123456789")
    assert make_provider(ecs_server).list() == []


def test_unknown_key_id_is_a_credentials_error(ecs_server: Any, aliyun_credentials: Any) -> None:
    aliyun_credentials.set("LTAI5tNobody", "whatever")
    with pytest.raises(CredentialsError, match=r"InvalidAccessKeyId\.NotFound"):
        make_provider(ecs_server).create(request())
    assert ecs_server.rejected == ["InvalidAccessKeyId.NotFound"]
    assert ecs_server.instances == {}


def _signed_request(
    server: Any, query: dict[str, str], action: str = "DescribeInstances"
) -> tuple[str, dict[str, str]]:
    """A request signed by the SDK's own V3 signer (not by the server's code)."""
    from alibabacloud_tea_openapi.utils import Utils
    from darabonba.request import DaraRequest

    req = DaraRequest()
    req.method = "POST"
    req.pathname = "/"
    req.query = dict(query)
    req.headers = {
        "host": server.endpoint,
        "x-acs-version": "2014-05-26",
        "x-acs-action": action,
        "x-acs-date": Utils.get_timestamp(),
        "x-acs-signature-nonce": Utils.get_nonce(),
        "accept": "application/json",
        "x-acs-content-sha256": Utils.hash(b"", "ACS3-HMAC-SHA256").hex(),
    }
    payload = req.headers["x-acs-content-sha256"]
    req.headers["Authorization"] = Utils.get_authorization(
        req, "ACS3-HMAC-SHA256", payload, "LTAI5tGpufleetTestKey", "gpufleet-test-secret-0123456789"
    )
    from urllib.parse import urlencode

    return "/?" + urlencode(query), req.headers


def _post(server: Any, target: str, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    import json

    host, port = server.endpoint.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        conn.request("POST", target, body=b"", headers=headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def test_server_checks_the_signature_over_every_parameter(ecs_server: Any) -> None:
    query = {"RegionId": "cn-hangzhou", "MaxResults": "10", "Tag.1.Key": "team"}
    target, headers = _signed_request(ecs_server, query)
    assert _post(ecs_server, target, headers)[0] == 200

    target, headers = _signed_request(ecs_server, query)
    tampered = target.replace("MaxResults=10", "MaxResults=11")
    status, body = _post(ecs_server, tampered, headers)
    assert (status, body["Code"]) == (400, "SignatureDoesNotMatch")

    target, headers = _signed_request(ecs_server, query)
    headers["x-acs-action"] = "DeleteInstances"  # a signed header changed
    assert _post(ecs_server, target, headers)[1]["Code"] == "SignatureDoesNotMatch"

    target, headers = _signed_request(ecs_server, query)
    assert _post(ecs_server, target, headers)[0] == 200
    assert _post(ecs_server, target, headers)[1]["Code"] == "SignatureNonceUsed"  # replay


def test_server_wants_the_documented_parameters(ecs_server: Any) -> None:
    target, headers = _signed_request(ecs_server, {"MaxResults": "10"})
    status, body = _post(ecs_server, target, headers)
    assert (status, body["Code"]) == (400, "MissingParameter") and "RegionId" in body["Message"]


RUN_OK = {
    "RegionId": "cn-hangzhou",
    "InstanceType": A10,
    "VSwitchId": "vsw-hz-h",
    "ImageId": "m-gpu-image",
    "SecurityGroupId": "sg-gpufleet",
    "Amount": "1",
    "ClientToken": "raw-1",
}


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"ClientToken": None}, "MissingParameter"),
        ({"SpotPriceLimit": "3.5"}, "InvalidParameter.SpotPriceLimit"),  # without the strategy
        ({"SpotStrategy": "SpotWithPriceLimit"}, "MissingParameter"),  # without the limit
        (
            {"SpotStrategy": "SpotWithPriceLimit", "SpotPriceLimit": "3.1234"},
            "InvalidParameter.SpotPriceLimit",
        ),
        ({"SpotStrategy": "Cheap"}, "InvalidSpotStrategy"),
        ({"Tag.1.Value": "x"}, "InvalidTagKey.Malformed"),
        ({"Tag.1.Key": "aliyun:x", "Tag.1.Value": "x"}, "InvalidTagKey.Malformed"),
        ({"Amount": "0"}, "InvalidParameter.Amount"),
        ({"ZoneId": "cn-hangzhou-i"}, "InvalidParameter.ZoneId"),  # not the vSwitch's zone
        ({"SpotPriceLimt": "3"}, "InvalidParameter"),  # misspelt: refused, not ignored
    ],
)
def test_server_checks_run_instances_parameters(
    ecs_server: Any, change: dict[str, str | None], code: str
) -> None:
    query = {**RUN_OK, **change}
    query = {k: v for k, v in query.items() if v is not None}
    status, body = _post(ecs_server, *_signed_request(ecs_server, query, "RunInstances"))
    assert (status, body["Code"]) == (400, code), body
    assert ecs_server.instances == {}
    status, body = _post(ecs_server, *_signed_request(ecs_server, RUN_OK, "RunInstances"))
    assert status == 200 and len(body["InstanceIdSets"]["InstanceIdSet"]) == 1


def test_missing_credentials_is_one_line_and_exit_2(ecs_server: Any, tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import typer
        from gpufleet.cli_app import friendly_errors
        from gpufleet.cloud.aliyun import AliyunConfig, AliyunProvider

        def main() -> None:
            cfg = AliyunConfig(
                region="cn-hangzhou", zones={{"cn-hangzhou-h": "vsw-hz-h"}},
                image_id="m-gpu-image", security_group_id="sg-gpufleet",
                endpoint="{ecs_server.endpoint}", protocol="http",
            )
            AliyunProvider(cfg).list()

        typer.run(friendly_errors(main))
        """
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),  # no ~/.aliyun/config.json, no ~/.alibabacloud/credentials.ini
        "ALIBABA_CLOUD_ECS_METADATA_DISABLED": "true",  # not on ECS: no RAM role to ask
        "COLUMNS": "300",
    }
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )

    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert "no Aliyun credential found" in lines[0] and "ALIBABA_CLOUD_ACCESS_KEY_ID" in lines[0]
    assert ecs_server.calls == [] and ecs_server.rejected == []  # nothing was sent


def test_config_errors_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="launch_template_id, or both"):
        AliyunConfig(region="cn-hangzhou", zones=ZONES, image_id="m-gpu-image")
    path = tmp_path / "aliyun.yaml"
    path.write_text(
        "region: cn-hangzhou\nzones: {cn-beijing-g: vsw-1}\nlaunch_template_id: lt-abc\n"
    )
    with pytest.raises(InputError, match="is not in region") as err:
        load_aliyun_config(path)
    assert str(path) in str(err.value)
    path.write_text("region: cn-hangzhou\nzones: {cn-hangzhou-h: vsw-1}\nlaunch_template: x\n")
    with pytest.raises(InputError) as err:
        load_aliyun_config(path)
    assert err.value.field == "launch_template"
    path.write_text(
        "region: cn-hangzhou\nzones: {cn-hangzhou-h: vsw-1}\nlaunch_template_id: lt-a\n"
    )
    assert load_aliyun_config(path).launch_template_id == "lt-a"


def test_unknown_instance_type_in_config_is_an_input_error(aliyun_credentials: Any) -> None:
    cfg = AliyunConfig(
        region="cn-hangzhou",
        zones=ZONES,
        launch_template_id="lt-abc",
        instance_types=("p4d.24xlarge",),
    )
    with pytest.raises(InputError) as err:
        AliyunProvider(cfg)
    assert err.value.field == "instance_types"
