"""``gpufleet node-plugin`` with a bad device file: one line naming the file and field, exit 2,
before it touches the API server or the kubelet's directories."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

import gpufleet.cli


def test_a_bad_device_file_stops_the_plugin_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "gpus.yaml"
    bad.write_text("gpus:\n  - {uuid: GPU-1, index: 0, minor: 0, product: X, memoryMiB: 0}\n")
    gpufleet.cli._register()
    root = tmp_path / "kubelet"
    result = CliRunner().invoke(gpufleet.cli.app, [
        "node-plugin", "--node-name", "n1", "--device-file", str(bad),
        "--kubelet-root-dir", str(root), "--kubeconfig", str(tmp_path / "none")])
    assert result.exit_code == 2, result.output
    assert f"{bad}: gpus[0].memoryMiB: Input should be greater than 0" in " ".join(
        result.output.split())
    assert not root.exists()


def test_a_missing_mps_control_binary_stops_the_plugin_with_one_line(tmp_path: Path) -> None:
    good = tmp_path / "gpus.yaml"
    good.write_text("gpus:\n  - {uuid: GPU-1, index: 0, minor: 0, product: X, memoryMiB: 1024}\n")
    gpufleet.cli._register()
    root = tmp_path / "kubelet"
    args = ["node-plugin", "--node-name", "n1", "--device-file", str(good),
            "--kubelet-root-dir", str(root), "--kubeconfig", str(tmp_path / "none"),
            "--mps-control", str(tmp_path / "nvidia-cuda-mps-control")]
    result = CliRunner().invoke(gpufleet.cli.app, args)
    assert result.exit_code == 2, result.output
    out = " ".join(result.output.split())
    assert (f"MPS control binary '{tmp_path / 'nvidia-cuda-mps-control'}' not found: install it"
            in out and "or pass --no-mps-daemon" in out), out
    assert "Traceback" not in result.output and not root.exists()
    # --no-mps-daemon goes past it (to the missing kubeconfig here)
    result = CliRunner().invoke(gpufleet.cli.app, [*args, "--no-mps-daemon"])
    assert result.exit_code == 2 and "kubeconfig file not found" in result.output, result.output


def test_hami_core_and_the_mps_daemon_exclude_each_other(tmp_path: Path) -> None:
    """--hami-core turns the MPS daemon off (no control binary needed); given with an explicit
    --mps-daemon it is refused; a library that is not there stops the plugin. Each with one
    line, exit 2, before the kubelet's directories are touched."""
    good = tmp_path / "gpus.yaml"
    good.write_text("gpus:\n  - {uuid: GPU-1, index: 0, minor: 0, product: X, memoryMiB: 1024}\n")
    lib = tmp_path / "libvgpu.so"
    lib.write_bytes(b"any content: the plugin only mounts it")
    gpufleet.cli._register()
    root = tmp_path / "kubelet"
    args = ["node-plugin", "--node-name", "n1", "--device-file", str(good),
            "--kubelet-root-dir", str(root), "--kubeconfig", str(tmp_path / "none"),
            "--mps-control", str(tmp_path / "nvidia-cuda-mps-control")]  # not there
    cases = [
        (["--hami-core", str(lib), "--mps-daemon"],
         "--hami-core and --mps-daemon are exclusive: a share runs under one; leave one out"),
        (["--hami-core", str(tmp_path / "missing.so")],
         f"HAMi-core library '{tmp_path / 'missing.so'}' not found: install HAMi-core's "
         "libvgpu.so there (the host path) or leave --hami-core out"),
        # the library there: past the MPS check (no control binary) to the missing kubeconfig,
        # alone or with a redundant --no-mps-daemon
        (["--hami-core", str(lib)], "kubeconfig file not found"),
        (["--hami-core", str(lib), "--no-mps-daemon"], "kubeconfig file not found"),
    ]
    for extra, message in cases:
        result = CliRunner().invoke(gpufleet.cli.app, [*args, *extra])
        out = " ".join(result.output.split())
        assert result.exit_code == 2 and message in out, (extra, result.output)
        assert "Traceback" not in result.output and not root.exists()
