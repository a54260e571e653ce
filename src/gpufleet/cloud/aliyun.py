"""Aliyun (Alibaba Cloud ECS) behind the provider contract, on the official SDK.

``alibabacloud_ecs20140526`` (the generated ECS client; it signs every call with ACS3-HMAC-SHA256)
with the credential from ``alibabacloud_credentials``' default chain: the environment
(``ALIBABA_CLOUD_ACCESS_KEY_ID`` / ``ALIBABA_CLOUD_ACCESS_KEY_SECRET``), the CLI profile
(``~/.aliyun/config.json``), the credentials file (``~/.alibabacloud/credentials.ini``), the ECS
RAM role from instance metadata. gpufleet never takes a key in its own config and never logs one.

How each contract rule maps onto ECS:

* ``create`` → ``RunInstances`` (``Amount=1``, ``ClientToken`` = the request's token, the
  ``TAG_MANAGED`` / ``TAG_TOKEN`` tags). ECS has no EC2-Fleet-style multi-pool launch, so the
  provider tries the request's pools (type × zone, best first) one at a time; a stock-out answer
  moves on to the next pool, and no pool left is a :class:`CapacityShortage`. Before launching it
  looks the token's tag up, so a controller that crashed after the launch gets its instance back.
* Spot: ``SpotStrategy=SpotWithPriceLimit`` with ``SpotPriceLimit`` when the strategy set a
  maximum (the field report's ``SpotBidAgent``), else ``SpotAsPriceGo`` (pay the market price,
  capped by ECS at the on-demand price). On-demand sends no spot field (``PostPaid``).
* ``list`` → ``DescribeInstances`` filtered on ``TAG_MANAGED``, paginated with ``NextToken``.
* ``offerings`` → ``DescribeSpotPriceHistory`` (latest point per type × zone) for spot; the
  on-demand price comes from the catalog (CNY per hour).
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from decimal import ROUND_DOWN, Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpufleet.catalog.instances import InstanceCatalog, default_instance_catalog
from gpufleet.catalog.yamlfile import load_model, read_yaml
from gpufleet.cloud.provider import (
    TAG_MANAGED,
    TAG_TOKEN,
    CapacityShortage,
    CredentialsError,
    Instance,
    InstanceState,
    Interruption,
    InterruptionKind,
    LaunchRequest,
    Offering,
)
from gpufleet.decisions import CapacityType
from gpufleet.errors import InputError

NAME = "aliyun"

# RunInstances answers that mean "not this pool, now": try the next (type, zone).
STOCK_OUT_CODES = frozenset(
    {
        "OperationDenied.NoStock",
        "InvalidResourceType.NotSupported",
        "Zone.NotOnSale",
        "InvalidZoneId.NotOnSale",
        "InvalidInstanceType.ZoneNotSupported",
        "InvalidInstanceType.NotSupported",
        "ResourceNotAvailable",
        # the spot price limit is below the pool's current price: "a price over the limit"
        "InvalidSpotPriceLimit.LowerThanPublicPrice",
    }
)
# The credential is missing, unknown or does not sign correctly: the user must fix it.
CREDENTIAL_CODES = frozenset(
    {
        "InvalidAccessKeyId",
        "InvalidAccessKeyId.NotFound",
        "InvalidAccessKeyId.Inactive",
        "SignatureDoesNotMatch",
        "IncompleteSignature",
        "InvalidSecurityToken.Expired",
        "InvalidSecurityToken.Malformed",
        "InvalidSecurityToken.MismatchWithAccessKey",
        "InvalidCredentials",
    }
)
# Transient: safe to retry (RunInstances too, because of the ClientToken).
RETRY_CODES = frozenset(
    {"Throttling", "Throttling.User", "Throttling.Api", "ServiceUnavailable", "InternalError"}
)
GONE_CODES = frozenset({"InvalidInstanceId.NotFound", "InvalidInstance.NotFound"})

CHAIN = (
    "env ALIBABA_CLOUD_ACCESS_KEY_ID/ALIBABA_CLOUD_ACCESS_KEY_SECRET, ~/.aliyun/config.json, "
    "~/.alibabacloud/credentials.ini, ECS RAM role"
)

_STATE = {
    "Pending": InstanceState.PENDING,
    "Starting": InstanceState.PENDING,
    "Running": InstanceState.RUNNING,
    "Stopping": InstanceState.TERMINATING,
    "Stopped": InstanceState.TERMINATING,
    "Deleted": InstanceState.TERMINATED,
}


class AliyunConfig(BaseModel):
    """Where and how to launch. Either a launch template, or an image and a security group.

    ``zones`` maps each zone gpufleet may use to the VPC vSwitch in it (ECS picks the zone from the
    vSwitch). ``endpoint`` overrides ``ecs.<region>.aliyuncs.com`` (a VPC endpoint, or the
    loopback server in tests); ``protocol`` is ``https`` except against such a test server.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    region: str = Field(pattern=r"^[a-z]{2,3}-[a-z0-9-]+$", description=(
        "The region, e.g. cn-hangzhou."))
    zones: dict[str, str] = Field(min_length=1, description=(
        "Each zone gpufleet may use → the VPC vSwitch in it (vsw-…)."))
    image_id: str | None = Field(default=None, description=(
        "The image instances boot (without a launch template)."))
    security_group_id: str | None = Field(default=None, pattern=r"^sg-[A-Za-z0-9]+$",
                                          description=(
        "The security group of the instances (without a launch template)."))
    launch_template_id: str | None = Field(default=None, pattern=r"^lt-[A-Za-z0-9]+$",
                                           description=(
        "The launch template every instance starts from."))
    launch_template_version: int | None = Field(default=None, ge=1, description=(
        "That template's version; null: its default version."))
    instance_types: tuple[str, ...] = Field(default=(), description=(
        "The instance types gpufleet may launch; empty: every one in the catalog."))
    endpoint: str | None = Field(default=None, pattern=r"^[A-Za-z0-9.-]+(:[0-9]{1,5})?$",
                                 description=(
        "Overrides ecs.<region>.aliyuncs.com (a VPC endpoint)."))
    protocol: Literal["https", "http"] = Field(default="https", description=(
        "https, except against a loopback test server."))
    max_attempts: int = Field(default=4, ge=1, le=10, description=(
        "Attempts per call, the first included."))
    timeout_s: float = Field(default=10.0, gt=0, le=120, description=(
        "Timeout per call, seconds."))
    page_size: int = Field(default=100, ge=1, le=100, description=(
        "DescribeInstances page size (ECS allows 1 to 100)."))

    @model_validator(mode="after")
    def _launch_source(self) -> AliyunConfig:
        if self.launch_template_id is None and (
            self.image_id is None or self.security_group_id is None
        ):
            raise ValueError("give launch_template_id, or both image_id and security_group_id")
        for zone, vswitch in self.zones.items():
            if not zone.startswith(self.region + "-"):
                raise ValueError(f"zone {zone!r} is not in region {self.region!r}")
            if not vswitch.startswith("vsw-"):
                raise ValueError(f"zone {zone!r}: expected a vSwitch id 'vsw-…', got {vswitch!r}")
        return self


