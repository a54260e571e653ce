"""gpufleet and kube-scheduler 1.36 allocating DRA devices side by side, on a lab of their own
(the shared lab runs no kube-scheduler): each counts the other's allocated claims as taken, and
kube-scheduler's allocator honours the counters of the MIG device gpufleet allocated.

Pods are created one at a time, each bound before the next: two schedulers that allocate at the
same instant from informers a few milliseconds old could still pick one device — the API server
does not check devices against slices, and kube-scheduler has no lock to share — so this test
checks what each scheduler can: never allocate what the other has written.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from dra_objects import Space, allocated, results
from live_controller import running_controller
from live_wait import wait_for

from gpufleet.catalog.instances import default_instance_catalog
from gpufleet.k8s.schedule.controller import Controller
from gpufleet.lab.cluster import LabOptions, down, up
from gpufleet.lab.session import LabSession

pytestmark = pytest.mark.live
IT = default_instance_catalog()
MINOR = "device.attributes['gpu.nvidia.com'].minor == {}"


@pytest.fixture(scope="module")
def kube_lab(lab_binaries: Path) -> Iterator[LabSession]:
    with tempfile.TemporaryDirectory(prefix="gpufleet-dra-kube-") as tmp:
        info = up(LabOptions(directory=Path(tmp), nodes=[], controller=False,
                             kube_scheduler=True, device_plugin=True))
        try:
            yield LabSession(info)
        finally:
            down(Path(tmp))


@pytest.fixture()
def kspace(kube_lab: LabSession) -> Iterator[Space]:
    sp = Space(kube_lab)
    yield sp
    kube_lab.core.delete_collection_namespaced_pod(sp.name, grace_period_seconds=0)
    wait_for("the test's pods to go",
             lambda: not kube_lab.core.list_namespaced_pod(sp.name).items, 60)
    for n in sp.nodes:
        kube_lab.core.delete_node(n)


@pytest.fixture()
def gpufleet(kube_lab: LabSession) -> Iterator[Controller]:
    with running_controller(kube_lab.api) as ctl:
        yield ctl


def _devices(space: Space, claims: list[str]) -> list[tuple[str, str]]:
    return [(r["pool"], r["device"]) for c in claims for r in results(space.read_claim(c))]


def test_side_by_side_never_double_book(kspace: Space, gpufleet: Controller) -> None:
    """Two g4dn.12xlarge: 8 T4s. Eight 1-GPU claims, alternately for gpufleet and kube-
    scheduler, take eight distinct devices; a ninth for each then stays pending."""
    kspace.add("g4dn.12xlarge", 2)
    names = []
    for i in range(8):
        sched = "gpufleet" if i % 2 == 0 else "default-scheduler"
        kspace.claim(f"c{i}")
        kspace.pod(f"p{i}", claim=f"c{i}", scheduler=sched)
        wait_for(f"p{i} ({sched}) to bind", lambda i=i: kspace.bound(f"p{i}"))
        names.append(f"c{i}")
    devs = _devices(kspace, names)
    assert len(set(devs)) == 8, devs
    for i, sched in ((8, "gpufleet"), (9, "default-scheduler")):
        kspace.claim(f"c{i}")
        kspace.pod(f"p{i}", claim=f"c{i}", scheduler=sched)
    wait_for("both ninth pods refused", lambda: kspace.scheduled_message("p8")
             and kspace.scheduled_message("p9"))
    assert kspace.bound("p8") is None and kspace.bound("p9") is None
    assert allocated(kspace, "c8") is None and allocated(kspace, "c9") is None


def test_kube_scheduler_honours_the_counters_of_gpufleets_mig_device(
        kspace: Space, gpufleet: Controller) -> None:
    """A p4d.24xlarge in dynamic MIG. gpufleet allocates a 3g.20gb on GPU k; kube-scheduler
    cannot then allocate GPU k whole (the shared counters are taken) but can allocate another
    GPU j whole; gpufleet's next 3g.20gb does not go to GPU j."""
    (node,) = kspace.add("p4d.24xlarge", mig_config="all-enabled")
    mig = "device.attributes['gpu.nvidia.com'].profile == '3g.20gb'"
    kspace.claim("mig-1", cls="mig.nvidia.com", cel=mig)
    kspace.pod("m1", claim="mig-1")
    wait_for("gpufleet's MIG pod to bind", lambda: kspace.bound("m1"))
    (r,) = results(kspace.read_claim("mig-1"))
    k = int(kspace.device(node, r["device"])["attributes"]["minor"]["int"])
    j = (k + 1) % 8
    kspace.claim("whole-k", cel=MINOR.format(k))
    kspace.pod("wk", claim="whole-k", scheduler="default-scheduler")
    kspace.claim("whole-j", cel=MINOR.format(j))
    kspace.pod("wj", claim="whole-j", scheduler="default-scheduler")
    wait_for("kube-scheduler to place GPU j", lambda: kspace.bound("wj"))
    msg = wait_for("kube-scheduler to refuse GPU k", lambda: kspace.scheduled_message("wk"))
    assert "cannot allocate all claims" in msg or "resourceclaim" in msg.lower(), msg
    assert kspace.bound("wk") is None and allocated(kspace, "whole-k") is None
    assert [x["device"] for x in results(kspace.read_claim("whole-j"))] == [f"gpu-{j}"]
    kspace.claim("mig-2", cls="mig.nvidia.com", cel=mig)
    kspace.pod("m2", claim="mig-2")
    wait_for("gpufleet's second MIG pod to bind", lambda: kspace.bound("m2"))
    (r2,) = results(kspace.read_claim("mig-2"))
    assert int(kspace.device(node, r2["device"])["attributes"]["minor"]["int"]) != j
    assert r2["device"] != r["device"]
