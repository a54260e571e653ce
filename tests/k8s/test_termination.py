"""The one termination path (``k8s.capacity.termination.Terminator``): every caller's request
gives the same ordered steps — cordon (if asked), each instance deleted through the provider and
counted, the Node's idle clocks forgotten, the Node deleted — on a recording fake API and cloud
(the live tests run it against the real API server and the kwok cloud)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from prometheus_client import CollectorRegistry

from gpufleet.cloud.provider import Instance, InstanceState
from gpufleet.decisions import CapacityType, Terminate
from gpufleet.k8s.capacity.metrics import CapacityMetrics
from gpufleet.k8s.capacity.termination import Terminator
from gpufleet.k8s.translate import names


def inst(iid: str, state: InstanceState = InstanceState.RUNNING) -> Instance:
    return Instance(iid, f"kwok://{iid}", "p3.2xlarge", "us-east-1a", CapacityType.ON_DEMAND,
                    state, 0.0)


class Log:
    def __init__(self, nodes: dict[str, dict[str, str]], instances: list[Instance]) -> None:
        self.calls: list[tuple[str, str]] = []
        self.nodes = nodes  # name -> annotations
        self.instances = instances

    # the API calls the path makes
    def patch_node(self, name: str, body: dict, **_: Any) -> None:
        self.calls.append(("cordon", name))

    def delete_node(self, name: str, **_: Any) -> None:
        self.calls.append(("delete-node", name))

    def read_node(self, name: str) -> Any:
        if name not in self.nodes:
            raise ApiException(status=404)
        return SimpleNamespace(spec=SimpleNamespace(provider_id=f"kwok://{name}"),
                               metadata=SimpleNamespace(annotations=self.nodes[name]))

    # the provider calls
    name = "kwok"

    def list(self) -> list[Instance]:
        return list(self.instances)

    def delete(self, iid: str) -> None:
        self.calls.append(("delete-instance", iid))


def rig(nodes: dict[str, dict[str, str]], instances: list[Instance]
        ) -> tuple[Terminator, Log, CapacityMetrics]:
    log = Log(nodes, instances)
    metrics = CapacityMetrics(CollectorRegistry())

    def forget(node: str) -> None:
        log.calls.append(("forget", node))

    return Terminator(log, log, metrics, forget), log, metrics  # type: ignore[arg-type]


@pytest.mark.parametrize(("name", "kwargs", "calls", "counted"), [
    ("emptiness: cordon first", dict(reason="empty", node="n1", instances=[inst("n1")],
                                     cordon=True),
     [("cordon", "n1"), ("delete-instance", "n1"), ("forget", "n1"), ("delete-node", "n1")],
     ("empty", 1)),
    ("a launch that never registered: an instance, no Node",
     dict(reason="registration-timeout", instances=[inst("i-1")]),
     [("delete-instance", "i-1")], ("registration-timeout", 1)),
    ("a leak", dict(reason="leak", instances=[inst("i-2")]), [("delete-instance", "i-2")],
     ("leak", 1)),
    ("instance gone: a Node, nothing counted", dict(reason="instance gone", node="n2"),
     [("forget", "n2"), ("delete-node", "n2")], ("instance gone", 0)),
])
def test_every_caller_takes_the_same_steps(name: str, kwargs: dict, calls: list,
                                           counted: tuple[str, int]) -> None:
    term, log, metrics = rig({}, [])
    term.terminate(**kwargs)
    assert log.calls == calls, name
    reason, n = counted
    assert metrics.terminations.labels(reason=reason)._value.get() == n


@pytest.mark.parametrize(("name", "annotations", "reason"), [
    ("interrupted", {names.ANN_INTERRUPTION: "{}"}, "interruption"),
    ("consolidated", {names.ANN_CONSOLIDATION: "{}"}, "consolidation"),
])
def test_a_drained_node_is_terminated_with_its_instance(name: str, annotations: dict,
                                                        reason: str) -> None:
    others = [inst("other"), inst("n1-old", InstanceState.TERMINATING)]
    term, log, metrics = rig({"n1": annotations}, [inst("n1"), *others])
    term.terminate_drained(Terminate("n1", "drained"))
    assert log.calls == [("delete-instance", "n1"), ("forget", "n1"), ("delete-node", "n1")]
    assert metrics.terminations.labels(reason=reason)._value.get() == 1, name


def test_a_drained_node_already_gone_is_no_error() -> None:
    term, log, _ = rig({}, [inst("n9")])  # Node object gone (404), instance still listed
    term.terminate_drained(Terminate("n9", "drained"))
    assert log.calls == [("delete-instance", "n9"), ("forget", "n9"), ("delete-node", "n9")]