def load_aliyun_config(path: Path) -> AliyunConfig:
    """The provider config from a YAML file; a defect is an InputError naming the field."""
    return load_model(AliyunConfig, read_yaml(path, "Aliyun provider config"), path)


class AliyunError(RuntimeError):
    """ECS refused a call for a reason that is neither a credential nor a stock-out."""

    def __init__(self, action: str, code: str, request_id: str | None) -> None:
        super().__init__(f"Aliyun ECS {action} failed: {code} (request id {request_id})")
        self.action = action
        self.code = code


def provider_id(region: str, instance_id: str) -> str:
    return f"alicloud://{region}.{instance_id}"


def parse_ecs_time(text: str | None) -> float:
    """ECS times are UTC ISO 8601 with or without seconds (``2026-12-03T10:04Z``)."""
    if not text:
        return 0.0
    for fmt in ("%Y-%m-%dT%H:%MZ", "%Y-%m-%dT%H:%M:%SZ"):
        try:
            return datetime.strptime(text, fmt).replace(tzinfo=UTC).timestamp()
        except ValueError:
            continue
    return 0.0


def _price_limit(value: Decimal) -> float:
    """ECS takes ``SpotPriceLimit`` to three decimals; round down so the cap is never raised."""
    try:
        limited = value.quantize(Decimal("0.001"), rounding=ROUND_DOWN)
    except InvalidOperation as exc:
        raise InputError(f"not a price: {value!r}", field="max_price") from exc
    if limited <= 0:
        raise InputError(f"must be > 0.001, got {value}", field="max_price")
    return float(limited)


