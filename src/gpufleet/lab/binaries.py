"""Where the control-plane binaries live, and whether they are all there.

The binaries are built by ``deploy/testcluster/build.sh`` into a cache outside the repository,
keyed by version, so that a Kubernetes upgrade never runs against stale binaries.
"""

from __future__ import annotations

import os
from pathlib import Path

KUBERNETES_VERSION = "v1.36.3"
KWOK_VERSION = "v0.7.0"
KINE_VERSION = "v0.17.5"
HELM_VERSION = "v3.22.0"  # the chart tests' helm (charts/gpufleet)
CONTAINERD_VERSION = "v2.4.2"  # the lab's real node (gpufleet.lab.real_node)
STAMP = (f"kubernetes={KUBERNETES_VERSION} kwok={KWOK_VERSION} kine={KINE_VERSION} "
         f"helm={HELM_VERSION} containerd={CONTAINERD_VERSION}")
BINARIES = (
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "kwok",
    "kine",
    "helm",
)
BUILD_SCRIPT = "deploy/testcluster/build.sh"


def bin_dir() -> Path:
    """``$GPUFLEET_K8S_BIN``, else the version-keyed cache the build script fills."""
    env = os.environ.get("GPUFLEET_K8S_BIN")
    if env:
        return Path(env)
    return Path.home() / ".cache" / "gpufleet" / f"k8s-{KUBERNETES_VERSION}" / "bin"


def missing_binaries(directory: Path | None = None) -> list[str]:
    """Binaries absent (or not executable) in ``directory``; all of them when the stamp says
    they were built for other versions (a hand-made directory without a stamp is accepted)."""
    d = directory or bin_dir()
    stamp = d / ".version"
    if stamp.is_file() and stamp.read_text().strip() != STAMP:
        return list(BINARIES)
    return [b for b in BINARIES if not os.access(d / b, os.X_OK)]


def binary(name: str, directory: Path | None = None) -> Path:
    return (directory or bin_dir()) / name


def missing_reason(directory: Path | None = None) -> str | None:
    """None when the lab can start, else one line saying what is missing and how to build it."""
    missing = missing_binaries(directory)
    if not missing:
        return None
    return (
        f"Kubernetes {KUBERNETES_VERSION} test binaries missing in {directory or bin_dir()} "
        f"({', '.join(missing)}): run `bash {BUILD_SCRIPT}` (make test does)"
    )
