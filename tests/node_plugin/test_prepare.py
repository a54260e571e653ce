"""Preparing claims: limits from consumedCapacity, the per-GPU sum check, idempotence, the
checkpoint across a restart. Numbers worked by hand beside each row; the GPUs have 80 GiB
(81920 MiB) and 100 % of their cores."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpufleet.node_plugin import DRIVER
from gpufleet.node_plugin.cdi import Share
from gpufleet.node_plugin.inventory import Gpu
from gpufleet.node_plugin.prepare import (
    PrepareError,
    Preparer,
    allocated_results,
    overcommit,
    share_limits,
)

NODE = "node-a"
GPU0 = Gpu(uuid="GPU-0000", index=0, minor=0, product="NVIDIA H100", memoryMiB=81920)
GPU1 = Gpu(uuid="GPU-1111", index=1, minor=1, product="NVIDIA H100", memoryMiB=81920)


@pytest.mark.parametrize(("consumed", "memory_mib", "cores"), [
    ({"memory": "20Gi", "cores": "30"}, 20480, 30),  # 20 × 1024 MiB; 30 %
    ({"memory": "10240Mi"}, 10240, 100),  # no cores named: all of them
    (None, 81920, 100),  # no consumedCapacity: the whole GPU
    ({"memory": "1500000000"}, 1430, 100),  # 1.5e9 B / 1048576 = 1430.5 → down to 1430 MiB
    ({"memory": "1Gi", "cores": "12.5"}, 1024, 13),  # 12.5 % → up to 13
])
def test_limits_come_from_consumed_capacity(
        consumed: dict[str, str] | None, memory_mib: int, cores: int) -> None:
    result: dict[str, Any] = {"device": "gpu-0"}
    if consumed is not None:
        result["consumedCapacity"] = consumed
    assert share_limits(result, GPU0) == (memory_mib, cores)


# an H100 80GB as NVML reports it: 81,559 MiB, published as the catalog's 80 GiB
H100_NVML = Gpu(uuid="GPU-2222", index=2, minor=2, product="NVIDIA H100 80GB HBM3",
                memoryMiB=81559)


@pytest.mark.parametrize(("product", "nvml_mib", "published"), [
    ("NVIDIA H100 80GB HBM3", 81559, 81920),  # the catalog's 80 GiB
    ("Tesla T4", 15360, 16384),  # 6.7 % under its 16 GiB
    ("NVIDIA A100-SXM4-40GB", 40536, 40960),
    ("NVIDIA L4", 23034, 24576),
    ("NVIDIA Foo 9000", 12345, 12345),  # not in the catalog: what NVML says
    ("NVIDIA H100 80GB HBM3", 40000, 40000),  # over 10 % apart: what NVML says
])
def test_the_slice_publishes_the_catalogs_memory_size(product: str, nvml_mib: int,
                                                       published: int) -> None:
    gpu = Gpu(uuid="GPU-x", index=0, minor=0, product=product, memoryMiB=nvml_mib)
    assert gpu.published_memory_mib == published


@pytest.mark.parametrize(("consumed", "memory_mib"), [
    # 20480 × 81559 / 81920 = 20389.75 → 20389 MiB
    ({"memory": "20Gi", "cores": "25"}, 20389),
    ({"memory": "80Gi"}, 81559),  # all that is published: all there is
    (None, 81559),
])
def test_limits_are_scaled_to_the_real_memory(consumed: dict[str, str] | None,
                                              memory_mib: int) -> None:
    result: dict[str, Any] = {"device": "gpu-2"}
    if consumed is not None:
        result["consumedCapacity"] = consumed
    assert share_limits(result, H100_NVML)[0] == memory_mib
    # four quarters of the published 80 GiB fit the real total
    quarter = share_limits({"device": "gpu-2", "consumedCapacity": {"memory": "20Gi"}},
                           H100_NVML)[0]
    assert 4 * quarter <= H100_NVML.memory_mib


def test_a_consumed_capacity_that_is_no_quantity_is_refused() -> None:
    with pytest.raises(PrepareError, match=r"consumedCapacity\.memory: 'lots' is not a quantity"):
        share_limits({"device": "gpu-0", "consumedCapacity": {"memory": "lots"}}, GPU0)


def _share(gpu: Gpu, memory_mib: int, cores: int, share: str = "s") -> Share:
    return Share("gpu", NODE, gpu.device_name, share, gpu.uuid, gpu.minor, memory_mib, cores)


@pytest.mark.parametrize(("prepared", "asked", "refusal"), [
    # 40960 + 40960 = 81920 MiB, 30 + 70 = 100 %: exactly full, fits
    ([_share(GPU0, 40960, 30)], [_share(GPU0, 40960, 70)], None),
    # 40960 + 40961 = 81921 > 81920 MiB
    ([_share(GPU0, 40960, 30)], [_share(GPU0, 40961, 10)],
     "memory 40960 MiB prepared for 1 other share(s) + 40961 MiB asked > 81920 MiB"),
    # memory fits (40960), cores 60 + 41 = 101 > 100
    ([_share(GPU0, 20480, 60)], [_share(GPU0, 20480, 41)],
     "cores 60 % prepared for 1 other share(s) + 41 % asked > 100 %"),
    # two shares prepared (a, b): 30000 + 30000 + 30000 = 90000 > 81920
    ([_share(GPU0, 30000, 10, "a"), _share(GPU0, 30000, 10, "b")], [_share(GPU0, 30000, 10)],
     "memory 60000 MiB prepared for 2 other share(s) + 30000 MiB asked > 81920 MiB"),
    # the whole of GPU 1 is taken; the claim asks for GPU 0: fits
    ([_share(GPU1, 81920, 100)], [_share(GPU0, 81920, 100)], None),
    # one claim, two shares of GPU 0: 50000 + 40000 = 90000 > 81920
    ([], [_share(GPU0, 50000, 10), _share(GPU0, 40000, 10)],
     "memory 0 MiB prepared for 0 other share(s) + 90000 MiB asked > 81920 MiB"),
])
def test_shares_of_one_gpu_never_sum_past_it(
        prepared: list[Share], asked: list[Share], refusal: str | None) -> None:
    why = overcommit(GPU0, prepared, asked)
    if refusal is None:
        assert why is None
    else:
        assert why == f"gpu-0 (GPU-0000) would be overcommitted: {refusal}"


def _claim(uid: str, results: list[dict[str, Any]], name: str = "c") -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": name, "uid": uid},
            "status": {"allocation": {"devices": {"results": results}}}}


def _result(device: str, memory: str, cores: str, share: str = "share-1",
            driver: str = DRIVER, pool: str = NODE) -> dict[str, Any]:
    return {"request": "gpu", "driver": driver, "pool": pool, "device": device,
            "shareID": share, "consumedCapacity": {"memory": memory, "cores": cores}}


def test_allocated_results_are_this_drivers_on_this_node() -> None:
    mine = _result("gpu-0", "1Gi", "10")
    claim = _claim("u1", [mine, _result("gpu-0", "1Gi", "10", driver="gpu.nvidia.com"),
                          _result("gpu-0", "1Gi", "10", pool="node-b")])
    assert allocated_results(claim, "u1", NODE) == [mine]
    with pytest.raises(PrepareError, match="claim ns/c has UID u1, the kubelet asked for u2"):
        allocated_results(claim, "u2", NODE)
    with pytest.raises(PrepareError, match="claim ns/c is not allocated"):
        allocated_results({"metadata": claim["metadata"], "status": {}}, "u1", NODE)
    with pytest.raises(PrepareError, match=f"claim ns/c has no {DRIVER} device on node node-b"):
        allocated_results(_claim("u1", [mine]), "u1", "node-b")


@pytest.fixture
def preparer(tmp_path: Path) -> Preparer:
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "nvidia1").touch()  # GPU 1 has a device node here, GPU 0 not
    return Preparer(NODE, [GPU0, GPU1], tmp_path / "cdi", tmp_path / "state" / "checkpoint.json",
                    dev_root=dev)


def _spec(p: Preparer, uid: str) -> dict[str, Any]:
    return dict(json.loads((p.cdi_dir / f"{DRIVER}-{uid}.json").read_text()))


def test_prepare_writes_the_cdi_spec_with_the_shares_limits(preparer: Preparer) -> None:
    results = [_result("gpu-1", "20Gi", "30", share="s1")]
    shares, ids = preparer.prepare("u1", "ns", "c", results)
    assert ids == [f"{DRIVER}/claim=u1-gpu-1"]
    assert [(s.device, s.share_id, s.memory_mib, s.cores) for s in shares] == [
        ("gpu-1", "s1", 20480, 30)]
    assert _spec(preparer, "u1") == {
        "cdiVersion": "0.6.0", "kind": f"{DRIVER}/claim",
        "devices": [{"name": "u1-gpu-1", "containerEdits": {
            "env": ["NVIDIA_VISIBLE_DEVICES=GPU-1111", "CUDA_VISIBLE_DEVICES=GPU-1111",
                    "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=GPU-1111=20480M",
                    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30"],
            "deviceNodes": [{"path": str(preparer.dev_root / "nvidia1")}]}}]}


def test_a_claim_on_two_gpus_gets_both_in_every_devices_env(preparer: Preparer) -> None:
    _, ids = preparer.prepare("u1", "ns", "c", [
        _result("gpu-0", "10Gi", "50", share="a"), _result("gpu-1", "5Gi", "20", share="b")])
    assert ids == [f"{DRIVER}/claim=u1-gpu-0", f"{DRIVER}/claim=u1-gpu-1"]
    spec = _spec(preparer, "u1")
    envs = [d["containerEdits"]["env"] for d in spec["devices"]]
    # 10 Gi = 10240 MiB on GPU 0, 5 Gi = 5120 MiB on GPU 1; one percentage: min(50, 20) = 20
    assert envs[0] == envs[1] == [
        "NVIDIA_VISIBLE_DEVICES=GPU-0000,GPU-1111", "CUDA_VISIBLE_DEVICES=GPU-0000,GPU-1111",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=GPU-0000=10240M,GPU-1111=5120M",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=20"]
    assert "deviceNodes" not in spec["devices"][0]["containerEdits"]  # no /dev/nvidia0 here


def test_prepare_is_idempotent(preparer: Preparer) -> None:
    results = [_result("gpu-0", "40Gi", "50")]
    first = preparer.prepare("u1", "ns", "c", results)
    checkpoint = preparer.checkpoint.read_text()
    spec_path = preparer.cdi_dir / f"{DRIVER}-u1.json"
    spec_path.unlink()  # lost, e.g. a tmpfs /var/run/cdi after a reboot: written again
    # the kubelet retries: same answer, counted once (40 Gi twice would be 80 Gi: still fits,
    # so a double count would show only in the checkpoint)
    assert preparer.prepare("u1", "ns", "c", results) == first
    assert preparer.prepare("u1", "ns", "c", []) == first  # a retry needs no results
    assert preparer.checkpoint.read_text() == checkpoint
    assert spec_path.is_file() and list(preparer.claims) == ["u1"]


def test_a_share_past_the_gpu_is_refused_and_leaves_nothing(preparer: Preparer) -> None:
    preparer.prepare("u1", "ns", "a", [_result("gpu-0", "60Gi", "50", share="s1")])
    # 60 Gi + 30 Gi = 90 Gi = 92160 MiB > 81920 MiB
    with pytest.raises(PrepareError, match=(
            r"claim ns/b: gpu-0 \(GPU-0000\) would be overcommitted: memory 61440 MiB prepared "
            r"for 1 other share\(s\) \+ 30720 MiB asked > 81920 MiB")):
        preparer.prepare("u2", "ns", "b", [_result("gpu-0", "30Gi", "10", share="s2")])
    assert list(preparer.claims) == ["u1"]
    assert not (preparer.cdi_dir / f"{DRIVER}-u2.json").exists()
    # the same share on GPU 1 fits
    preparer.prepare("u2", "ns", "b", [_result("gpu-1", "30Gi", "10", share="s2")])
    with pytest.raises(PrepareError, match="device gpu-7 is not a GPU of node node-a"):
        preparer.prepare("u3", "ns", "c", [_result("gpu-7", "1Gi", "1")])


def test_unprepare_removes_what_prepare_made(preparer: Preparer) -> None:
    preparer.prepare("u1", "ns", "a", [_result("gpu-0", "80Gi", "100")])
    assert preparer.unprepare("u1") is True
    assert not (preparer.cdi_dir / f"{DRIVER}-u1.json").exists()
    assert json.loads(preparer.checkpoint.read_text())["claims"] == {}
    assert preparer.unprepare("u1") is False  # a retry
    assert preparer.unprepare("never") is False
    # the GPU is free again: the whole of it fits
    preparer.prepare("u2", "ns", "b", [_result("gpu-0", "80Gi", "100")])


def test_a_restarted_plugin_remembers_what_it_prepared(preparer: Preparer) -> None:
    preparer.prepare("u1", "ns", "a", [_result("gpu-0", "50Gi", "60", share="s1")])
    preparer.prepare("u2", "ns", "b", [_result("gpu-1", "10Gi", "10", share="s2")])
    restarted = Preparer(NODE, [GPU0, GPU1], preparer.cdi_dir, preparer.checkpoint,
                         dev_root=preparer.dev_root)
    assert restarted.claims == preparer.claims
    # still counted: 50 Gi + 40 Gi = 90 Gi > 80 Gi on GPU 0
    with pytest.raises(PrepareError, match="would be overcommitted: memory 51200 MiB prepared"):
        restarted.prepare("u3", "ns", "c", [_result("gpu-0", "40Gi", "10", share="s3")])
    assert restarted.unprepare("u1") is True
    assert not (preparer.cdi_dir / f"{DRIVER}-u1.json").exists()
    assert (preparer.cdi_dir / f"{DRIVER}-u2.json").exists()
    restarted.prepare("u3", "ns", "c", [_result("gpu-0", "40Gi", "10", share="s3")])
    again = Preparer(NODE, [GPU0, GPU1], preparer.cdi_dir, preparer.checkpoint)
    assert sorted(again.claims) == ["u2", "u3"]


@pytest.mark.parametrize(("content", "message"), [
    ("{", "unreadable checkpoint"),
    ('{"version": 9, "claims": {}}', "checkpoint version 9, this plugin reads 1"),
    ('{"version": 1, "claims": {"u": {"name": "c"}}}', "malformed checkpoint"),
])
def test_a_bad_checkpoint_is_a_clear_error(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "checkpoint.json"
    path.write_text(content)
    with pytest.raises(PrepareError, match=message):
        Preparer(NODE, [GPU0], tmp_path / "cdi", path)
