"""EventBridge events about EC2 instances → :class:`Interruption`, as data (no AWS call here).

The events are the ones Karpenter and aws-node-termination-handler consume from their SQS queue;
an EventBridge rule delivers each as the standard envelope ``{"version", "id", "detail-type",
"source", "account", "time", "region", "resources", "detail"}``:

* ``EC2 Spot Instance Interruption Warning`` — ``detail.instance-id``; the instance goes two
  minutes after the event ``time`` (the notice AWS documents);
* ``EC2 Instance Rebalance Recommendation`` — ``detail.instance-id``; elevated risk, no deadline;
* ``EC2 Instance State-change Notification`` — ``detail.instance-id`` and ``detail.state``; only
  stopping / stopped / shutting-down / terminated are a loss (pending and running are not);
* ``AWS Health Event`` — ``detail.service`` EC2 with ``eventTypeCategory`` scheduledChange; one
  event may name several instances in ``affectedEntities``; the deadline is ``startTime``.

A message that is none of these is *ignored* (an empty list: the queue may carry other events)
and a message that cannot be read at all raises :class:`UnreadableEvent`; either way the provider
deletes it so that it cannot come back forever.
"""

from __future__ import annotations

import json
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any

from gpufleet.cloud.provider import Interruption, InterruptionKind

SPOT_WARNING = "EC2 Spot Instance Interruption Warning"
REBALANCE = "EC2 Instance Rebalance Recommendation"
STATE_CHANGE = "EC2 Instance State-change Notification"
HEALTH = "AWS Health Event"

SPOT_NOTICE_S = 120.0  # EC2 reclaims a spot instance two minutes after the warning
LOSS_STATES = frozenset({"stopping", "stopped", "shutting-down", "terminated"})


class UnreadableEvent(ValueError):
    """The message body is not an EventBridge event about an instance (says why, one line)."""


def _epoch(stamp: Any) -> float | None:
    """EventBridge's ISO 8601 ``time`` or AWS Health's RFC 1123 ``startTime`` → epoch seconds."""
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        pass
    try:
        return parsedate_to_datetime(stamp).timestamp()
    except (TypeError, ValueError, IndexError):
        return None


def _instance_id(detail: dict[str, Any]) -> str:
    iid = detail.get("instance-id")
    if not isinstance(iid, str) or not iid.startswith("i-"):
        raise UnreadableEvent(f"detail.instance-id missing or not an instance id: {iid!r:.40}")
    return iid


def parse_event(body: str, receipt: str | None = None) -> list[Interruption]:
    """The interruptions one SQS message announces (``[]`` for an event that is not a loss)."""
    try:
        event = json.loads(body)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise UnreadableEvent(f"not JSON ({exc.__class__.__name__})") from None
    if not isinstance(event, dict):
        raise UnreadableEvent("not a JSON object")
    kind = event.get("detail-type")
    detail = event.get("detail")
    if not isinstance(kind, str) or not isinstance(detail, dict):
        raise UnreadableEvent("no 'detail-type' / 'detail': not an EventBridge event")

    if kind == SPOT_WARNING:
        sent = _epoch(event.get("time"))
        deadline = sent + SPOT_NOTICE_S if sent is not None else None
        return [
            Interruption(
                _instance_id(detail), InterruptionKind.SPOT_INTERRUPTION, deadline, receipt
            )
        ]
    if kind == REBALANCE:
        return [Interruption(_instance_id(detail), InterruptionKind.REBALANCE, None, receipt)]
    if kind == STATE_CHANGE:
        iid = _instance_id(detail)
        if detail.get("state") not in LOSS_STATES:
            return []
        return [Interruption(iid, InterruptionKind.STATE_CHANGE, None, receipt)]
    if kind == HEALTH:
        if detail.get("service") != "EC2" or detail.get("eventTypeCategory") != "scheduledChange":
            return []
        entities = detail.get("affectedEntities")
        if not isinstance(entities, list):
            raise UnreadableEvent("AWS Health event without a list of affectedEntities")
        deadline = _epoch(detail.get("startTime"))
        out = []
        for ent in entities:
            value = ent.get("entityValue") if isinstance(ent, dict) else None
            if isinstance(value, str) and value.startswith("i-"):
                out.append(Interruption(value, InterruptionKind.SCHEDULED, deadline, receipt))
        return out
    return []
