"""The AWS provider: EC2 Fleet launches, tag-scoped listing, spot prices and the SQS queue of
interruption events, on boto3.

* ``create`` is one ``CreateFleet`` of type ``instant`` for one instance, with every acceptable
  (instance type × zone) of the request as an override of the launch template, so EC2 picks the
  pool (``price-capacity-optimized`` for spot, ``lowest-price`` on demand) — the way Karpenter
  launches. It is idempotent twice over: the fleet's ``ClientToken`` is the request's token, and
  before asking, an instance already tagged with that token is looked up and returned (EC2 forgets
  a client token after a while; the tag does not).
* ``list`` sees only instances tagged ``gpufleet.io/managed=true``: a shared account's other
  machines are never listed, so never deleted.
* ``interruptions`` reads the queue an EventBridge rule fills (see :mod:`gpufleet.cloud.aws_events`)
  and ``acknowledge`` deletes the message once the controller has recorded the interruption.

Credentials come only from boto3's standard chain (environment, shared profile, instance role);
this module never reads, stores nor logs one. Every call has a bounded retry (botocore's standard
mode, ``AwsConfig.max_attempts`` attempts in all) and bounded timeouts.
"""

from __future__ import annotations

import builtins
import logging
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
)

from gpufleet.catalog.instances import InstanceCatalog, default_instance_catalog
from gpufleet.cloud.aws_config import AwsConfig
from gpufleet.cloud.aws_events import UnreadableEvent, parse_event
from gpufleet.cloud.provider import (
    TAG_MANAGED,
    TAG_TOKEN,
    CapacityShortage,
    CredentialsError,
    Instance,
    InstanceState,
    Interruption,
    LaunchRequest,
    Offering,
)
from gpufleet.decisions import CapacityType
from gpufleet.errors import InputError

log = logging.getLogger(__name__)

T = TypeVar("T")

# Error codes that mean "this credential is no good", whatever the service: one line, exit 2.
_CREDENTIAL_CODES = frozenset(
    {
        "AuthFailure",
        "UnrecognizedClientException",
        "InvalidClientTokenId",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "ExpiredTokenException",
        "RequestExpired",
        "InvalidToken",
    }
)
# The credential works but its policy does not allow the call.
_PERMISSION_CODES = frozenset({"UnauthorizedOperation", "AccessDenied", "AccessDeniedException"})
# CreateFleet per-pool errors that mean "no capacity here now": an expected no, so data.
# (Karpenter's list of unfulfillable-capacity codes.)
_CAPACITY_CODES = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientCapacity",
        "InsufficientHostCapacity",
        "InsufficientReservedInstanceCapacity",
        "MaxSpotInstanceCountExceeded",
        "SpotMaxPriceTooLow",
        "UnfulfillableCapacity",
        "Unsupported",
        "VcpuLimitExceeded",
        "InsufficientFreeAddressesInSubnet",
        "InstanceLimitExceeded",
    }
)
_LIVE_STATES = ("pending", "running", "shutting-down", "stopping")
_STATE = {
    "pending": InstanceState.PENDING,
    "running": InstanceState.RUNNING,
    "shutting-down": InstanceState.TERMINATING,
    "stopping": InstanceState.TERMINATING,
    "stopped": InstanceState.TERMINATED,
    "terminated": InstanceState.TERMINATED,
}


class AwsApiError(RuntimeError):
    """An AWS call failed for a reason that is neither a credential problem nor an expected
    "no capacity" (an infrastructure fault or a bug): the controller retries its cycle later.
    ``code`` is AWS's error code ("" when the failure had none)."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


def provider_id(zone: str, instance_id: str) -> str:
    """What the Node's ``spec.providerID`` carries on AWS (the cloud-provider-aws format)."""
    return f"aws:///{zone}/{instance_id}"


