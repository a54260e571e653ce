"""The controller's ``--config`` levers: the control layer's admission rule applied to pods."""

from __future__ import annotations

from gpufleet.config import default_scenario
from gpufleet.k8s.settings import apply_levers
from gpufleet.k8s.translate.snapshot import build_snapshot
from gpufleet.state import GPU_MILLI


def _pods() -> list[dict]:
    def pod(name: str, limits: dict, ann: dict | None = None) -> dict:
        return {"metadata": {"name": name, "namespace": "ns", "annotations": ann or {},
                             "labels": {}, "creationTimestamp": "2026-01-01T00:00:00Z"},
                "spec": {"schedulerName": "gpufleet", "nodeName": "",
                         "containers": [{"name": "c", "resources": {"limits": limits}}]},
                "status": {"phase": "Pending"}}

    return [pod("half", {}, {"gpu-fraction": "0.5"}), pod("two", {"nvidia.com/gpu": "2"}),
            pod("mig", {"nvidia.com/mig-1g.5gb": "1"})]


def _requests(sharing: bool) -> dict[str, tuple[int, int, str | None]]:
    snap = build_snapshot([], _pods())
    apply_levers(snap, default_scenario().model_copy(update={"sharing": sharing}))
    return {p.key: (p.request.num_gpu, p.request.gpu_milli, p.request.mig_profile)
            for p in snap.pending if p.request is not None}


def test_without_sharing_a_fraction_takes_a_whole_gpu_and_nothing_else_changes() -> None:
    shared = _requests(sharing=True)
    assert shared["ns/half"] == (1, 500, None)
    exclusive = _requests(sharing=False)
    assert exclusive["ns/half"] == (1, GPU_MILLI, None)
    assert exclusive["ns/two"] == shared["ns/two"] == (2, GPU_MILLI, None)
    assert exclusive["ns/mig"] == shared["ns/mig"]
