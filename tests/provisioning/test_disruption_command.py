"""Disruption methods behind one Protocol, their order, and Command.validate (re-checked before
a command runs, Karpenter style)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpufleet.provisioning.disruption import (
    DisruptionPolicy,
    DisruptionSnapshot,
    Emptiness,
    MultiNodeConsolidation,
    NodeView,
    PodView,
    SingleNodeConsolidation,
)
from gpufleet.provisioning.disruption.method import DisruptionMethod

from .test_disruption import cpu_node, hungry, node, offers, pod


def test_the_ordered_list_and_switches() -> None:
    names = [m.name for m in DisruptionPolicy().methods()]
    assert names == ["emptiness", "single-node-consolidation", "multi-node-consolidation"]
    assert [m.name for m in DisruptionPolicy(multi_node=False).methods()] == names[:2]
    assert [m.name for m in DisruptionPolicy(consolidation=False).methods()] == names[:1]
    methods: list[DisruptionMethod] = [Emptiness(), SingleNodeConsolidation(),
                                       MultiNodeConsolidation()]
    assert all(callable(m.compute) for m in methods)


def test_first_method_that_acts_wins() -> None:
    """An empty node and a consolidatable one: emptiness acts, consolidation waits a scan."""
    nodes = [node("empty", 0, empty=0.0), node("low", 1, (pod("j1"),), under=0.0),
             node("roomy", 1, (pod("x"),))]
    cmd = DisruptionPolicy(unneeded_s=600).decide(nodes, 700.0)
    assert cmd is not None and cmd.method == "emptiness"
    snap = DisruptionSnapshot(nodes, 700.0)
    alone = SingleNodeConsolidation(unneeded_s=600).compute(snap)
    assert alone is not None and alone.candidates == ("low",)


def test_a_command_is_valid_on_the_snapshot_it_was_computed_on() -> None:
    nodes = [node("a", 0, empty=0.0), node("low", 1, (pod("j1"),), under=0.0),
             node("roomy", 1, (pod("x"),))]
    snap = DisruptionSnapshot(nodes, 700.0)
    for method in DisruptionPolicy(unneeded_s=600).methods():
        cmd = method.compute(snap)
        if cmd is not None:
            assert cmd.validate(snap) == []
    multi = [cpu_node("a", (hungry("j1"),)), cpu_node("b", (hungry("j2"),))]
    msnap = DisruptionSnapshot(multi, 700.0, offers(10.0))
    cmd = DisruptionPolicy(unneeded_s=600).decide(multi, 700.0, offers(10.0))
    assert cmd is not None and cmd.replacement is not None
    assert cmd.validate(msnap) == []


def test_emptiness_rechecked_after_a_pod_landed() -> None:
    nodes = [node("a", 0, empty=0.0)]
    cmd = Emptiness(600).compute(DisruptionSnapshot(nodes, 700.0))
    assert cmd is not None
    now = DisruptionSnapshot([node("a", 1, (pod("late"),))], 710.0)
    assert cmd.validate(now) == ["a is no longer empty"]
    assert cmd.validate(DisruptionSnapshot([], 710.0)) == ["a is gone"]


def _single() -> tuple[list[NodeView], object]:
    nodes = [node("low", 1, (pod("j1"),), under=0.0), node("roomy", 1, (pod("x"),))]
    cmd = SingleNodeConsolidation(600).compute(DisruptionSnapshot(nodes, 700.0))
    assert cmd is not None
    return nodes, cmd


@pytest.mark.parametrize(
    ("what", "change", "reason"),
    [
        ("room filled", lambda n: [n[0], node("roomy", 4, tuple(pod(f"f{i}") for i in range(4)))],
         "the pods no longer fit elsewhere"),
        ("another pod arrived", lambda n: [node("low", 2, (pod("j1"), pod("j9")), under=0.0),
                                           n[1]], "the candidates' pods changed"),
        ("pod pinned meanwhile", lambda n: [replace(n[0], pods=(PodView(
            "j1", n[0].pods[0].request, False, True),)), n[1]], "a pod is no longer movable"),
        ("candidate gone", lambda n: [n[1]], "low is gone"),
    ],
)
def test_consolidation_rechecked(what: str, change, reason: str) -> None:  # type: ignore[no-untyped-def]
    nodes, cmd = _single()
    assert cmd.validate(DisruptionSnapshot(change(nodes), 710.0)) == [reason]  # type: ignore[attr-defined]


def test_multi_node_rechecked_against_its_replacement() -> None:
    multi = [cpu_node("a", (hungry("j1"),)), cpu_node("b", (hungry("j2"),))]
    cmd = DisruptionPolicy(unneeded_s=600).decide(multi, 700.0, offers(10.0))
    assert cmd is not None
    # the same two nodes, but the pods grew past what the replacement shape offers
    big = replace(hungry("j1").request, cpu_milli=40000)
    grown = [cpu_node("a", (PodView("j1", big, True, True),)), cpu_node("b", (hungry("j2"),))]
    assert cmd.validate(DisruptionSnapshot(grown, 710.0)) == ["the pods no longer fit elsewhere"]