class AliyunProvider:
    """The ECS provider. ``client`` is built from ``config`` and the default credential chain;
    ``sleep`` is the back-off between bounded retries (injected so tests do not wait)."""

    name = NAME

    def __init__(
        self,
        config: AliyunConfig,
        *,
        catalog: InstanceCatalog | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.catalog = catalog or default_instance_catalog()
        for t in config.instance_types:
            it = self.catalog[t] if t in self.catalog.types else None
            if it is None or it.provider != NAME:
                raise InputError(
                    f"{t!r} is not an Aliyun instance type of the catalog", field="instance_types"
                )
        self._sleep = sleep
        self._clock = clock
        self._client = _make_client(config)

    # -- create ----------------------------------------------------------------------------
    def create(self, request: LaunchRequest) -> Instance | CapacityShortage:
        token = request.client_token
        if not token or len(token) > 64 or not token.isascii():
            raise InputError(f"expected 1-64 ASCII characters, got {token!r}", field="client_token")
        existing = self._find_by_token(token)
        if existing is not None:
            return existing
        tried: list[tuple[str, str]] = []
        reasons: list[str] = []
        for itype in request.instance_types:
            for zone in request.zones:
                vswitch = self.config.zones.get(zone)
                if vswitch is None:
                    reasons.append(f"{zone}: no vSwitch configured")
                    continue
                tried.append((itype, zone))
                try:
                    instance_id = self._run_instance(request, itype, zone, vswitch)
                except AliyunError as exc:
                    if exc.code in STOCK_OUT_CODES:
                        reasons.append(f"{itype}@{zone}: {exc.code}")
                        continue
                    if exc.code == "IdempotentParameterMismatch":
                        # the token already launched in another pool (a crash hid the answer and
                        # the tag lookup above missed it): that instance, never a second one
                        existing = self._find_by_token(token)
                        if existing is not None:
                            return existing
                    raise
                tags = {**request.tags, TAG_MANAGED: "true", TAG_TOKEN: token}
                return Instance(
                    instance_id=instance_id,
                    provider_id=provider_id(self.config.region, instance_id),
                    instance_type=itype,
                    zone=zone,
                    capacity_type=request.capacity_type,
                    state=InstanceState.PENDING,
                    launched_at=self._clock(),
                    client_token=token,
                    tags=tags,
                )
        return CapacityShortage(
            request=request,
            reason="; ".join(reasons) or "no pool in the request",
            pools=tuple(tried),
        )

    def _run_instance(self, request: LaunchRequest, itype: str, zone: str, vswitch: str) -> str:
        from alibabacloud_ecs20140526 import models as ecs

        cfg = self.config
        tags = {**request.tags, TAG_MANAGED: "true", TAG_TOKEN: request.client_token}
        if len(tags) > 20:
            raise InputError(f"ECS takes at most 20 tags, got {len(tags)}", field="tags")
        run = ecs.RunInstancesRequest(
            region_id=cfg.region,
            instance_type=itype,
            zone_id=zone,
            v_switch_id=vswitch,
            amount=1,
            client_token=request.client_token,
            instance_charge_type="PostPaid",
            image_id=cfg.image_id,
            security_group_id=cfg.security_group_id,
            launch_template_id=cfg.launch_template_id,
            launch_template_version=cfg.launch_template_version,
            tag=[ecs.RunInstancesRequestTag(key=k, value=v) for k, v in sorted(tags.items())],
        )
        if request.capacity_type is CapacityType.SPOT:
            if request.max_price is not None:
                run.spot_strategy = "SpotWithPriceLimit"
                run.spot_price_limit = _price_limit(request.max_price)
            else:
                run.spot_strategy = "SpotAsPriceGo"
        body = self._call("RunInstances", self._client.run_instances_with_options, run).body
        ids = list(body.instance_id_sets.instance_id_set or []) if body.instance_id_sets else []
        if len(ids) != 1:
            raise AliyunError("RunInstances", f"expected one instance id, got {ids}", None)
        return str(ids[0])

    def _find_by_token(self, token: str) -> Instance | None:
        for inst in self._describe({TAG_MANAGED: "true", TAG_TOKEN: token}):
            if inst.state is not InstanceState.TERMINATED:
                return inst
        return None

    # -- delete / list ---------------------------------------------------------------------
    def delete(self, instance_id: str) -> None:
        """``DeleteInstances`` with ``Force`` (a running instance is stopped and released). An
        instance already gone is done; one ECS cannot release yet (still starting) raises, and the
        controller asks again on its next pass."""
        from alibabacloud_ecs20140526 import models as ecs

        req = ecs.DeleteInstancesRequest(
            region_id=self.config.region, instance_id=[instance_id], force=True
        )
        try:
            self._call("DeleteInstances", self._client.delete_instances_with_options, req)
        except AliyunError as exc:
            if exc.code not in GONE_CODES:
                raise

    def list(self) -> list[Instance]:
        return self._describe({TAG_MANAGED: "true"})

    def _describe_raw(self, tags: Mapping[str, str]) -> Iterator[Any]:
        from alibabacloud_ecs20140526 import models as ecs

        next_token: str | None = None
        seen: set[str] = set()
        while True:
            req = ecs.DescribeInstancesRequest(
                region_id=self.config.region,
                tag=[ecs.DescribeInstancesRequestTag(key=k, value=v) for k, v in tags.items()],
                max_results=self.config.page_size,
                next_token=next_token,
            )
            body = self._call(
                "DescribeInstances", self._client.describe_instances_with_options, req
            ).body
            batch = body.instances.instance if body.instances and body.instances.instance else []
            yield from batch
            next_token = body.next_token or None
            if not next_token or not batch:
                return
            if next_token in seen:  # a server that repeats a token must not loop forever
                raise AliyunError("DescribeInstances", f"NextToken {next_token!r} repeated", None)
            seen.add(next_token)

    def _describe(self, tags: Mapping[str, str]) -> builtins.list[Instance]:
        return [self._to_instance(raw) for raw in self._describe_raw(tags)]

    def _to_instance(self, raw: Any) -> Instance:
        tags = {
            t.tag_key: t.tag_value or ""
            for t in (raw.tags.tag if raw.tags and raw.tags.tag else [])
        }
        spot = (raw.spot_strategy or "NoSpot") != "NoSpot"
        return Instance(
            instance_id=raw.instance_id,
            provider_id=provider_id(self.config.region, raw.instance_id),
            instance_type=raw.instance_type or "",
            zone=raw.zone_id or "",
            capacity_type=CapacityType.SPOT if spot else CapacityType.ON_DEMAND,
            state=_STATE.get(raw.status or "", InstanceState.PENDING),
            launched_at=parse_ecs_time(raw.creation_time),
            client_token=tags.get(TAG_TOKEN, ""),
            tags=tags,
        )

    # -- offerings -------------------------------------------------------------------------
    def offerings(self) -> builtins.list[Offering]:
        """Spot: the latest ``DescribeSpotPriceHistory`` point of each type in each configured
        zone, one query per type for all zones (a pool with no price in the last 3 hours is
        listed unavailable at the on-demand price). On-demand: the catalog's price, available in
        every configured zone (ECS publishes no on-demand stock signal short of
        ``DescribeAvailableResource``; a stock-out shows up at launch and moves to the next
        pool)."""
        out: list[Offering] = []
        types = self.config.instance_types or tuple(t.name for t in self.catalog.by_provider(NAME))
        for itype in types:
            on_demand = self.catalog[itype].price_per_hour
            spot = self._latest_spot_prices(itype)
            for zone in self.config.zones:
                out.append(Offering(itype, zone, CapacityType.ON_DEMAND, on_demand))
                price = spot.get(zone)
                if price is None:
                    out.append(Offering(itype, zone, CapacityType.SPOT, on_demand, available=False))
                else:
                    out.append(Offering(itype, zone, CapacityType.SPOT, price))
        return out

    def _latest_spot_prices(self, itype: str) -> dict[str, Decimal]:
        """zone → the latest spot price of ``itype`` in the last 3 hours."""
        from alibabacloud_ecs20140526 import models as ecs

        now = datetime.fromtimestamp(self._clock(), UTC)
        start = (now - timedelta(hours=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
        latest: dict[str, tuple[str, Decimal]] = {}
        offset: int | None = None
        for _ in range(100):  # bounded: 100 pages is far more than 3 hours of history
            req = ecs.DescribeSpotPriceHistoryRequest(
                region_id=self.config.region,
                instance_type=itype,
                network_type="vpc",
                ostype="linux",
                start_time=start,
                offset=offset,
            )
            try:
                body = self._call(
                    "DescribeSpotPriceHistory",
                    self._client.describe_spot_price_history_with_options,
                    req,
                ).body
            except AliyunError as exc:
                if exc.code in STOCK_OUT_CODES:
                    return {}
                raise
            points = body.spot_prices.spot_price_type if body.spot_prices else None
            for p in points or []:
                if p.zone_id not in self.config.zones or p.spot_price is None:
                    continue
                stamp = p.timestamp or ""
                if p.zone_id not in latest or stamp >= latest[p.zone_id][0]:
                    latest[p.zone_id] = (stamp, Decimal(str(p.spot_price)))
            if not points or not body.next_offset or body.next_offset == offset:
                break
            offset = body.next_offset
        return {zone: price for zone, (_, price) in latest.items()}

    # -- interruptions ---------------------------------------------------------------------
    def interruptions(self) -> builtins.list[Interruption]:
        """Instances ECS is taking back, as seen by ``DescribeInstances``: the operation lock
        ``Recycling`` (a spot instance pending release) → spot interruption; ``Stopped`` (a spot
        instance reclaimed in stop mode, or stopped outside gpufleet) → state change. gpufleet's
        own ``delete`` goes through ``Stopping`` to released and is not reported.

        This is the backstop, not the authoritative path. Aliyun announces a spot reclaim about
        five minutes ahead on the instance's metadata (``instance/spot/termination-time``, with
        the exact time; the node agent reads it) and as the CloudMonitor / EventBridge event
        ``Instance:PreemptibleInstanceInterruption``; ``DescribeInstances`` shows the lock without
        a deadline and only when polled. Level-triggered: an instance is reported on every call
        while the lock lasts; the Node annotation dedupes (see the interruption convention).
        """
        out: list[Interruption] = []
        for raw in self._describe_raw({TAG_MANAGED: "true"}):
            locks = raw.operation_locks.lock_reason if raw.operation_locks else None
            reasons = {lock.lock_reason for lock in locks or []}
            if "Recycling" in reasons:
                out.append(Interruption(raw.instance_id, InterruptionKind.SPOT_INTERRUPTION))
            elif raw.status == "Stopped":
                out.append(Interruption(raw.instance_id, InterruptionKind.STATE_CHANGE))
        return out

    def acknowledge(self, event: Interruption) -> None:
        """Nothing to acknowledge: the DescribeInstances path keeps no queue."""

    # -- calls -----------------------------------------------------------------------------
    def _call(self, action: str, method: Callable[[Any, Any], Any], request: Any) -> Any:
        """One SDK call with bounded retries on throttling and transport faults; every ECS
        error becomes :class:`CredentialsError` or :class:`AliyunError` (code + request id, never
        the request, which carries the signature)."""
        from alibabacloud_credentials.exceptions import CredentialException
        from alibabacloud_tea_openapi.exceptions import AlibabaCloudException
        from darabonba.exceptions import UnretryableException
        from darabonba.runtime import RuntimeOptions

        timeout_ms = int(self.config.timeout_s * 1000)
        runtime = RuntimeOptions(read_timeout=timeout_ms, connect_timeout=timeout_ms)
        delay = 0.2
        for attempt in range(1, self.config.max_attempts + 1):
            try:
                return method(request, runtime)
            except AlibabaCloudException as exc:
                code = str(exc.code or "")
                if code in CREDENTIAL_CODES:
                    raise _credential_error(code) from None
                request_id = (
                    (exc.data or {}).get("RequestId") if isinstance(exc.data, dict) else None
                )
                if code in RETRY_CODES and attempt < self.config.max_attempts:
                    self._sleep(delay)
                    delay *= 2
                    continue
                raise AliyunError(action, code, request_id) from None
            except UnretryableException as exc:
                inner = getattr(exc, "inner_exception", None)
                if isinstance(inner, CredentialException):
                    raise _credential_error(None) from None
                if attempt < self.config.max_attempts:
                    self._sleep(delay)
                    delay *= 2
                    continue
                raise AliyunError(action, f"transport: {type(inner).__name__}", None) from None
            except CredentialException:
                raise _credential_error(None) from None
        raise AssertionError("unreachable")  # pragma: no cover


def _credential_error(code: str | None) -> CredentialsError:
    if code is None:
        return CredentialsError(
            f"no Aliyun credential found (searched: {CHAIN})", field="credentials"
        )
    return CredentialsError(
        f"Aliyun rejected the credential from the default chain ({code}); check the AccessKey "
        f"pair or role (searched: {CHAIN})",
        field="credentials",
    )


def _make_client(config: AliyunConfig) -> Any:
    """The ECS client with the default credential chain; imported lazily so that importing
    gpufleet does not pay for the SDK."""
    from alibabacloud_credentials.client import Client as CredentialClient
    from alibabacloud_ecs20140526.client import Client as EcsClient
    from alibabacloud_tea_openapi import utils_models as openapi

    api = openapi.Config(
        credential=CredentialClient(),
        region_id=config.region,
        endpoint=config.endpoint,  # None: the SDK's endpoint map for the region
        protocol=config.protocol,
        read_timeout=int(config.timeout_s * 1000),
        connect_timeout=int(config.timeout_s * 1000),
    )
    return EcsClient(api)
