"""The kubelet's gRPC stubs, generated from its own ``.proto`` files into a cache directory.

The three APIs (``pluginregistration.v1.Registration``, ``k8s.io.kubelet.pkg.apis.dra.v1
.DRAPlugin`` and the resource-health stream ``v1alpha1.DRAResourceHealth``) are defined in the
``k8s.io/kubelet`` Go module, at the version matching the lab's Kubernetes
(:data:`gpufleet.lab.binaries.KUBERNETES_VERSION`). ``deploy/testcluster/build.sh`` already
downloads that module into Go's module cache; when it is not there and ``go`` is, this
module downloads it (``go mod download``). The ``.proto`` files are copied under distinct names
into one package directory and compiled once with grpcio-tools into
``~/.cache/gpufleet/protos/kubelet-<version>-grpcio-tools-<version>/`` (``$GPUFLEET_PROTOS_DIR``
overrides it), keyed by both versions so an upgrade of either regenerates them. Nothing generated
is committed. ``make protos`` runs :func:`generate` ahead of time.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from gpufleet.lab.binaries import KUBERNETES_VERSION

# k8s.io/kubelet is a staging module: v1.X.Y of Kubernetes is its v0.X.Y
KUBELET_MODULE = "k8s.io/kubelet"
KUBELET_VERSION = "v0" + KUBERNETES_VERSION[2:]
PACKAGE = "gpufleet_kubelet_api"  # the generated modules' package (a name nothing else uses)
# (our file name, the file inside the kubelet module)
PROTOS = (
    ("dra_v1", "pkg/apis/dra/v1/api.proto"),
    ("pluginregistration_v1", "pkg/apis/pluginregistration/v1/api.proto"),
    ("dra_health_v1alpha1", "pkg/apis/dra-health/v1alpha1/api.proto"),
)
_lock = threading.Lock()


class ProtoError(RuntimeError):
    """The kubelet's .proto files are missing or did not compile."""


@dataclass(frozen=True)
class Stubs:
    dra: ModuleType  # messages of dra/v1
    dra_grpc: ModuleType  # DRAPluginServicer, add_DRAPluginServicer_to_server
    registration: ModuleType
    registration_grpc: ModuleType
    health: ModuleType  # messages of dra-health/v1alpha1
    health_grpc: ModuleType  # DRAResourceHealthServicer (NodeWatchResources)


def _go() -> str | None:
    found = shutil.which("go")
    if found is None and os.access("/usr/local/go/bin/go", os.X_OK):
        found = "/usr/local/go/bin/go"
    return found


def module_cache() -> Path:
    """``$GOMODCACHE``, else ``$GOPATH/pkg/mod``, else ``~/go/pkg/mod`` (Go's own defaults)."""
    if os.environ.get("GOMODCACHE"):
        return Path(os.environ["GOMODCACHE"])
    gopath = os.environ.get("GOPATH", "").split(os.pathsep)[0]
    return Path(gopath or Path.home() / "go") / "pkg" / "mod"


def kubelet_module_dir(download: bool = True) -> Path:
    """The ``k8s.io/kubelet`` module's directory in the module cache, downloaded when missing
    and ``go`` is on PATH (or in /usr/local/go/bin)."""
    d = module_cache() / f"{KUBELET_MODULE}@{KUBELET_VERSION}"
    if (d / PROTOS[0][1]).is_file():
        return d
    go = _go() if download else None
    if go is not None:
        try:
            subprocess.run([go, "mod", "download", f"{KUBELET_MODULE}@{KUBELET_VERSION}"],
                           check=True, capture_output=True, text=True, timeout=300,
                           env={**os.environ, "GOFLAGS": "-mod=mod"})
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            out = getattr(exc, "stderr", "") or ""
            raise ProtoError(f"go mod download {KUBELET_MODULE}@{KUBELET_VERSION} failed: "
                             f"{out.strip()[-500:] or exc}") from None
        if (d / PROTOS[0][1]).is_file():
            return d
    raise ProtoError(
        f"the kubelet's .proto files are not in {d} (Go module {KUBELET_MODULE}@"
        f"{KUBELET_VERSION}): run `bash deploy/testcluster/build.sh` or `go mod download "
        f"{KUBELET_MODULE}@{KUBELET_VERSION}`, or set GPUFLEET_PROTOS_DIR to stubs generated "
        "elsewhere")


def _tools_version() -> str:
    from importlib.metadata import version

    return version("grpcio-tools")


def out_dir() -> Path:
    """Where the stubs go: ``$GPUFLEET_PROTOS_DIR``, else the version-keyed cache."""
    env = os.environ.get("GPUFLEET_PROTOS_DIR")
    if env:
        return Path(env)
    return (Path.home() / ".cache" / "gpufleet" / "protos"
            / f"kubelet-{KUBELET_VERSION}-grpcio-tools-{_tools_version()}")


def _complete(out: Path) -> bool:
    pkg = out / PACKAGE
    return (pkg / "__init__.py").is_file() and all(
        (pkg / f"{name}_pb2.py").is_file() and (pkg / f"{name}_pb2_grpc.py").is_file()
        for name, _ in PROTOS)


def generate(out: Path | None = None) -> Path:
    """Compile the stubs into ``out`` (default :func:`out_dir`) unless they are there; ``out``.
    Written into a temporary sibling directory and renamed, so a reader never sees half."""
    out = out or out_dir()
    if _complete(out):
        return out
    from grpc_tools import protoc

    src = kubelet_module_dir()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    staged = tmp / "src" / PACKAGE
    staged.mkdir(parents=True)
    gen = tmp / "gen"
    (gen / PACKAGE).mkdir(parents=True)
    (gen / PACKAGE / "__init__.py").write_text(
        f'"""Generated from {KUBELET_MODULE}@{KUBELET_VERSION} by '
        'gpufleet.node_plugin.protos."""\n')
    well_known = Path(protoc.__file__).parent / "_proto"
    for name, rel in PROTOS:
        shutil.copyfile(src / rel, staged / f"{name}.proto")
        rc = protoc.main([
            "grpc_tools.protoc", f"-I{tmp / 'src'}", f"-I{well_known}",
            f"--python_out={gen}", f"--grpc_python_out={gen}", f"{PACKAGE}/{name}.proto",
        ])
        if rc != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise ProtoError(f"grpc_tools.protoc failed ({rc}) on {src / rel}")
    if out.exists():  # stale or partial
        shutil.rmtree(out)
    os.replace(gen, out)
    shutil.rmtree(tmp, ignore_errors=True)
    return out


def load() -> Stubs:
    """The stub modules, generated first when the cache lacks them."""
    with _lock:
        out = generate()
        if str(out) not in sys.path:
            sys.path.append(str(out))
        mods = [importlib.import_module(f"{PACKAGE}.{name}{suffix}")
                for name, _ in PROTOS for suffix in ("_pb2", "_pb2_grpc")]
    return Stubs(*mods)


if __name__ == "__main__":  # `make protos`
    print(generate())
