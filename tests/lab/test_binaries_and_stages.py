"""The binary cache check and the packaged KWOK stages."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import yaml

from gpufleet.lab.binaries import BINARIES, STAMP, missing_binaries, missing_reason


def _fill(d: Path, names: tuple[str, ...]) -> None:
    d.mkdir(parents=True, exist_ok=True)
    for n in names:
        p = d / n
        p.write_text("#!/bin/sh\n")
        p.chmod(0o755)


def test_missing_binaries_by_name_and_by_stale_stamp(tmp_path: Path) -> None:
    assert missing_binaries(tmp_path) == list(BINARIES)
    _fill(tmp_path, BINARIES[:-1])
    assert missing_binaries(tmp_path) == [BINARIES[-1]]
    _fill(tmp_path, BINARIES)
    assert missing_binaries(tmp_path) == []
    (tmp_path / ".version").write_text(STAMP + "\n")
    assert missing_binaries(tmp_path) == [] and missing_reason(tmp_path) is None
    (tmp_path / ".version").write_text("kubernetes=v1.35.0 kwok=v0.7.0 kine=v0.17.5\n")
    assert missing_binaries(tmp_path) == list(BINARIES)
    assert "deploy/testcluster/build.sh" in (missing_reason(tmp_path) or "")


def test_build_script_and_python_agree_on_versions() -> None:
    script = (Path(__file__).resolve().parents[2] / "deploy/testcluster/build.sh").read_text()
    for part in STAMP.split():
        name, version = part.split("=")
        key = {"kubernetes": "K8S_VERSION", "kwok": "KWOK_VERSION", "kine": "KINE_VERSION",
               "helm": "HELM_VERSION", "containerd": "CONTAINERD_VERSION"}[name]
        assert f"{key}={version}\n" in script
    gomod = (Path(__file__).resolve().parents[2] / "deploy/testcluster/go.mod").read_text()
    assert f"k8s.io/kubernetes {STAMP.split()[0].split('=')[1]}" in gomod


def test_stages_cover_the_pod_and_node_lifecycle() -> None:
    pkg = resources.files("gpufleet.lab") / "stages"
    stages = {}
    for f in pkg.iterdir():
        if f.name.endswith(".yaml"):
            doc = yaml.safe_load(f.read_text())
            assert doc["apiVersion"] == "kwok.x-k8s.io/v1alpha1" and doc["kind"] == "Stage"
            assert doc["metadata"]["name"] == f.name.removesuffix(".yaml")
            stages[doc["metadata"]["name"]] = doc["spec"]
    assert set(stages) == {
        "node-initialize",
        "node-heartbeat",
        "pod-create",
        "pod-ready",
        "pod-complete",
        "pod-terminate",
        "pod-delete",
    }
    complete = stages["pod-complete"]
    keys = [e["key"] for e in complete["selector"]["matchExpressions"]]
    assert '.metadata.annotations["pod-complete.stage.kwok.x-k8s.io/delay"]' in keys
    assert ".metadata.ownerReferences.[].kind" in keys
    # Deletion goes through a terminal phase first (the Job controller needs it), then removal.
    assert stages["pod-delete"]["next"]["delete"] is True
    assert "phase: Failed" in stages["pod-terminate"]["next"]["statusTemplate"]
