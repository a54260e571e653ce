"""The kubelet's stubs are generated from its .proto files, once, into the cache directory."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from live_skip import skip_or_fail

from gpufleet.node_plugin import protos


def test_stubs_are_generated_from_the_kubelets_protos(tmp_path: Path) -> None:
    try:
        src = protos.kubelet_module_dir()
    except protos.ProtoError as exc:
        skip_or_fail(str(exc))
    t0 = time.monotonic()
    out = protos.generate(tmp_path / "stubs")
    print(f"generated in {time.monotonic() - t0:.2f} s from {src}")
    pkg = out / protos.PACKAGE
    assert sorted(p.name for p in pkg.glob("*.py")) == [
        "__init__.py", "dra_health_v1alpha1_pb2.py", "dra_health_v1alpha1_pb2_grpc.py",
        "dra_v1_pb2.py", "dra_v1_pb2_grpc.py", "pluginregistration_v1_pb2.py",
        "pluginregistration_v1_pb2_grpc.py"]
    assert "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin" in (pkg / "dra_v1_pb2_grpc.py").read_text()
    assert "/pluginregistration.Registration/GetInfo" in (
        pkg / "pluginregistration_v1_pb2_grpc.py").read_text()
    # the kubelet calls /v1alpha1.DRAResourceHealth/NodeWatchResources on the DRA socket
    assert "/v1alpha1.DRAResourceHealth/NodeWatchResources" in (
        pkg / "dra_health_v1alpha1_pb2_grpc.py").read_text()
    stamp = (pkg / "dra_v1_pb2.py").stat().st_mtime_ns
    assert protos.generate(out) == out  # there already: left as it is
    assert (pkg / "dra_v1_pb2.py").stat().st_mtime_ns == stamp
    assert not list(tmp_path.glob("*.tmp*"))


def test_missing_protos_say_how_to_get_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                            ) -> None:
    monkeypatch.setenv("GOMODCACHE", str(tmp_path))
    with pytest.raises(protos.ProtoError, match=r"deploy/testcluster/build\.sh"):
        protos.kubelet_module_dir(download=False)