class AwsProvider:
    """The :class:`~gpufleet.cloud.provider.CloudProvider` for EC2 (+ SQS for interruptions)."""

    name = "aws"

    def __init__(
        self,
        config: AwsConfig,
        *,
        catalog: InstanceCatalog | None = None,
        session: boto3.session.Session | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.catalog = catalog or default_instance_catalog()
        self._clock = clock
        aws_types = {t.name for t in self.catalog.by_provider("aws")}
        for i, name in enumerate(config.instance_types):
            if name not in aws_types:
                raise InputError(
                    f"{name!r} is not an AWS instance type of the catalog",
                    field=f"instance_types.{i}",
                )
        # The standard credential chain only: no key is ever passed in.
        session = session or boto3.session.Session(region_name=config.region)
        # total_max_attempts counts the first try (botocore's max_attempts would not)
        retries = {"total_max_attempts": config.max_attempts, "mode": "standard"}

        def client(service: str, read_timeout_s: float) -> Any:
            return session.client(
                service,
                region_name=config.region,
                endpoint_url=config.endpoint_url,
                config=Config(
                    retries=retries,
                    connect_timeout=config.connect_timeout_s,
                    read_timeout=read_timeout_s,
                ),
            )

        self.ec2 = client("ec2", config.read_timeout_s)
        # a long poll must not be cut by the read timeout
        self.sqs = client("sqs", max(config.read_timeout_s, config.wait_time_s + 10))
        # receipt handle -> interruptions of that message not yet acknowledged (an AWS Health
        # event may name several instances; its message goes only when all are recorded)
        self._unacked: dict[str, int] = {}

    # -- errors ---------------------------------------------------------------------------------

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """Run one API call, turning credential and permission failures into CredentialsError
        (one line naming the call, never the credential) and other API errors into AwsApiError."""
        try:
            return fn()
        except (NoCredentialsError, PartialCredentialsError):
            raise CredentialsError(
                f"AWS {what}: no credentials found in the standard chain (AWS_ACCESS_KEY_ID/"
                "AWS_SECRET_ACCESS_KEY, AWS_PROFILE / shared credentials file, instance role)",
                field="credentials",
            ) from None
        except NoRegionError:
            raise InputError(f"AWS {what}: no region", field="region") from None
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in _CREDENTIAL_CODES:
                raise CredentialsError(
                    f"AWS {what}: the credential from the standard chain was rejected ({code})",
                    field="credentials",
                ) from None
            if code in _PERMISSION_CODES:
                raise CredentialsError(
                    f"AWS {what}: the credential is not allowed to make this call ({code}); "
                    "see docs/cloud.md for the IAM policy",
                    field="credentials",
                ) from None
            raise AwsApiError(f"AWS {what} failed: {code or exc}", code) from exc
        except BotoCoreError as exc:
            # no answer at all (connection refused, timeout after the bounded retries)
            raise AwsApiError(f"AWS {what} failed: {exc.__class__.__name__}: {exc}") from exc

    def _pages(self, client: Any, op: str, key: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
        """Every item under ``key`` across the pages of ``op`` (botocore's paginator)."""
        pages = client.get_paginator(op).paginate(**kwargs)
        name = "".join(w.title() for w in op.split("_"))  # the API's name, for messages
        it = iter(pages)
        while True:
            page = self._call(name, lambda: next(it, None))
            if page is None:
                return
            yield from page.get(key, [])

    # -- instances ------------------------------------------------------------------------------

    def _instance(self, raw: dict[str, Any]) -> Instance:
        tags = {t["Key"]: t["Value"] for t in raw.get("Tags", [])}
        zone = raw.get("Placement", {}).get("AvailabilityZone", "")
        launched = raw.get("LaunchTime")
        spot = raw.get("InstanceLifecycle") == "spot"
        return Instance(
            instance_id=raw["InstanceId"],
            provider_id=provider_id(zone, raw["InstanceId"]),
            instance_type=raw.get("InstanceType", ""),
            zone=zone,
            capacity_type=CapacityType.SPOT if spot else CapacityType.ON_DEMAND,
            state=_STATE.get(raw.get("State", {}).get("Name", ""), InstanceState.PENDING),
            launched_at=launched.timestamp() if isinstance(launched, datetime) else 0.0,
            client_token=tags.get(TAG_TOKEN, ""),
            tags=tags,
        )

    def _describe(self, filters: list[dict[str, Any]]) -> list[Instance]:
        out: list[Instance] = []
        for reservation in self._pages(
            self.ec2,
            "describe_instances",
            "Reservations",
            Filters=filters,
            PaginationConfig={"PageSize": self.config.page_size},
        ):
            out.extend(self._instance(raw) for raw in reservation.get("Instances", []))
        return out

    def list(self) -> list[Instance]:
        """The instances gpufleet launched that are alive or going (pending, running, stopping,
        shutting-down); terminated ones are history, not fleet."""
        return self._describe(
            [
                {"Name": f"tag:{TAG_MANAGED}", "Values": ["true"]},
                {"Name": "instance-state-name", "Values": list(_LIVE_STATES)},
            ]
        )

    def find_by_token(self, token: str) -> Instance | None:
        """The instance launched for ``token``, if any (a live one first, else the latest gone)."""
        found = self._describe(
            [
                {"Name": f"tag:{TAG_MANAGED}", "Values": ["true"]},
                {"Name": f"tag:{TAG_TOKEN}", "Values": [token]},
            ]
        )
        if not found:
            return None
        found.sort(key=lambda i: (i.state != InstanceState.TERMINATED, i.launched_at))
        return found[-1]

    def _overrides(
        self, request: LaunchRequest
    ) -> tuple[builtins.list[dict[str, Any]], builtins.list[tuple[str, str]]]:
        overrides: list[dict[str, Any]] = []
        pools: list[tuple[str, str]] = []
        for itype in request.instance_types:
            for zone in request.zones:
                subnet = self.config.zones.get(zone)
                if subnet is None:
                    continue
                o: dict[str, Any] = {"InstanceType": itype, "SubnetId": subnet}
                if request.capacity_type is CapacityType.SPOT and request.max_price is not None:
                    o["MaxPrice"] = str(request.max_price)
                overrides.append(o)
                pools.append((itype, zone))
        return overrides, pools

    def create(self, request: LaunchRequest) -> Instance | CapacityShortage:
        """Launch one instance in the best pool of the request, or say why none could."""
        if not request.client_token:
            raise InputError("a launch needs a client token", field="client_token")
        existing = self.find_by_token(request.client_token)
        if existing is not None:
            return existing
        overrides, pools = self._overrides(request)
        if not overrides:
            return CapacityShortage(
                request,
                "none of the request's zones has a subnet in the AWS provider config "
                f"(configured: {', '.join(self.config.zones)})",
                (),
            )
        spot = request.capacity_type is CapacityType.SPOT
        tags = {**request.tags, TAG_MANAGED: "true", TAG_TOKEN: request.client_token}
        kwargs: dict[str, Any] = {
            "Type": "instant",
            "ClientToken": request.client_token,
            "LaunchTemplateConfigs": [
                {
                    "LaunchTemplateSpecification": self.config.launch_template.spec(),
                    "Overrides": overrides,
                }
            ],
            "TargetCapacitySpecification": {
                "TotalTargetCapacity": 1,
                "DefaultTargetCapacityType": "spot" if spot else "on-demand",
            },
            "TagSpecifications": [
                {
                    "ResourceType": "instance",
                    "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
                }
            ],
        }
        if spot:
            kwargs["SpotOptions"] = {"AllocationStrategy": "price-capacity-optimized"}
            if request.max_price is not None:
                kwargs["SpotOptions"]["MaxTotalPrice"] = str(request.max_price)
        else:
            kwargs["OnDemandOptions"] = {"AllocationStrategy": "lowest-price"}
        resp = self._call("CreateFleet", lambda: self.ec2.create_fleet(**kwargs))
        return self._launched(request, resp, pools)

    def _launched(
        self, request: LaunchRequest, resp: dict[str, Any], pools: builtins.list[tuple[str, str]]
    ) -> Instance | CapacityShortage:
        """CreateFleet's answer → the instance, or a CapacityShortage when every pool said no."""
        zone_of = self.config.zone_of_subnet
        for group in resp.get("Instances", []):
            ids = group.get("InstanceIds") or []
            if not ids:
                continue
            over = group.get("LaunchTemplateAndOverrides", {}).get("Overrides", {})
            zone = over.get("AvailabilityZone") or zone_of.get(over.get("SubnetId", ""), "")
            lifecycle = group.get("Lifecycle", "spot" if request.capacity_type == "spot" else "")
            return Instance(
                instance_id=ids[0],
                provider_id=provider_id(zone, ids[0]),
                instance_type=group.get("InstanceType") or over.get("InstanceType", ""),
                zone=zone,
                capacity_type=CapacityType.SPOT if lifecycle == "spot" else CapacityType.ON_DEMAND,
                state=InstanceState.PENDING,
                launched_at=self._clock(),
                client_token=request.client_token,
                tags={**request.tags, TAG_MANAGED: "true", TAG_TOKEN: request.client_token},
            )
        errors = resp.get("Errors", [])
        codes = sorted({str(e.get("ErrorCode", "")) for e in errors} - {""})
        other = [c for c in codes if c not in _CAPACITY_CODES]
        if other:
            first = next(e for e in errors if e.get("ErrorCode") == other[0])
            raise AwsApiError(
                f"AWS CreateFleet launched nothing: {other[0]}: "
                f"{str(first.get('ErrorMessage', ''))[:200]}",
                other[0],
            )
        tried: list[tuple[str, str]] = []
        for e in errors:
            over = e.get("LaunchTemplateAndOverrides", {}).get("Overrides", {})
            zone = over.get("AvailabilityZone") or zone_of.get(over.get("SubnetId", ""), "")
            pool = (str(over.get("InstanceType", "")), zone)
            if pool[0] and pool not in tried:
                tried.append(pool)
        reason = ", ".join(codes) if codes else "EC2 Fleet launched no instance and gave no error"
        return CapacityShortage(request, reason, tuple(tried or pools))

    def delete(self, instance_id: str) -> None:
        """Terminate; an instance that is unknown, gone or going is not an error."""
        try:
            self._call(
                "TerminateInstances",
                lambda: self.ec2.terminate_instances(InstanceIds=[instance_id]),
            )
        except AwsApiError as exc:
            if exc.code == "InvalidInstanceID.NotFound":
                return
            raise

    # -- prices ---------------------------------------------------------------------------------

    def offerings(self) -> builtins.list[Offering]:
        """Spot: the price now of each configured type × zone (DescribeSpotPriceHistory from now,
        the latest point per pool; a pool without a price is not offered). On demand: the
        catalog's list price, in every configured zone."""
        types = [t for t in self.config.instance_types if t in self.catalog.types]
        zones = set(self.config.zones)
        latest: dict[tuple[str, str], tuple[datetime, Decimal]] = {}
        now = datetime.fromtimestamp(self._clock(), UTC)
        for point in self._pages(
            self.ec2,
            "describe_spot_price_history",
            "SpotPriceHistory",
            InstanceTypes=types,
            ProductDescriptions=["Linux/UNIX"],
            StartTime=now,
        ):
            key = (point.get("InstanceType", ""), point.get("AvailabilityZone", ""))
            if key[1] not in zones or key[0] not in types:
                continue
            try:
                price = Decimal(str(point["SpotPrice"]))
            except (KeyError, InvalidOperation):
                continue
            stamp = point.get("Timestamp") or datetime.min.replace(tzinfo=UTC)
            if key not in latest or stamp > latest[key][0]:
                latest[key] = (stamp, price)
        out = [
            Offering(itype, zone, CapacityType.SPOT, price)
            for (itype, zone), (_, price) in sorted(latest.items())
        ]
        for itype in types:
            for zone in sorted(zones):
                out.append(
                    Offering(
                        itype, zone, CapacityType.ON_DEMAND, self.catalog[itype].price_per_hour
                    )
                )
        return out

    # -- interruptions --------------------------------------------------------------------------

    def interruptions(self) -> builtins.list[Interruption]:
        """One bounded receive from the queue. Events that are not a loss, and messages that
        cannot be read (logged in one line), are deleted at once: a poison message must not come
        back forever. The others stay in the queue until acknowledged."""
        if self.config.queue_url is None:
            return []
        queue = self.config.queue_url
        resp = self._call(
            "ReceiveMessage",
            lambda: self.sqs.receive_message(
                QueueUrl=queue,
                MaxNumberOfMessages=self.config.max_messages,
                WaitTimeSeconds=self.config.wait_time_s,
            ),
        )
        out: list[Interruption] = []
        for msg in resp.get("Messages", []):
            receipt = msg.get("ReceiptHandle", "")
            try:
                events = parse_event(msg.get("Body", ""), receipt)
            except UnreadableEvent as exc:
                log.warning(
                    "dropping unreadable interruption message %s: %s",
                    msg.get("MessageId", "?"),
                    exc,
                )
                events = []
            if not events:
                self._delete_message(receipt)
                continue
            self._unacked[receipt] = len(events)
            out.extend(events)
        return out

    def acknowledge(self, event: Interruption) -> None:
        """Delete the event's message once every interruption it carried is acknowledged."""
        if event.receipt is None:
            return
        left = self._unacked.get(event.receipt, 1) - 1
        if left > 0:
            self._unacked[event.receipt] = left
            return
        self._unacked.pop(event.receipt, None)
        self._delete_message(event.receipt)

    def _delete_message(self, receipt: str) -> None:
        if self.config.queue_url is None or not receipt:
            return
        queue = self.config.queue_url
        try:
            self._call(
                "DeleteMessage",
                lambda: self.sqs.delete_message(QueueUrl=queue, ReceiptHandle=receipt),
            )
        except AwsApiError as exc:
            # an expired receipt: the message is visible again and will be handled again
            if exc.code != "ReceiptHandleIsInvalid":
                raise
