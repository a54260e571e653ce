"""``lab up --real-node`` without a cluster: its prerequisites as one line each, the image
reference read from an OCI archive, the chart values the lab's real node needs, and how the lab
reads its pods' logs for a host port another process took."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpufleet.lab import real_node, release
from gpufleet.lab.errors import LabError


def _archive(path: Path, index: dict | None, name: str = "./index.json") -> Path:
    with tarfile.open(path, "w") as tar:
        if index is not None:
            data = json.dumps(index).encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _index(ref: str) -> dict:
    return {"schemaVersion": 2, "manifests": [
        {"digest": "sha256:00", "annotations": {"org.opencontainers.image.ref.name": ref}}]}


@pytest.mark.parametrize(("name", "ref"), [
    ("./index.json", "localhost/gpufleet:0.1.0"),  # what make image writes (tar -C dir .)
    ("index.json", "registry.example.com:5000/team/gpufleet:1.2"),  # a port is not the tag
])
def test_the_image_reference_comes_from_the_archives_index(tmp_path: Path, name: str,
                                                           ref: str) -> None:
    assert real_node.image_reference(_archive(tmp_path / "a.tar", _index(ref), name)) == ref


@pytest.mark.parametrize("index", [None, {"manifests": []}, _index("gpufleet")])
def test_an_archive_without_a_full_reference_is_one_line(tmp_path: Path,
                                                         index: dict | None) -> None:
    with pytest.raises(LabError) as err:
        real_node.image_reference(_archive(tmp_path / "a.tar", index))
    assert "a.tar" in str(err.value) and "\n" not in str(err.value)


def test_not_root_is_the_first_thing_said(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert real_node.missing_prerequisite() == (
        "--real-node needs root (containerd, runc and the kubelet mount and make cgroups)")


def test_missing_tools_are_named_with_the_packages(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on it
    why = real_node.missing_prerequisite()
    assert why is not None and "\n" not in why
    assert why.startswith("--real-node needs runc, gcc, umoci, ip")
    assert "apt-get install runc containernetworking-plugins" in why
    assert "containerd" not in why  # built from its Go module, not Debian's


@pytest.mark.parametrize("absent", ["containerd", "ctr", "containerd-shim-runc-v2", "kubelet"])
def test_a_missing_built_binary_names_the_build(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                absent: str) -> None:
    """containerd, its client and shim come from the build script's cache: one that is not there
    is said, with how to build it, and no containerd on PATH stands in for it."""
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(real_node.shutil, "which", lambda _t: "/usr/bin/x")
    monkeypatch.setattr(real_node, "CNI_BIN", tmp_path)
    (tmp_path / "bridge").write_text("")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in real_node.BUILT:
        if name != absent:
            (bin_dir / name).write_text("#!/bin/sh\n")
            (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("GPUFLEET_K8S_BIN", str(bin_dir))
    assert real_node.missing_prerequisite() == (
        f"no {absent} at {bin_dir / absent}: build it with `make k8s-binaries` "
        "(bash deploy/testcluster/build.sh)")


def test_lab_values_reach_the_api_server_on_loopback_and_pin_the_pods_to_the_node() -> None:
    v = release.lab_values("https://127.0.0.1:38603", "real-node", "localhost/gpufleet:0.1.0")
    env = [{"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
           {"name": "KUBERNETES_SERVICE_PORT", "value": "38603"}]
    assert v["image"] == {"repository": "localhost/gpufleet", "tag": "0.1.0",
                          "pullPolicy": "Never"}
    c, a = v["controller"], v["agent"]
    assert c["hostNetwork"] and a["hostNetwork"] and c["env"] == env and a["env"] == env
    assert c["nodeSelector"] == {"kubernetes.io/hostname": "real-node"}
    assert c["tolerations"] == [{"key": real_node.TAINT_KEY, "operator": "Exists"}]
    # the chart's default spot selector is dropped (null), the real node selected
    assert a["nodeSelector"] == {"karpenter.sh/capacity-type": None,
                                 "kubernetes.io/hostname": "real-node"}
    assert c["port"] != a["port"] and min(c["port"], a["port"]) > 0


def test_the_kubelet_settings_this_machine_needs() -> None:
    cfg = real_node.kubelet_config(Path("/w"), Path("/ca.crt"), 10350, 10348)
    assert (cfg["cgroupDriver"], cfg["failCgroupV1"], cfg["protectKernelDefaults"]) == (
        "cgroupfs", False, False)
    assert cfg["containerRuntimeEndpoint"] == "unix:///w/containerd.sock"
    assert cfg["registerWithTaints"] == [
        {"key": "gpufleet.io/system-only", "value": "true", "effect": "NoSchedule"}]
    assert cfg["authentication"]["anonymous"] == {"enabled": False}
    assert cfg["authentication"]["x509"] == {"clientCAFile": "/ca.crt"}
    assert cfg["podLogsDir"] == "/w/pod-logs"  # not /var/log/pods
    # no eviction thresholds or image GC on the host's shared disk (a full host disk must not
    # taint the node or delete the imported image); a listed signal at "0%" sets none
    assert set(cfg["evictionHard"].values()) == {"0%"}
    assert {"memory.available", "nodefs.available", "imagefs.available"} <= set(cfg["evictionHard"])
    assert cfg["imageGCHighThresholdPercent"] == 100
    bridge = real_node.cni_config(Path("/w"))["plugins"][0]
    assert bridge["ipMasq"] is False and bridge["ipam"]["dataDir"] == "/w/ipam"


def test_the_containerd_config_is_version_3_with_the_nodes_cdi_dir(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """containerd 2.x's config: all state under the node's directory, runc on cgroupfs through the
    shim built beside it, the CDI specs of the node's cdi directory."""
    monkeypatch.setenv("GPUFLEET_K8S_BIN", "/b")
    cfg = tomllib.loads(real_node.containerd_config(Path("/w")))
    assert (cfg["version"], cfg["root"], cfg["state"], cfg["grpc"]["address"]) == (
        3, "/w/containerd/root", "/w/containerd/state", "/w/containerd.sock")
    images = cfg["plugins"]["io.containerd.cri.v1.images"]
    assert images["pinned_images"]["sandbox"] == real_node.PAUSE_IMAGE
    assert images["snapshotter"] == "overlayfs"
    cri = cfg["plugins"]["io.containerd.cri.v1.runtime"]
    assert cri["restrict_oom_score_adj"] is True
    assert cri["cdi_spec_dirs"] == ["/w/cdi"]
    runc = cri["containerd"]["runtimes"]["runc"]
    assert (runc["runtime_type"], runc["runtime_path"], runc["options"]["SystemdCgroup"]) == (
        "io.containerd.runc.v2", "/b/containerd-shim-runc-v2", False)
    assert cri["cni"] == {"bin_dirs": ["/usr/lib/cni"], "conf_dir": "/w/cni"}
    assert cfg["plugins"]["io.containerd.nri.v1.nri"]["disable"] is True
    assert real_node.cdi_dir(Path("/lab")) == Path("/lab/real-node/cdi")


