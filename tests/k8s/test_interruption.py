"""The interruption mark (annotation + taint) as data: JSON both ways, the patch, the kinds."""

from __future__ import annotations

import json

import pytest

from gpufleet.checkpoint.notices import Notice
from gpufleet.cloud.provider import Interruption, InterruptionKind
from gpufleet.k8s.disruption.agent import StateLog, backoff_s, provider_of
from gpufleet.k8s.disruption.interruption import (
    InterruptionMark,
    kind_of_notice,
    mark_from_event,
    mark_from_notice,
    mark_of,
    marking_patch,
    node_for_instance,
)
from gpufleet.k8s.translate import names


def node(ann: dict | None = None, taints: list | None = None) -> dict:
    return {"metadata": {"name": "n1", "resourceVersion": "42", "annotations": ann or {},
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"taints": taints or []}}


def test_mark_round_trips_through_the_annotation() -> None:
    m = InterruptionMark(InterruptionKind.SPOT_INTERRUPTION, 1000.5, 880.0, "aws-sqs")
    doc = json.loads(m.to_json())
    assert doc == {"kind": "spot-interruption", "deadline": 1000.5, "noticed_at": 880.0,
                   "source": "aws-sqs"}
    assert InterruptionMark.from_json(m.to_json()) == m
    assert mark_of(node({names.ANN_INTERRUPTION: m.to_json()})) == m
    assert mark_of(node()) is None


@pytest.mark.parametrize(("text", "field"), [
    ("{", "not JSON"),
    ("[1]", "JSON object"),
    ('{"kind": "meteor", "noticed_at": 1}', "'kind'"),
    ('{"kind": "spot-interruption", "noticed_at": "soon"}', "'noticed_at'"),
    ('{"kind": "spot-interruption", "noticed_at": 1, "deadline": true}', "'deadline'"),
])
def test_a_malformed_annotation_names_the_field(text: str, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        InterruptionMark.from_json(text)
    # no source of the convention wrote that: the node is not drained on it
    assert mark_of(node({names.ANN_INTERRUPTION: text})) is None


def test_the_patch_appends_the_taint_once_and_carries_the_resource_version() -> None:
    other = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    m = InterruptionMark(InterruptionKind.SPOT_INTERRUPTION, None, 5.0, "agent")
    patch = marking_patch(node(taints=[other]), m)
    assert patch["metadata"]["resourceVersion"] == "42"
    assert patch["metadata"]["annotations"] == {names.ANN_INTERRUPTION: m.to_json()}
    assert patch["spec"]["taints"] == [other, {"key": names.INTERRUPTED_TAINT_KEY,
                                               "value": "agent", "effect": "NoSchedule"}]
    again = marking_patch(node(taints=patch["spec"]["taints"]), m)
    assert again["spec"]["taints"] == patch["spec"]["taints"]


def test_notices_map_to_the_provider_contract_kinds() -> None:
    term = Notice("aws", "terminate", 200.0, "{}")
    assert kind_of_notice(term) is InterruptionKind.SPOT_INTERRUPTION
    assert kind_of_notice(Notice("gcp", "preempted", 30.0, "TRUE")) is (
        InterruptionKind.SPOT_INTERRUPTION)
    assert kind_of_notice(Notice("aws", "rebalance", None, "{}")) is InterruptionKind.REBALANCE
    m = mark_from_notice(term, now=100.0)
    assert (m.deadline, m.noticed_at, m.source) == (200.0, 100.0, "agent")


def test_provider_from_the_nodes_provider_id() -> None:
    assert provider_of("aws:///us-east-1a/i-0abc") == "aws"
    assert provider_of("alicloud://cn-hangzhou.i-bp1") == "aliyun"
    assert provider_of("gce://proj/us-central1-a/vm") == "gcp"
    assert provider_of("kwok://node-1") is None
    assert provider_of(None) is None


@pytest.mark.parametrize(("attempt", "cap", "seconds"), [
    (0, 60.0, 1.0), (1, 60.0, 2.0), (2, 60.0, 4.0), (5, 60.0, 32.0),
    (6, 60.0, 60.0),  # 64 > the cap
    (1000, 60.0, 60.0),  # no overflow however long it waits
    (3, 5.0, 5.0),
])
def test_the_agents_retry_backoff_doubles_up_to_its_cap(attempt: int, cap: float,
                                                        seconds: float) -> None:
    assert backoff_s(attempt, cap) == seconds


def test_the_agent_logs_a_state_once_until_it_changes(caplog: pytest.LogCaptureFixture) -> None:
    say = StateLog()
    for state in ["no providerID", "no providerID", "API 503", "API 503", "no providerID"]:
        say(state)
    assert [r.getMessage() for r in caplog.records] == ["no providerID", "API 503",
                                                        "no providerID"]


def test_the_controller_finds_the_node_of_an_interrupted_instance_by_provider_id() -> None:
    nodes = [{"metadata": {"name": n}, "spec": {"providerID": pid}} for n, pid in (
        ("ip-10-0-0-1", "aws:///us-east-1a/i-0abc"), ("cn-1", "alicloud://cn-hangzhou.i-bp1x"),
        ("kw-1", "kwok://kw-1"), ("bare", None))]
    assert node_for_instance(nodes, "i-0abc") == "ip-10-0-0-1"
    assert node_for_instance(nodes, "i-bp1x") == "cn-1"
    assert node_for_instance(nodes, "kw-1") == "kw-1"
    assert node_for_instance(nodes, "i-0ab") is None  # a prefix of an id is not that id
    ev = Interruption("i-0abc", InterruptionKind.REBALANCE, deadline=None, receipt="r")
    m = mark_from_event(ev, "aws-sqs", now=7.0)
    assert (m.kind, m.deadline, m.noticed_at, m.source) == (
        InterruptionKind.REBALANCE, None, 7.0, "aws-sqs")
