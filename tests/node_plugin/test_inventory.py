"""The device file: what it gives, and the error naming the file and field when it is wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufleet.node_plugin.inventory import InventoryError, load_device_file, semver

GOOD = [
    {"uuid": "GPU-bbbb", "index": 1, "minor": 1, "product": "NVIDIA H100", "memoryMiB": 81559},
    {"uuid": "GPU-aaaa", "index": 0, "minor": 0, "product": "NVIDIA H100", "memoryMiB": 81559},
]


def test_a_device_file_gives_the_gpus_in_index_order(tmp_path: Path) -> None:
    for name, text in (("gpus.yaml", "gpus:\n" + "".join(
            f"  - {json.dumps(g)}\n" for g in GOOD)), ("gpus.json", json.dumps({"gpus": GOOD}))):
        path = tmp_path / name
        path.write_text(text)
        gpus = load_device_file(path)
        assert [(g.index, g.uuid, g.device_name, g.memory_mib) for g in gpus] == [
            (0, "GPU-aaaa", "gpu-0", 81559), (1, "GPU-bbbb", "gpu-1", 81559)]


def _with(**change: object) -> dict[str, object]:
    return {"gpus": [{**GOOD[1], **change}]}


@pytest.mark.parametrize(("name", "content", "message"), [
    ("missing.yaml", None, "cannot read the device file"),
    ("bad.yaml", "gpus: [", "not valid YAML"),
    ("bad.json", "{", "not valid JSON"),
    ("top.yaml", "- 1\n", "(top level): Input should be a valid dictionary"),
    ("empty.yaml", "gpus: []\n", "gpus: List should have at least 1 item"),
    ("nouuid.json", {"gpus": [{k: v for k, v in GOOD[0].items() if k != "uuid"}]},
     "gpus[0].uuid: Field required"),
    ("negmem.json", _with(memoryMiB=0), "gpus[0].memoryMiB: Input should be greater than 0"),
    ("neg.json", _with(minor=-1), "gpus[0].minor: Input should be greater than or equal to 0"),
    ("extra.json", _with(vendor="x"), "gpus[0].vendor: Extra inputs are not permitted"),
    ("dup.json", {"gpus": [GOOD[0], {**GOOD[1], "uuid": "GPU-bbbb"}]},
     "two GPUs share uuid GPU-bbbb"),
    ("dupidx.json", {"gpus": [GOOD[0], {**GOOD[1], "index": 1}]}, "two GPUs share index 1"),
    ("cuda.json", _with(cudaDriverVersion="12.x"),
     "gpus[0].cudaDriverVersion: Value error, '12.x' is not a version like 12.4"),
    ("cc.json", _with(cudaComputeCapability="9.0.0.1"),
     "gpus[0].cudaComputeCapability: Value error, '9.0.0.1' is not a version"),
    ("nvl.json", _with(nvlinkDomain=-1),
     "gpus[0].nvlinkDomain: Input should be greater than or equal to 0"),
    ("xid.json", _with(xid=0), "gpus[0].xid: Input should be greater than or equal to 1"),
])
def test_a_bad_device_file_names_the_file_and_the_field(
        tmp_path: Path, name: str, content: object, message: str) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(InventoryError) as info:
        load_device_file(path)
    assert str(info.value).startswith(f"{path}: ")
    assert message in str(info.value), str(info.value)


def test_the_optional_fields_default_to_a_cuda_12_4_driver(tmp_path: Path) -> None:
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps({"gpus": [
        GOOD[1], {**GOOD[0], "cudaDriverVersion": "12.8", "driverVersion": "570.86.10",
                  "cudaComputeCapability": "9.0", "nvlinkDomain": 0, "xid": 79}]}))
    b, a = load_device_file(path)  # index order: GOOD[1] is index 0
    assert (a.cuda_driver_version, a.driver_version, a.cuda_compute_capability,
            a.nvlink_domain, a.xid) == ("12.8", "570.86.10", "9.0", 0, 79)
    assert (b.cuda_driver_version, b.driver_version, b.cuda_compute_capability,
            b.nvlink_domain, b.xid) == ("12.4", "550.54.15", None, None, None)


@pytest.mark.parametrize(("text", "version"), [
    ("12.4", "12.4.0"), ("9", "9.0.0"), ("550.54.15", "550.54.15"),
    ("535.104.05", "535.104.5"),  # semver allows no leading zeros
])
def test_versions_become_semver(text: str, version: str) -> None:
    assert semver(text) == version


@pytest.mark.parametrize("text", ["", "12.4.0.1", "v12.4", "12.-4", "r550"])
def test_what_is_no_version_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="is not a version"):
        semver(text)
