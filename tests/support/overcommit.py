"""The over-commit check every live test ends with: list the cluster's Pods and Nodes — and,
when the API server serves ``resource.k8s.io/v1``, its ResourceClaims and ResourceSlices — from
the API (nothing from a controller's memory) and find any GPU given out twice
(:func:`gpufleet.k8s.translate.overcommit.find_overcommits`: milli per GPU ≤ 1000, no MIG slot
twice, whole GPUs exclusive, indices within the node's GPUs; for claims, devices that exist,
exclusive devices once, shares and counters within capacity, allocations on the pod's node).

The live conftests call :func:`check_after_live_test` from a ``pytest_runtest_call`` wrapper,
right after the test body and before its fixtures tear down: a fixture's teardown would run after
the test's own cleanup (its namespace and nodes deleted), when there is nothing left to check.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.k8s.translate.overcommit import Overcommit, find_overcommits
from gpufleet.k8s.watch.informer import list_all
from gpufleet.lab.kubelet_check import list_cluster
from gpufleet.lab.session import LabSession


def listed(call: Any) -> list[dict]:
    """Every object of a list call (e.g. ``core.list_node``), paged, as the API's JSON."""
    return list_all(call)[0]


def cluster_overcommits(core: Any) -> list[Overcommit]:
    """Over-commits in the cluster ``core`` (a ``kubernetes.client.CoreV1Api``) talks to."""
    objs = list_cluster(core.api_client)
    return find_overcommits(objs.nodes, objs.pods, claims=objs.claims, slices=objs.slices)


def assert_no_overcommit(core: Any) -> None:
    found = cluster_overcommits(core)
    assert not found, "GPUs over-committed:\n" + "\n".join(f"  {f}" for f in found)


def check_after_live_test(item: pytest.Item) -> None:
    """The check for one test that used a lab: the shared one, or a lab of its own (any
    :class:`~gpufleet.lab.session.LabSession` among its fixtures); no-op for any other test."""
    for value in getattr(item, "funcargs", {}).values():
        if isinstance(value, LabSession):
            assert_no_overcommit(value.core)
