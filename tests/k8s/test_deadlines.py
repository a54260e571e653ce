"""Live deadlines without an API server: the annotations (``k8s.translate.deadlines``), the pin
the control layer's guard gives, and where the pin acts (placement's tolerations, scale-up's
spot choice). Provisioning delay 10 s throughout, so the rerun rule is
``deadline − now ≥ 2·duration + 10`` and hopeless below ``duration + 10``."""

from __future__ import annotations

import pytest

from gpufleet.config import Scenario
from gpufleet.control.admission import SPOT_TAINT
from gpufleet.control.deadline import GuardConfig
from gpufleet.k8s.capacity.inputs import pending_pods
from gpufleet.k8s.settings import apply_levers, live_guards
from gpufleet.k8s.translate.deadlines import pinned_on_demand
from gpufleet.k8s.translate.names import ANN_DEADLINE, ANN_DURATION
from gpufleet.k8s.translate.pods import pod_info, spot_ok, tolerated_now
from gpufleet.k8s.translate.snapshot import build_snapshot

CREATED = 1_767_225_600.0  # 2026-01-01T00:00:00Z
SPOT_TOL = {"key": "karpenter.sh/capacity-type", "operator": "Exists"}
CFG = GuardConfig(autoscaling=True, checkpointing=True, provisioning_delay_s=10.0,
                  max_pending_wait_s=60.0)


def pod(name: str, ann: dict[str, str] | None = None, spot: bool = True) -> dict:
    return {"metadata": {"name": name, "namespace": "ns", "annotations": ann or {},
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"schedulerName": "gpufleet", "tolerations": [SPOT_TOL] if spot else [],
                     "containers": [{"name": "c", "resources": {"limits": {
                         "nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Pending"}}


@pytest.mark.parametrize(("ann", "want"), [
    ({}, (None, None, None)),
    ({ANN_DEADLINE: "2026-01-01T00:15:00Z"}, (CREATED + 900, None, None)),
    ({ANN_DEADLINE: "2026-01-01T01:15:00+01:00"}, (CREATED + 900, None, None)),
    ({ANN_DEADLINE: "2026-01-01T00:15:00.5Z", ANN_DURATION: "600"},
     (CREATED + 900.5, 600.0, None)),
    ({ANN_DURATION: "0"}, (None, 0.0, None)),
])
def test_valid_annotations(ann: dict, want: tuple) -> None:
    info = pod_info(pod("p", ann))
    assert (info.deadline_s, info.work_s, info.refusal) == want


@pytest.mark.parametrize(("ann", "named"), [
    ({ANN_DEADLINE: "tomorrow"}, ANN_DEADLINE),
    ({ANN_DEADLINE: "2026-01-01T00:15:00"}, ANN_DEADLINE),  # no UTC offset: ambiguous
    ({ANN_DEADLINE: "2026-01-01"}, ANN_DEADLINE),
    ({ANN_DEADLINE: "2026-01-01T00:15:00Z", ANN_DURATION: "10m"}, ANN_DURATION),
    ({ANN_DURATION: "-5"}, ANN_DURATION),
    ({ANN_DURATION: "nan"}, ANN_DURATION),
])
def test_bad_annotations_refuse_the_pod_naming_the_annotation(ann: dict, named: str) -> None:
    info = pod_info(pod("p", ann))
    why = info.refusal
    assert why is not None and why.startswith(f'annotation {named}: "{ann[named]}" is not ')
    assert info.request is None


@pytest.mark.parametrize(("name", "deadline_in", "duration", "spot", "cfg", "pinned"), [
    ("rerun fits: 1,210 ≥ 2·600 + 10", 1210, "600", True, CFG, False),
    ("rerun does not fit: 1,209", 1209, "600", True, CFG, True),
    ("the live test's pod: 900 < 1,210", 900, "600", True, CFG, True),
    ("hopeless: 609 < 600 + 10, left to spot", 609, "600", True, CFG, False),
    ("not spot-tolerant: nothing to move off", 900, "600", False, CFG, False),
    ("guards off", 900, "600", True, None, False),
    ("no duration: only the boot counts, 5 < 10 is hopeless", 5, None, True, CFG, False),
    ("no duration, 60 s left: rerun needs 10, fits", 60, None, True, CFG, False),
])
def test_pin_case_table(name: str, deadline_in: float, duration: str | None, spot: bool,
                        cfg: GuardConfig | None, pinned: bool) -> None:
    from datetime import UTC, datetime

    at = datetime.fromtimestamp(CREATED + deadline_in, UTC).isoformat()
    ann = {ANN_DEADLINE: at} | ({ANN_DURATION: duration} if duration else {})
    info = pod_info(pod("p", ann, spot))
    assert pinned_on_demand(info, spot_ok(info), cfg, CREATED) is pinned, name


def test_a_pinned_pod_loses_the_spot_toleration_and_gets_an_on_demand_launch() -> None:
    sc = Scenario(name="dl", spot=True, provisioning_delay_s=10.0, max_pending_wait_s=60.0,
                  cloud={"name": "kwok"})
    assert live_guards(sc) == CFG
    assert live_guards(sc.model_copy(update={"spot": False})) is None
    assert live_guards(sc.model_copy(update={"cloud": None})) is None  # no capacity loop
    due = pod("due", {ANN_DEADLINE: "2026-01-01T00:15:00Z", ANN_DURATION: "600"})
    snap = build_snapshot([], [due, pod("free")])
    apply_levers(snap, sc, now=CREATED)
    by = {p.key: p for p in snap.pending}
    assert by["ns/due"].on_demand_only and not by["ns/free"].on_demand_only
    taints = [SPOT_TAINT, "other=x:NoSchedule"]
    assert tolerated_now(by["ns/due"], taints) == frozenset()  # SPOT_TOL is key-scoped
    assert tolerated_now(by["ns/free"], taints) == {SPOT_TAINT}
    got = {p.job_id: p for p in pending_pods(snap, ["ns/due", "ns/free"], CREATED, CFG)}
    assert not got["ns/due"].spot_ok and got["ns/free"].spot_ok
    # urgent: 900 < 600 + 10 + 60 is false, so scale-up's wait trigger still applies
    assert not got["ns/due"].urgent
    got = {p.job_id: p for p in pending_pods(snap, ["ns/due"], CREATED + 250, CFG)}
    assert got["ns/due"].urgent  # 650 s left < 670
