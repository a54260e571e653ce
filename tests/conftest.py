"""Shared fixtures: where the shared trace data lives (tests skip clearly when it is absent),
and the live cluster — one real lab (kine, kube-apiserver, kube-controller-manager, KWOK) per test
session, shared by tests/k8s and tests/lab, torn down at the end.

``lab`` yields a :class:`gpufleet.lab.session.LabSession`: ``.kubeconfig``, ``.api`` (a
``kubernetes.client.ApiClient``), ``.core`` / ``.batch``, ``.add_nodes(specs)`` /
``.add_instance_nodes(type, n)``, ``.namespace()`` (fresh, ready for pods) and ``.kubectl(...)``.
It starts the default mixed fleet and no gpufleet controller: tests run the controller they need.
Tests share the cluster, so each works in its own namespace and on nodes it adds itself. A test
that uses it is marked ``live``.

``share_policy`` applies the gpu-fraction MutatingAdmissionPolicy (``deploy/dra``) for one test
and removes it after.

Every test on the lab ends with the over-commit check (``tests/support/overcommit.py``): no GPU
index, MIG slot or milli-GPU given out twice on any node, read from the API objects alone.

Without the binaries the live tests skip with the build command, except under CI (env ``CI``
set), where a live test may never skip: there it is a failure.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from overcommit import check_after_live_test

from gpufleet.datapaths import ENV_VAR, data_dir
from gpufleet.k8s.dra.shares import POLICY_NAME
from gpufleet.lab.binaries import bin_dir, missing_reason
from gpufleet.lab.session import LabSession, acquire_shared, release_shared


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The ../shared/data folder (or $GPUFLEET_DATA); skips the test when it is not laid out."""
    found = data_dir(required=False)
    if found is None:
        pytest.skip(f"shared data folder absent: set {ENV_VAR} or lay out ../shared/data")
    return found


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if {"lab", "lab_binaries"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.live)


@pytest.fixture(scope="session")
def lab_binaries() -> Path:
    """The directory of the built control-plane binaries (skip, or fail under CI, without)."""
    reason = missing_reason()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI runs the live suite with no skips: {reason}")
        pytest.skip(reason)
    return bin_dir()


@pytest.fixture(scope="session")
def lab(lab_binaries: Path) -> Iterator[LabSession]:
    session = acquire_shared()
    try:
        yield session
    finally:
        release_shared()


@pytest.fixture
def share_policy(lab: LabSession) -> Iterator[None]:
    policy = Path(__file__).resolve().parents[1] / "deploy" / "dra" / "gpu-share-policy.yaml"
    lab.kubectl("apply", "-f", str(policy))
    try:
        yield
    finally:
        # the policy and its binding; the DeviceClass stays (a class other tests' claims name)
        lab.kubectl("delete", "--ignore-not-found", "mutatingadmissionpolicybinding/"
                    f"{POLICY_NAME}", f"mutatingadmissionpolicy/{POLICY_NAME}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Every test on the lab ends with the over-commit check, from the API objects alone
    (``tests/support/overcommit.py``), while its pods and nodes still exist."""
    result = yield
    check_after_live_test(item)
    return result
