"""EventBridge JSON → Interruption, without AWS: the shapes of the AWS documentation examples."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpufleet.cloud.aws_events import SPOT_NOTICE_S, UnreadableEvent, parse_event
from gpufleet.cloud.provider import InterruptionKind


def _envelope(detail_type: str, detail: Any, time: str = "2021-02-02T19:05:49Z") -> str:
    return json.dumps(
        {
            "version": "0",
            "id": "1e5527d7-bb36-4607-3370-4164db56a40e",
            "detail-type": detail_type,
            "source": "aws.ec2",
            "account": "123456789012",
            "time": time,
            "region": "us-east-1",
            "resources": ["arn:aws:ec2:us-east-1b:instance/i-0b662ef9931388ba0"],
            "detail": detail,
        }
    )


def test_spot_warning_deadline_is_two_minutes_after_the_event() -> None:
    body = _envelope(
        "EC2 Spot Instance Interruption Warning",
        {"instance-id": "i-0b662ef9931388ba0", "instance-action": "terminate"},
    )
    (ev,) = parse_event(body, "r-1")
    assert ev.instance_id == "i-0b662ef9931388ba0" and ev.receipt == "r-1"
    assert ev.kind is InterruptionKind.SPOT_INTERRUPTION
    assert ev.deadline == 1612292749.0 + SPOT_NOTICE_S


def test_rebalance_has_no_deadline() -> None:
    (ev,) = parse_event(
        _envelope("EC2 Instance Rebalance Recommendation", {"instance-id": "i-0b662ef9931388ba0"})
    )
    assert ev.kind is InterruptionKind.REBALANCE and ev.deadline is None


@pytest.mark.parametrize(
    ("state", "loss"),
    [
        ("pending", False),
        ("running", False),
        ("stopping", True),
        ("stopped", True),
        ("shutting-down", True),
        ("terminated", True),
    ],
)
def test_state_change_is_a_loss_only_when_going(state: str, loss: bool) -> None:
    got = parse_event(
        _envelope(
            "EC2 Instance State-change Notification",
            {"instance-id": "i-0b662ef9931388ba0", "state": state},
        )
    )
    assert [e.kind for e in got] == ([InterruptionKind.STATE_CHANGE] if loss else [])


def test_health_scheduled_change_names_every_affected_instance() -> None:
    detail = {
        "eventArn": "arn:aws:health:us-east-1::event/EC2/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED/x",
        "service": "EC2",
        "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
        "eventTypeCategory": "scheduledChange",
        "startTime": "Sat, 05 Jun 2021 15:10:09 GMT",
        "affectedEntities": [
            {"entityValue": "i-01"},
            {"entityValue": "vol-02"},
            {"entityValue": "i-03"},
        ],
    }
    got = parse_event(_envelope("AWS Health Event", detail), "r")
    assert [e.instance_id for e in got] == ["i-01", "i-03"]
    assert {e.kind for e in got} == {InterruptionKind.SCHEDULED}
    assert {e.deadline for e in got} == {1622905809.0}
    # an issue notice (not a scheduled change) or another service: not an interruption
    assert (
        parse_event(_envelope("AWS Health Event", {**detail, "eventTypeCategory": "issue"})) == []
    )
    assert parse_event(_envelope("AWS Health Event", {**detail, "service": "RDS"})) == []


def test_other_events_are_ignored() -> None:
    assert parse_event(_envelope("EC2 Instance Launch Successful", {"x": 1})) == []


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        ("[" * 100_000, "not JSON"),
        (json.dumps({"Type": "Notification", "Message": "{}"}), "not an EventBridge event"),
        (
            _envelope("EC2 Spot Instance Interruption Warning", {"instance-action": "terminate"}),
            "instance-id",
        ),
        (_envelope("EC2 Instance Rebalance Recommendation", {"instance-id": 42}), "instance-id"),
        (
            _envelope(
                "AWS Health Event", {"service": "EC2", "eventTypeCategory": "scheduledChange"}
            ),
            "affectedEntities",
        ),
    ],
)
def test_unreadable_messages_say_why(body: str, words: str) -> None:
    with pytest.raises(UnreadableEvent) as err:
        parse_event(body)
    assert words in str(err.value) and "\n" not in str(err.value)
