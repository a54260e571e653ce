"""``bench k8s-packing`` end to end on a small slice of openb (its own labs, both schedulers)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpufleet.k8s.bench_packing import claim_manifest, pod_manifest, run_bench
from gpufleet.lab.binaries import missing_reason
from gpufleet.state import ResourceRequest
from gpufleet.traces.openb import load_nodes, load_pods

pytestmark = [pytest.mark.live, pytest.mark.slow]


def test_pod_manifests_round_fractions_up_only_for_kube_scheduler() -> None:
    half = ResourceRequest(cpu_milli=2000, memory_mib=1024, num_gpu=1, gpu_milli=500,
                           gpu_models=frozenset({"T4"}))
    ours = pod_manifest("a", half, "gpufleet")
    kube = pod_manifest("a", half, "kube-scheduler")
    assert ours["metadata"]["annotations"] == {"gpu-fraction": "0.500"}
    assert "nvidia.com/gpu" not in ours["spec"]["containers"][0]["resources"]["limits"]
    assert kube["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert kube["spec"]["schedulerName"] == "default-scheduler"
    term = ours["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
    assert term["matchExpressions"][0]["values"] == ["Tesla-T4"]


def test_dra_manifests_give_both_schedulers_the_same_claim() -> None:
    """--dra: a 0.25 share is one shareable GPU with 4 GiB (0.25 × 16 GiB) for both; gpufleet
    keeps gpu-fraction for its milli-GPU; two whole GPUs are count 2; no nvidia.com/gpu."""
    quarter = ResourceRequest(cpu_milli=1000, memory_mib=1024, num_gpu=1, gpu_milli=250)
    two = ResourceRequest(cpu_milli=1000, memory_mib=1024, num_gpu=2)
    assert claim_manifest("q", quarter)["spec"]["devices"]["requests"] == [{"name": "gpu",
        "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 1,
                    "capacity": {"requests": {"memory": "4096Mi"}}}}]
    assert claim_manifest("t", two)["spec"]["devices"]["requests"][0]["exactly"] == {
        "deviceClassName": "gpu.nvidia.com", "count": 2}
    for sched, ann in (("gpufleet", {"gpu-fraction": "0.250"}), ("kube-scheduler", {})):
        pod = pod_manifest("q", quarter, sched, claim="q")
        c = pod["spec"]["containers"][0]
        assert pod["metadata"]["annotations"] == ann
        assert "nvidia.com/gpu" not in c["resources"]["limits"]
        assert c["resources"]["claims"] == [{"name": "gpu"}]
        assert pod["spec"]["resourceClaims"] == [{"name": "gpu", "resourceClaimName": "q"}]


def test_both_schedulers_bind_the_same_slice(shared_data: Path) -> None:
    reason = missing_reason()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI runs the live suite with no skips: {reason}")
        pytest.skip(reason)
    nodes = load_nodes(shared_data / "openb" / "openb_node_list_gpu_node.csv")[::60]
    pods = [p.request for p in load_pods(shared_data / "openb" / "openb_pod_list_default.csv")]
    out = run_bench(["gpufleet", "kube-scheduler"], nodes, pods, limit=40)
    res = {r["scheduler"]: r for r in out["results"]}
    assert set(res) == {"gpufleet", "kube-scheduler"}
    for r in res.values():
        assert r["pods_submitted"] == 40 and 0 < r["pods_bound"] <= 40
        assert r["pods_per_s"] > 0 and r["latency_p50_s"] <= r["latency_p99_s"]
        assert r["overcommitted_gpus"] == 0
        assert sum(n for _start, n, _p50, _p99 in r["timeline"]) == r["pods_bound"]
    # sharing never leaves more of the requested GPU load unallocated than rounding up does
    assert res["gpufleet"]["unallocated_pct"] <= res["kube-scheduler"]["unallocated_pct"]
    assert out["client_qps"] > 0 and out["nodes"] == len(nodes)