@pytest.mark.parametrize(("args", "says"), [
    (["--image", "x.tar"], "--image needs --real-node"),
    (["--real-node", "--image", "/no/such.tar"], "file not found"),
])
def test_lab_up_real_node_bad_options_are_one_line(args: list[str], says: str) -> None:
    out = subprocess.run([sys.executable, "-m", "gpufleet", "lab", "up", "--dir", "/nonexistent",
                          *args], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode != 0 and says in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def _pod(name: str, container: str, port: int) -> SimpleNamespace:
    return SimpleNamespace(
        metadata=SimpleNamespace(namespace=release.NAMESPACE, name=name, uid=f"uid-{name}"),
        spec=SimpleNamespace(containers=[SimpleNamespace(
            name=container, ports=[SimpleNamespace(container_port=port)])]))


def _log(pod_logs: Path, pod: SimpleNamespace, container: str, restart: int, *lines: str) -> None:
    d = (pod_logs / f"{release.NAMESPACE}_{pod.metadata.name}_{pod.metadata.uid}" / container)
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{restart}.log").write_text(
        "".join(f"2026-01-01T00:00:00Z stdout F {line}\n" for line in lines))


def test_a_pod_that_found_its_host_port_taken_is_told_apart(tmp_path: Path) -> None:
    """The lab reads the chart's pods' logs on its node: a pod whose port another process took
    says so (and is upgraded to other ports); an agent serving says on which port."""
    old, new = _pod("agent-old", "agent", 40001), _pod("agent-new", "agent", 40002)
    ctl = _pod("ctl", "controller", 40003)
    _log(tmp_path, old, "agent", 0, "Traceback (most recent call last):",
         "OSError: [Errno 98] Address already in use")
    _log(tmp_path, new, "agent", 0, "gpufleet agent on real-node (pid 1), probes on 0.0.0.0:40002")
    _log(tmp_path, ctl, "controller", 0, "starting")
    _log(tmp_path, ctl, "controller", 1, "error: field 'port': cannot listen on 0.0.0.0:40003: "
         "Address already in use")
    pods = [old, new]
    with pytest.raises(release.PodPortTaken) as err:
        release.check_port(pods, tmp_path, "agent", 40001)
    assert (err.value.workload, err.value.port) == ("agent", 40001)
    assert "agent-old found port 40001 in use" in str(err.value)
    release.check_port(pods, tmp_path, "agent", 40002)  # the upgraded pod is fine
    with pytest.raises(release.PodPortTaken, match="controller pod ctl found port 40003"):
        release.check_port([ctl], tmp_path, "controller", 40003)  # on its second start
    assert release.agent_serving(pods, tmp_path, 40002)
    assert not release.agent_serving(pods, tmp_path, 40001)
    assert not release.agent_serving(pods, tmp_path, 4000)  # a port only a prefix of 40002
    assert release.on_port([old, new, ctl], "agent", 40002) == [new]
