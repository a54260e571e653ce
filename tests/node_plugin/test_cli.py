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
