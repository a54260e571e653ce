"""A loopback ECS endpoint: no Aliyun emulator exists, so the tests run the real SDK against this.

A real HTTP server (``http.server`` on 127.0.0.1, a random port, in a thread) that keeps the
instances of one region in memory and checks every request the way the ECS API reference
documents it, before doing anything:

* the V3 signature the SDK sends (``ACS3-HMAC-SHA256``): the ``Authorization`` header's
  Credential / SignedHeaders / Signature, recomputed from the canonical request (method, path,
  sorted RFC 3986 query, the signed headers lower-cased and sorted, the hex SHA-256 of the body)
  with the known test AccessKey secret; ``host`` and every ``x-acs-*`` header must be signed; the
  body must hash to ``x-acs-content-sha256``; ``x-acs-date`` within 15 minutes; a nonce is used
  once. Unknown key id → ``InvalidAccessKeyId.NotFound``; any mismatch → ``SignatureDoesNotMatch``.
* the action's parameters: required ones present (``RegionId``, ``ClientToken``, ...), no
  parameter the action does not take, well-formed values (``Amount``, ``Tag.N.Key/Value``,
  ``SpotStrategy`` / ``SpotPriceLimit`` only with spot, three decimals at most, ...), answered
  with ECS's error JSON (``MissingParameter``, ``InvalidParameter…``) otherwise.

It implements RunInstances (ClientToken idempotency incl. ``IdempotentParameterMismatch``,
stock-outs per pool), DeleteInstances, DescribeInstances (Tag filter, ``NextToken`` and
``PageNumber`` pagination, ``OperationLocks``) and DescribeSpotPriceHistory (``Offset`` paging).
Stricter than ECS in one way, on purpose: a parameter the action does not know is refused (ECS
ignores it), so a misspelt field fails the test instead of silently doing nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, quote, urlsplit

VERSION = "2014-05-26"
ALGORITHM = "ACS3-HMAC-SHA256"
REQUIRED_SIGNED = (
    "host",
    "x-acs-action",
    "x-acs-content-sha256",
    "x-acs-date",
    "x-acs-signature-nonce",
    "x-acs-version",
)
COMMON = {"RegionId", "OwnerId", "OwnerAccount", "ResourceOwnerId", "ResourceOwnerAccount"}
RUN_PARAMS = COMMON | {
    "InstanceType",
    "ZoneId",
    "VSwitchId",
    "Amount",
    "MinAmount",
    "ClientToken",
    "InstanceChargeType",
    "ImageId",
    "SecurityGroupId",
    "LaunchTemplateId",
    "LaunchTemplateVersion",
    "SpotStrategy",
    "SpotPriceLimit",
    "SpotDuration",
    "InstanceName",
}
TAG_PARAM = re.compile(r"^Tag\.([0-9]+)\.(Key|Value)$")
INSTANCE_ID_PARAM = re.compile(r"^InstanceId\.([0-9]+)$")


class EcsError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(code)
        self.status = status
        self.code = code
        self.message = message


def _missing(name: str) -> EcsError:
    return EcsError(
        400,
        "MissingParameter",
        f'The input parameter "{name}" that is mandatory for processing this request is not '
        "supplied.",
    )


def _invalid(name: str, why: str) -> EcsError:
    return EcsError(400, f"InvalidParameter.{name}", f"The specified parameter {name} {why}.")


def _bool(params: dict[str, str], name: str) -> bool:
    raw = params.get(name, "false")
    if raw.lower() not in ("true", "false"):
        raise _invalid(name, f"must be true or false, got {raw!r}")
    return raw.lower() == "true"


@dataclass
class EcsInstance:
    instance_id: str
    instance_type: str
    zone: str
    vswitch: str
    spot_strategy: str
    spot_price_limit: float
    tags: dict[str, str]
    created: datetime
    status: str = "Running"
    locks: list[str] = field(default_factory=list)

    def to_json(self, region: str) -> dict[str, Any]:
        return {
            "InstanceId": self.instance_id,
            "InstanceType": self.instance_type,
            "RegionId": region,
            "ZoneId": self.zone,
            "Status": self.status,
            "InstanceChargeType": "PostPaid",
            "SpotStrategy": self.spot_strategy,
            "SpotPriceLimit": self.spot_price_limit,
            "CreationTime": self.created.strftime("%Y-%m-%dT%H:%MZ"),
            "StartTime": self.created.strftime("%Y-%m-%dT%H:%MZ"),
            "VpcAttributes": {"VSwitchId": self.vswitch},
            "Tags": {"Tag": [{"TagKey": k, "TagValue": v} for k, v in self.tags.items()]},
            "OperationLocks": {"LockReason": [{"LockReason": r} for r in self.locks]},
        }


@dataclass
class Call:
    """One request that passed the signature check (the tests assert on the parameters)."""

    action: str
    params: dict[str, str]
    status: int = 200
    code: str | None = None


class EcsLoopback:
    """The server and its state. ``access_keys`` maps key id → secret; ``vswitches`` maps vSwitch
    id → zone; ``stock_out`` maps (type, zone) → the ECS error code that pool answers with;
    ``spot_prices`` maps (type, zone) → price history [(time, price)]."""

    def __init__(
        self,
        *,
        region: str,
        access_keys: dict[str, str],
        vswitches: dict[str, str],
        instance_types: set[str],
        images: Iterable[str] = ("m-gpu-image",),
        security_groups: Iterable[str] = ("sg-gpufleet",),
        launch_templates: Iterable[str] = (),
    ) -> None:
        self.region = region
        self.access_keys = dict(access_keys)
        self.vswitches = dict(vswitches)
        self.instance_types = set(instance_types)
        self.images = set(images)
        self.security_groups = set(security_groups)
        self.launch_templates = set(launch_templates)
        self.stock_out: dict[tuple[str, str], str] = {}
        self.spot_prices: dict[tuple[str, str], list[tuple[datetime, Decimal]]] = {}
        self.price_page = 2  # DescribeSpotPriceHistory points per page
        self.instances: dict[str, EcsInstance] = {}
        self.tokens: dict[str, tuple[tuple[tuple[str, str], ...], list[str]]] = {}
        self.next_tokens: dict[str, int] = {}
        self.nonces: set[str] = set()
        self.calls: list[Call] = []
        self.inject: list[tuple[str, EcsError]] = []  # (action, error) answered once each, FIFO
        # instance ids DescribeInstances does not show for the next ``lag_calls`` calls (lag)
        self.hidden: set[str] = set()
        self.lag_calls = 0
        self.rejected: list[str] = []  # codes of requests refused before any action ran
        self.lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{host}:{port}"

    def start(self) -> EcsLoopback:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def calls_of(self, action: str) -> list[Call]:
        return [c for c in self.calls if c.action == action]

    # -- test controls -----------------------------------------------------------------------
    def reclaim(self, instance_id: str) -> None:
        """Spot reclamation: ECS locks the instance with ``Recycling`` before releasing it."""
        self.instances[instance_id].locks.append("Recycling")

    # -- HTTP --------------------------------------------------------------------------------
    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self._serve()

            def do_GET(self) -> None:
                self._serve()

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                request_id = secrets.token_hex(16).upper()
                try:
                    action, params = owner._verify(self.command, self.path, self.headers, body)
                except EcsError as err:
                    with owner.lock:
                        owner.rejected.append(err.code)
                    self._answer(err.status, owner._error(err, request_id))
                    return
                with owner.lock:
                    call = Call(action, params)
                    owner.calls.append(call)
                    try:
                        result = owner._dispatch(action, params)
                    except EcsError as err:
                        call.status, call.code = err.status, err.code
                        self._answer(err.status, owner._error(err, request_id))
                        return
                self._answer(200, {"RequestId": request_id, **result})

            def _answer(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json;charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:  # quiet test output
                return

        return Handler

    @staticmethod
    def _error(err: EcsError, request_id: str) -> dict[str, Any]:
        return {
            "RequestId": request_id,
            "HostId": "ecs.aliyuncs.com",
            "Code": err.code,
            "Message": err.message,
            "Recommend": f"https://api.aliyun.com/troubleshoot?q={err.code}&product=Ecs",
        }

    # -- the V3 signature --------------------------------------------------------------------
    def _verify(
        self, method: str, target: str, headers: Any, body: bytes
    ) -> tuple[str, dict[str, str]]:
        auth = headers.get("Authorization")
        if not auth:
            raise _missing("Authorization")
        m = re.fullmatch(
            rf"{ALGORITHM} Credential=([^,]+),SignedHeaders=([^,]+),Signature=([0-9a-f]{{64}})",
            auth.strip(),
        )
        if not m:
            raise EcsError(400, "IncompleteSignature", "The request signature is malformed.")
        key_id, signed_list, signature = m.groups()
        secret = self.access_keys.get(key_id)
        if secret is None:
            raise EcsError(404, "InvalidAccessKeyId.NotFound", "Specified access key is not found.")
        signed = signed_list.split(";")
        if signed != sorted(signed) or any(h != h.lower() for h in signed):
            raise EcsError(400, "IncompleteSignature", "SignedHeaders must be sorted lower-case.")
        for name in REQUIRED_SIGNED:
            if name not in signed:
                raise EcsError(400, "IncompleteSignature", f"Header {name} must be signed.")
        if "content-type" in {k.lower() for k in headers} and "content-type" not in signed:
            raise EcsError(400, "IncompleteSignature", "Header content-type must be signed.")
        payload_hash = headers.get("x-acs-content-sha256", "")
        if payload_hash != hashlib.sha256(body).hexdigest():
            raise EcsError(400, "ContentSHA256NotMatched", "x-acs-content-sha256 does not match.")
        when = headers.get("x-acs-date", "")
        try:
            stamp = datetime.strptime(when, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        except ValueError:
            raise EcsError(400, "InvalidTimeStamp.Format", f"Bad x-acs-date {when!r}.") from None
        if abs(datetime.now(UTC) - stamp) > timedelta(minutes=15):
            raise EcsError(400, "InvalidTimeStamp.Expired", "Specified time stamp is expired.")
        parts = urlsplit(target)
        query = parse_qsl(parts.query, keep_blank_values=True)
        canonical_query = "&".join(
            f"{quote(k, safe='~')}={quote(v, safe='~')}" for k, v in sorted(query)
        )
        canonical_headers = ""
        for name in signed:
            values = headers.get_all(name)
            if not values:
                raise EcsError(400, "IncompleteSignature", f"Signed header {name} is absent.")
            canonical_headers += f"{name}:{','.join(sorted(v.strip() for v in values))}\n"
        canonical_request = "\n".join(
            [method, parts.path or "/", canonical_query, canonical_headers, signed_list]
        )
        canonical_request += "\n" + payload_hash
        to_sign = f"{ALGORITHM}\n{hashlib.sha256(canonical_request.encode()).hexdigest()}"
        expected = hmac.new(secret.encode(), to_sign.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, signature):
            raise EcsError(
                400,
                "SignatureDoesNotMatch",
                "Specified signature does not match our calculation.",
            )
        nonce = headers.get("x-acs-signature-nonce", "")
        with self.lock:
            if nonce in self.nonces:
                raise EcsError(400, "SignatureNonceUsed", "Specified signature nonce was used.")
            self.nonces.add(nonce)
        if headers.get("x-acs-version") != VERSION:
            raise EcsError(400, "InvalidVersion", f"Specified version is not {VERSION}.")
        params = dict(query)
        if len(params) != len(query):
            raise EcsError(400, "InvalidParameter", "A parameter is repeated.")
        if body and "x-www-form-urlencoded" in headers.get("content-type", ""):
            params.update(parse_qsl(body.decode(), keep_blank_values=True))
        return headers.get("x-acs-action", ""), params

    # -- actions -----------------------------------------------------------------------------
    def _dispatch(self, action: str, params: dict[str, str]) -> dict[str, Any]:
        handler = {
            "RunInstances": self._run_instances,
            "DeleteInstances": self._delete_instances,
            "DescribeInstances": self._describe_instances,
            "DescribeSpotPriceHistory": self._describe_spot_price_history,
        }.get(action)
        if handler is None:
            raise EcsError(404, "InvalidAction.NotFound", f"Specified api {action} is not found.")
        for i, (act, err) in enumerate(self.inject):
            if act == action:
                del self.inject[i]
                raise err
        region = params.get("RegionId")
        if not region:
            raise _missing("RegionId")
        if region != self.region:
            raise EcsError(404, "InvalidRegionId.NotFound", f"Region {region} is not found.")
        return handler(params)

    def _check_known(
        self, params: dict[str, str], allowed: set[str], *patterns: re.Pattern
    ) -> None:
        for name in params:
            if name not in allowed and not any(p.match(name) for p in patterns):
                raise EcsError(400, "InvalidParameter", f"Unknown parameter {name}.")

    @staticmethod
    def _tags(params: dict[str, str]) -> dict[str, str]:
        keys: dict[int, str] = {}
        values: dict[int, str] = {}
        for name, value in params.items():
            m = TAG_PARAM.match(name)
            if m:
                (keys if m.group(2) == "Key" else values)[int(m.group(1))] = value
        for n in values:
            if n not in keys:
                raise EcsError(400, "InvalidTagKey.Malformed", f"Tag.{n}.Value has no Tag.{n}.Key.")
        out: dict[str, str] = {}
        for n in sorted(keys):
            key, value = keys[n], values.get(n, "")
            if not 1 <= n <= 20:
                raise EcsError(400, "InvalidTagKey.Malformed", f"Tag.{n}: N must be 1..20.")
            if not key or len(key) > 128 or key.startswith(("aliyun", "acs:")) or "://" in key:
                raise EcsError(400, "InvalidTagKey.Malformed", f"Tag.{n}.Key {key!r} is invalid.")
            if len(value) > 128 or value.startswith(("aliyun", "acs:")) or "://" in value:
                raise EcsError(
                    400, "InvalidTagValue.Malformed", f"Tag.{n}.Value {value!r} is invalid."
                )
            if key in out:
                raise EcsError(400, "InvalidTagKey.Duplicate", f"Tag key {key!r} is repeated.")
            out[key] = value
        return out

    def _run_instances(self, params: dict[str, str]) -> dict[str, Any]:
        self._check_known(params, RUN_PARAMS, TAG_PARAM)
        token = params.get("ClientToken")
        if not token:
            raise _missing("ClientToken")
        if len(token) > 64 or not token.isascii():
            raise EcsError(400, "InvalidClientToken.Malformed", "ClientToken is malformed.")
        fingerprint = tuple(sorted(params.items()))
        if token in self.tokens:
            seen, ids = self.tokens[token]
            if seen != fingerprint:
                raise EcsError(
                    400,
                    "IdempotentParameterMismatch",
                    "The request uses the same client token as a previous, but non-identical "
                    "request.",
                )
            return {"InstanceIdSets": {"InstanceIdSet": ids}}
        template = params.get("LaunchTemplateId")
        if template is not None and template not in self.launch_templates:
            raise EcsError(404, "InvalidLaunchTemplate.NotFound", "Launch template not found.")
        if template is None:
            for name, known in (
                ("ImageId", self.images),
                ("SecurityGroupId", self.security_groups),
            ):
                value = params.get(name)
                if not value:
                    raise _missing(name)
                if value not in known:
                    raise EcsError(404, f"Invalid{name}.NotFound", f"{name} {value} not found.")
        itype = params.get("InstanceType")
        if not itype:
            raise _missing("InstanceType")
        if itype not in self.instance_types:
            raise EcsError(404, "InvalidInstanceType.NotFound", f"Type {itype} is not found.")
        vswitch = params.get("VSwitchId")
        if not vswitch:
            raise _missing("VSwitchId")
        zone = self.vswitches.get(vswitch)
        if zone is None:
            raise EcsError(404, "InvalidVSwitchId.NotFound", f"VSwitch {vswitch} is not found.")
        if params.get("ZoneId", zone) != zone:
            raise _invalid("ZoneId", f"does not match the zone {zone} of {vswitch}")
        amount = params.get("Amount", "1")
        if not amount.isdigit() or not 1 <= int(amount) <= 100:
            raise _invalid("Amount", "must be an integer in 1..100")
        charge = params.get("InstanceChargeType", "PostPaid")
        if charge not in ("PostPaid", "PrePaid"):
            raise _invalid("InstanceChargeType", "must be PostPaid or PrePaid")
        strategy = params.get("SpotStrategy", "NoSpot")
        if strategy not in ("NoSpot", "SpotWithPriceLimit", "SpotAsPriceGo"):
            raise EcsError(400, "InvalidSpotStrategy", f"SpotStrategy {strategy} is invalid.")
        if strategy != "NoSpot" and charge != "PostPaid":
            raise EcsError(400, "InvalidSpotStrategy", "Spot instances must be PostPaid.")
        limit = Decimal(0)
        if "SpotPriceLimit" in params:
            if strategy != "SpotWithPriceLimit":
                raise _invalid("SpotPriceLimit", "is only valid with SpotWithPriceLimit")
            try:
                limit = Decimal(params["SpotPriceLimit"])
            except InvalidOperation:
                raise _invalid("SpotPriceLimit", "is not a number") from None
            if not limit.is_finite() or limit <= 0 or limit != limit.quantize(Decimal("0.001")):
                raise _invalid("SpotPriceLimit", "must be > 0 with at most 3 decimals")
        elif strategy == "SpotWithPriceLimit":
            raise _missing("SpotPriceLimit")
        tags = self._tags(params)
        code = self.stock_out.get((itype, zone))
        if code is not None:
            raise EcsError(403, code, f"The requested resource ({itype} in {zone}) is sold out.")
        if strategy == "SpotWithPriceLimit":
            history = self.spot_prices.get((itype, zone))
            if history and limit < max(history)[1]:
                raise EcsError(
                    400,
                    "InvalidSpotPriceLimit.LowerThanPublicPrice",
                    "The specified parameter SpotPriceLimit can't be lower than current public "
                    "price.",
                )
        ids = []
        for _ in range(int(amount)):
            iid = "i-" + "".join(
                secrets.choice("0123456789abcdefghijklmnopqrstuvwxyz") for _ in range(20)
            )
            self.instances[iid] = EcsInstance(
                instance_id=iid,
                instance_type=itype,
                zone=zone,
                vswitch=vswitch,
                spot_strategy=strategy,
                spot_price_limit=float(limit),
                tags=tags,
                created=datetime.now(UTC),
            )
            ids.append(iid)
        self.tokens[token] = (fingerprint, ids)
        return {"InstanceIdSets": {"InstanceIdSet": ids}, "TradePrice": 0.0}

    def _delete_instances(self, params: dict[str, str]) -> dict[str, Any]:
        self._check_known(
            params,
            COMMON | {"Force", "ForceStop", "DryRun", "ClientToken", "TerminateSubscription"},
            INSTANCE_ID_PARAM,
        )
        ids = [v for k, v in sorted(params.items()) if INSTANCE_ID_PARAM.match(k)]
        if not ids:
            raise _missing("InstanceId.1")
        force = _bool(params, "Force")
        for iid in ids:
            if iid not in self.instances:
                raise EcsError(404, "InvalidInstanceId.NotFound", f"Instance {iid} is not found.")
            if self.instances[iid].status == "Running" and not force:
                raise EcsError(403, "IncorrectInstanceStatus", "Running; use Force=true.")
        for iid in ids:
            del self.instances[iid]
        return {}

    def _describe_instances(self, params: dict[str, str]) -> dict[str, Any]:
        self._check_known(
            params,
            COMMON | {"MaxResults", "NextToken", "PageNumber", "PageSize", "InstanceIds", "Status"},
            TAG_PARAM,
        )
        wanted = self._tags(params)
        hidden = self.hidden if self.lag_calls > 0 else set()
        self.lag_calls = max(0, self.lag_calls - 1)
        rows = [
            i
            for i in sorted(self.instances.values(), key=lambda i: (i.created, i.instance_id))
            if all(i.tags.get(k) == v for k, v in wanted.items()) and i.instance_id not in hidden
        ]
        if "InstanceIds" in params:
            try:
                ids = json.loads(params["InstanceIds"])
            except json.JSONDecodeError:
                raise _invalid("InstanceIds", "is not a JSON array") from None
            rows = [i for i in rows if i.instance_id in ids]
        if "MaxResults" in params or "NextToken" in params:
            size = self._int(params, "MaxResults", 10, 1, 100)
            start = 0
            if params.get("NextToken"):
                if params["NextToken"] not in self.next_tokens:
                    raise _invalid("NextToken", "is invalid or expired")
                start = self.next_tokens[params["NextToken"]]
            page = rows[start : start + size]
            out: dict[str, Any] = {"TotalCount": len(rows), "NextToken": ""}
            if start + size < len(rows):
                nt = secrets.token_hex(8)
                self.next_tokens[nt] = start + size
                out["NextToken"] = nt
        else:
            size = self._int(params, "PageSize", 10, 1, 100)
            number = self._int(params, "PageNumber", 1, 1, 10**6)
            page = rows[(number - 1) * size : number * size]
            out = {"TotalCount": len(rows), "PageNumber": number, "PageSize": size}
        out["Instances"] = {"Instance": [i.to_json(self.region) for i in page]}
        return out

    def _describe_spot_price_history(self, params: dict[str, str]) -> dict[str, Any]:
        self._check_known(
            params,
            COMMON
            | {"NetworkType", "InstanceType", "ZoneId", "IoOptimized", "OSType", "StartTime"}
            | {"EndTime", "Offset", "SpotDuration"},
        )
        network = params.get("NetworkType")
        if not network:
            raise _missing("NetworkType")
        if network not in ("classic", "vpc"):
            raise _invalid("NetworkType", "must be classic or vpc")
        itype = params.get("InstanceType")
        if not itype:
            raise _missing("InstanceType")
        if params.get("OSType", "linux") not in ("linux", "windows"):
            raise _invalid("OSType", "must be linux or windows")
        start = datetime.now(UTC) - timedelta(hours=3)
        if "StartTime" in params:
            try:
                start = datetime.strptime(params["StartTime"], "%Y-%m-%dT%H:%M:%SZ").replace(
                    tzinfo=UTC
                )
            except ValueError:
                raise _invalid("StartTime", "must be yyyy-MM-ddTHH:mm:ssZ") from None
        points = [
            (zone, when, price)
            for (t, zone), history in sorted(self.spot_prices.items())
            if t == itype and params.get("ZoneId", zone) == zone
            for when, price in history
            if when >= start
        ]
        offset = self._int(params, "Offset", 0, 0, 10**6)
        page = points[offset : offset + self.price_page]
        out: dict[str, Any] = {
            "Currency": "CNY",
            "SpotPrices": {
                "SpotPriceType": [
                    {
                        "ZoneId": zone,
                        "InstanceType": itype,
                        "IoOptimized": "optimized",
                        "NetworkType": network,
                        "Timestamp": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
                        "SpotPrice": float(price),
                        "OriginPrice": float(price * 5),
                    }
                    for zone, when, price in page
                ]
            },
        }
        if offset + self.price_page < len(points):
            out["NextOffset"] = offset + self.price_page
        return out

    @staticmethod
    def _int(params: dict[str, str], name: str, default: int, low: int, high: int) -> int:
        raw = params.get(name)
        if raw is None:
            return default
        if not raw.isdigit() or not low <= int(raw) <= high:
            raise _invalid(name, f"must be an integer in {low}..{high}")
        return int(raw)


def running(server: EcsLoopback) -> Iterator[EcsLoopback]:
    """Start ``server`` for the length of a fixture."""
    server.start()
    try:
        yield server
    finally:
        server.stop()
