"""Shares limited by HAMi-core (``--hami-core``): the CDI spec of a share and of a whole GPU, the
claim's cache directory, the per-GPU sum check, the checkpoint across a restart and with older
entries. The "library" is a real file whose content the plugin never reads. Numbers worked by
hand beside each row; the GPUs have 80 GiB (81920 MiB) and 100 % of their cores.

No live test: HAMi-core acts inside a CUDA process on a GPU node; what the plugin owns is the
CDI spec and the directories, checked here against the files it writes.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest
from plugin_results import share_result

from gpufleet.node_plugin import DRIVER
from gpufleet.node_plugin.hami import HamiCore
from gpufleet.node_plugin.inventory import Gpu
from gpufleet.node_plugin.prepare import PrepareError, Preparer

NODE = "node-a"
GPU0 = Gpu(uuid="GPU-0000", index=0, minor=0, product="NVIDIA H100", memoryMiB=81920)
GPU1 = Gpu(uuid="GPU-1111", index=1, minor=1, product="NVIDIA H100", memoryMiB=81920)
RW = ["rw", "nosuid", "nodev", "bind"]


def _result(device: str, memory: str | None, cores: str | None, share: str) -> dict[str, Any]:
    return share_result(NODE, device, memory, cores, share)


@pytest.fixture
def core(tmp_path: Path) -> HamiCore:
    lib = tmp_path / "host" / "libvgpu.so"
    lib.parent.mkdir()
    lib.write_bytes(b"\x7fELF not really")
    return HamiCore(lib, tmp_path / "hami")


@pytest.fixture
def preparer(tmp_path: Path, core: HamiCore) -> Preparer:
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "nvidia0").touch()
    return Preparer(NODE, [GPU0, GPU1], tmp_path / "cdi", tmp_path / "state" / "checkpoint.json",
                    dev_root=dev, hami=core)


def _spec(p: Preparer, uid: str) -> dict[str, Any]:
    return dict(json.loads((p.cdi_dir / f"{DRIVER}-{uid}.json").read_text()))


def _mounts(core: HamiCore, uid: str) -> list[dict[str, Any]]:
    return [{"hostPath": str(core.library), "containerPath": "/usr/local/vgpu/libvgpu.so",
             "options": ["ro", "nosuid", "nodev", "bind"]},
            {"hostPath": str(core.root / "claims" / uid), "containerPath": "/usr/local/vgpu/cache",
             "options": RW},
            {"hostPath": str(core.root / "vgpulock"), "containerPath": "/tmp/vgpulock",
             "options": RW}]


# (results, env after the two visible-device variables); one GPU's share or a claim's GPUs
HAMI_ENV = "LD_PRELOAD=/usr/local/vgpu/libvgpu.so"
CACHE = "CUDA_DEVICE_MEMORY_SHARED_CACHE=/usr/local/vgpu/cache/cudevshr.cache"


@pytest.mark.parametrize(("results", "visible", "limits"), [
    # 20 Gi = 20 × 1024 = 20480 MiB, 30 % of the SMs, on GPU 0 (CUDA index 0 in the container)
    ([_result("gpu-0", "20Gi", "30", "s1")], "GPU-0000",
     ["CUDA_DEVICE_MEMORY_LIMIT_0=20480m", "CUDA_DEVICE_SM_LIMIT_0=30"]),
    # memory only: all the cores (100 %), 1.5e9 B / 1048576 = 1430.5 → 1430 MiB
    ([_result("gpu-0", "1500000000", None, "s1")], "GPU-0000",
     ["CUDA_DEVICE_MEMORY_LIMIT_0=1430m", "CUDA_DEVICE_SM_LIMIT_0=100"]),
    # cores only: all 81920 MiB, 25 %
    ([_result("gpu-1", None, "25", "s1")], "GPU-1111",
     ["CUDA_DEVICE_MEMORY_LIMIT_0=81920m", "CUDA_DEVICE_SM_LIMIT_0=25"]),
    # shares of two GPUs (no daemon to connect to, so allowed): GPU 1 is index 0 (listed
    # first), GPU 0 index 1; 10 Gi = 10240 MiB at 50 %, 5 Gi = 5120 MiB at 20 %
    ([_result("gpu-1", "10Gi", "50", "a"), _result("gpu-0", "5Gi", "20", "b")],
     "GPU-1111,GPU-0000",
     ["CUDA_DEVICE_MEMORY_LIMIT_0=10240m", "CUDA_DEVICE_MEMORY_LIMIT_1=5120m",
      "CUDA_DEVICE_SM_LIMIT_0=50", "CUDA_DEVICE_SM_LIMIT_1=20"]),
    # two shares of GPU 0 in one claim add up: 10 + 6 Gi = 16384 MiB, 30 + 40 = 70 %
    ([_result("gpu-0", "10Gi", "30", "a"), _result("gpu-0", "6Gi", "40", "b")], "GPU-0000",
     ["CUDA_DEVICE_MEMORY_LIMIT_0=16384m", "CUDA_DEVICE_SM_LIMIT_0=70"]),
    # a share of GPU 0 and the whole of GPU 1: GPU 1's limits are all of it (100 %: no
    # throttling in HAMi-core)
    ([_result("gpu-0", "8Gi", "10", "a"), _result("gpu-1", None, None, "b")],
     "GPU-0000,GPU-1111",
     ["CUDA_DEVICE_MEMORY_LIMIT_0=8192m", "CUDA_DEVICE_MEMORY_LIMIT_1=81920m",
      "CUDA_DEVICE_SM_LIMIT_0=10", "CUDA_DEVICE_SM_LIMIT_1=100"]),
])
def test_a_share_gets_hami_core_instead_of_mps(
        preparer: Preparer, core: HamiCore, results: list[dict[str, Any]], visible: str,
        limits: list[str]) -> None:
    _, ids = preparer.prepare("u1", "ns", "c", results)
    spec = _spec(preparer, "u1")
    assert [f"{DRIVER}/claim={d['name']}" for d in spec["devices"]] == ids
    for d in spec["devices"]:
        edits = d["containerEdits"]
        assert edits["env"] == [f"NVIDIA_VISIBLE_DEVICES={visible}",
                                f"CUDA_VISIBLE_DEVICES={visible}", HAMI_ENV, *limits, CACHE]
        assert edits["mounts"] == _mounts(core, "u1")
    # the claim's cache directory and the lock directory exist, empty, writable by anyone
    for path in (core.root / "claims" / "u1", core.root / "vgpulock"):
        assert path.is_dir() and not list(path.iterdir())
        assert stat.S_IMODE(path.stat().st_mode) == 0o777
    assert not any(e.startswith("CUDA_MPS_") for e in spec["devices"][0]["containerEdits"]["env"])


def test_a_whole_gpu_gets_neither(preparer: Preparer, core: HamiCore) -> None:
    # no consumedCapacity, or all of it named: 80 Gi = 81920 MiB and 100 %
    preparer.prepare("u1", "ns", "c", [_result("gpu-0", None, None, "s1")])
    preparer.prepare("u2", "ns", "d", [_result("gpu-1", "80Gi", "100", "s2")])
    assert _spec(preparer, "u1")["devices"] == [{"name": "u1-gpu-0", "containerEdits": {
        "env": ["NVIDIA_VISIBLE_DEVICES=GPU-0000", "CUDA_VISIBLE_DEVICES=GPU-0000"],
        "deviceNodes": [{"path": str(preparer.dev_root / "nvidia0")}]}}]
    assert _spec(preparer, "u2")["devices"] == [{"name": "u2-gpu-1", "containerEdits": {
        "env": ["NVIDIA_VISIBLE_DEVICES=GPU-1111", "CUDA_VISIBLE_DEVICES=GPU-1111"]}}]
    assert not (core.root / "claims").exists()


def test_shares_under_hami_core_still_never_sum_past_the_gpu(preparer: Preparer,
                                                             core: HamiCore) -> None:
    preparer.prepare("u1", "ns", "a", [_result("gpu-0", "60Gi", "50", "s1")])
    # 60 Gi + 30 Gi = 90 Gi = 92160 MiB > 81920 MiB
    with pytest.raises(PrepareError, match=(
            r"claim ns/b: gpu-0 \(GPU-0000\) would be overcommitted: memory 61440 MiB prepared "
            r"for 1 other share\(s\) \+ 30720 MiB asked > 81920 MiB")):
        preparer.prepare("u2", "ns", "b", [_result("gpu-0", "30Gi", "10", "s2")])
    # memory fits (60 + 20 = 80 Gi), cores 50 + 51 = 101 % > 100 %
    with pytest.raises(PrepareError, match=r"cores 50 % prepared for 1 other share\(s\) \+ 51 %"):
        preparer.prepare("u2", "ns", "b", [_result("gpu-0", "20Gi", "51", "s2")])
    assert list(preparer.claims) == ["u1"]
    assert not (preparer.cdi_dir / f"{DRIVER}-u2.json").exists()
    assert not (core.root / "claims" / "u2").exists()


def test_unprepare_removes_the_claims_cache_and_a_retry_keeps_it(preparer: Preparer,
                                                                 core: HamiCore) -> None:
    preparer.prepare("u1", "ns", "a", [_result("gpu-0", "20Gi", "30", "s1")])
    cache = core.root / "claims" / "u1" / "cudevshr.cache"
    cache.write_bytes(b"usage")  # what HAMi-core's processes write there
    # a retried prepare must not reset the usage the running containers share
    preparer.prepare("u1", "ns", "a", [])
    assert cache.read_bytes() == b"usage"
    assert preparer.unprepare("u1") is True
    assert not cache.parent.exists() and (core.root / "vgpulock").is_dir()
    assert preparer.unprepare("u1") is False  # a retry: nothing left to remove


def test_a_restarted_plugin_keeps_each_claims_way_and_reads_older_checkpoints(
        preparer: Preparer, core: HamiCore) -> None:
    preparer.prepare("u1", "ns", "a", [_result("gpu-0", "20Gi", "30", "s1")])
    preparer.prepare("u2", "ns", "b", [_result("gpu-1", None, None, "s2")])
    saved = json.loads(preparer.checkpoint.read_text())["claims"]
    assert saved["u1"]["shares"][0] == {
        "request": "gpu", "pool": NODE, "device": "gpu-0", "shareID": "s1", "uuid": "GPU-0000",
        "minor": 0, "memoryMiB": 20480, "cores": 30, "limits": "hami-core",
        "hamiCore": str(core.library), "hamiDir": str(core.root)}
    assert saved["u2"]["shares"][0]["limits"] == "none"
    restarted = Preparer(NODE, [GPU0, GPU1], preparer.cdi_dir, preparer.checkpoint,
                         dev_root=preparer.dev_root, hami=core)
    assert restarted.claims == preparer.claims
    spec = _spec(preparer, "u1")
    (preparer.cdi_dir / f"{DRIVER}-u1.json").unlink()  # a tmpfs CDI dir after a reboot
    assert restarted.prepare("u1", "ns", "a", [])[1] == [f"{DRIVER}/claim=u1-gpu-0"]
    assert _spec(restarted, "u1") == spec
    # a checkpoint written before HAMi-core (no "limits"): its share keeps its MPS env, and still
    # counts against GPU 0: 10 Gi + 20 Gi (u1) + 60 Gi = 90 Gi > 80 Gi
    old = json.loads(preparer.checkpoint.read_text())
    old["claims"]["u9"] = {"namespace": "ns", "name": "old", "shares": [
        {"request": "gpu", "pool": NODE, "device": "gpu-0", "shareID": "s9", "uuid": "GPU-0000",
         "minor": 0, "memoryMiB": 10240, "cores": 20}]}
    preparer.checkpoint.write_text(json.dumps(old))
    older = Preparer(NODE, [GPU0, GPU1], preparer.cdi_dir, preparer.checkpoint,
                     dev_root=preparer.dev_root, hami=core)
    older.prepare("u9", "ns", "old", [])
    assert _spec(older, "u9")["devices"][0]["containerEdits"]["env"] == [
        "NVIDIA_VISIBLE_DEVICES=GPU-0000", "CUDA_VISIBLE_DEVICES=GPU-0000",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=GPU-0000=10240M", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=20"]
    with pytest.raises(PrepareError, match="memory 30720 MiB prepared for 2 other share"):
        older.prepare("u3", "ns", "c", [_result("gpu-0", "60Gi", "10", "s3")])
    assert older.unprepare("u1") is True and not (core.root / "claims" / "u1").exists()


@pytest.mark.parametrize(("share", "message"), [
    ({"limits": "magic"}, "limits 'magic'"),
    ({"limits": "hami-core"}, "limits hami-core without hamiCore and hamiDir"),
])
def test_a_bad_checkpointed_share_is_a_clear_error(tmp_path: Path, share: dict[str, Any],
                                                   message: str) -> None:
    path = tmp_path / "checkpoint.json"
    path.write_text(json.dumps({"version": 1, "claims": {"u": {"namespace": "ns", "name": "c",
        "shares": [{"request": "gpu", "pool": NODE, "device": "gpu-0", "uuid": "GPU-0000",
                    "minor": 0, "memoryMiB": 1024, "cores": 10, **share}]}}}))
    with pytest.raises(PrepareError, match=f"malformed checkpoint .*{message}"):
        Preparer(NODE, [GPU0], tmp_path / "cdi", path)


def test_a_cache_directory_that_cannot_be_made_refuses_the_share(tmp_path: Path,
                                                                 core: HamiCore) -> None:
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the directory goes")
    p = Preparer(NODE, [GPU0], tmp_path / "cdi", tmp_path / "checkpoint.json",
                 hami=HamiCore(core.library, blocked))
    with pytest.raises(PrepareError, match=f"claim ns/a: HAMi-core directory {blocked}/vgpulock"):
        p.prepare("u1", "ns", "a", [_result("gpu-0", "10Gi", "10", "s1")])
    assert p.claims == {} and not list((tmp_path / "cdi").glob("*.json"))


@pytest.mark.parametrize(("library", "why"), [
    ("host/libvgpu.so", None),
    ("host/missing.so", "HAMi-core library '{tmp}/host/missing.so' not found"),
    ("host", "HAMi-core library '{tmp}/host' not found"),  # a directory is no library
])
def test_the_library_must_be_a_file(tmp_path: Path, core: HamiCore, library: str,
                                    why: str | None) -> None:
    got = HamiCore(tmp_path / library).check()
    assert got == (None if why is None else why.format(tmp=tmp_path))
    assert HamiCore(Path("libvgpu.so")).check() == (
        "HAMi-core library 'libvgpu.so' is not an absolute path")


def test_mps_and_hami_core_are_exclusive(tmp_path: Path, core: HamiCore) -> None:
    from gpufleet.node_plugin.mps import MpsManager

    with pytest.raises(ValueError, match="MPS or under HAMi-core, not both"):
        Preparer(NODE, [GPU0], tmp_path / "cdi", tmp_path / "checkpoint.json",
                 mps=MpsManager("nvidia-cuda-mps-control", tmp_path / "mps"), hami=core)
