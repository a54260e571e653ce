"""CEL selectors gpufleet evaluates, on the lab's real API server (which validates the claims'
expressions with Kubernetes' own compiler) and the lab's NVIDIA-shaped ResourceSlices. The
controller runs in-process, leader election off."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from dra_objects import Space, results
from live_controller import running_controller
from live_wait import wait_for

from gpufleet.k8s.dra.cel import DeviceInput, matches
from gpufleet.k8s.schedule.controller import Controller
from gpufleet.k8s.translate.resource_slices import DRIVER

pytestmark = pytest.mark.live
PRODUCT = f"device.attributes['{DRIVER}'].productName"


@pytest.fixture()
def space(lab: Any) -> Iterator[Space]:
    sp = Space(lab)
    yield sp
    core = lab.core
    core.delete_collection_namespaced_pod(sp.name, grace_period_seconds=0)
    wait_for("the test's pods to go", lambda: not core.list_namespaced_pod(sp.name).items, 60)
    for n in sp.nodes:
        core.delete_node(n)
    core.delete_namespace(sp.name)


@pytest.fixture()
def controller(lab: Any) -> Iterator[Controller]:
    with running_controller(lab.api) as ctl:
        assert ctl.dra, "the lab serves resource.k8s.io/v1"
        yield ctl


def test_a_regex_on_the_product_name_binds_to_a_matching_gpu_and_a_miss_waits_with_why(
        space: Space, controller: Controller) -> None:
    """A T4 node (g4dn.xlarge) and an A100 node (p4d.24xlarge). NVIDIA's example selector —
    ``productName.lowerAscii().matches('^.*a100.*$')`` — binds its pod on the A100 node, its
    claim allocated a device whose published productName the expression admits; a claim for
    a B200 (no instance type the lab knows has one, in any zone) stays unallocated and its pod
    Unschedulable, the PodScheduled condition naming the claim's selector."""
    (t4,) = space.add("g4dn.xlarge")
    (a100,) = space.add("p4d.24xlarge")
    want = f"{PRODUCT}.lowerAscii().matches('^.*a100.*$')"
    miss = f"{PRODUCT}.lowerAscii().matches('^.*b200.*$')"
    space.claim("a100", cel=want)
    space.claim("b200", cel=miss)
    space.pod("on-a100", claim="a100")
    space.pod("on-b200", claim="b200")
    pod = wait_for("the A100 pod to bind", lambda: space.bound("on-a100"))
    assert pod["spec"]["nodeName"] == a100 != t4
    (res,) = results(space.read_claim("a100"))
    assert res["pool"] == a100
    device = space.device(a100, res["device"])
    assert matches(want, DeviceInput(device, DRIVER))
    msg = wait_for("the B200 pod to be refused", lambda: space.scheduled_message("on-b200"))
    assert msg.startswith(f"claim {space.name}/b200: selector #0: no published GPU device "
                          f"matches {miss!r}"), msg
    assert space.bound("on-b200") is None
    assert not (space.read_claim("b200").get("status") or {}).get("allocation")
