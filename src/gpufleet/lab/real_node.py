"""A real node in the lab: containerd 2.x and a kubelet, both built from their Go modules like the
control plane (deploy/testcluster/build.sh), and Debian's runc, registered beside the KWOK nodes.

The KWOK nodes only pretend to run pods; this one runs them, so the chart's controller and agent
run as pods here (``gpufleet lab up --real-node``, :mod:`gpufleet.lab.release`). It is tainted
``gpufleet.io/system-only=true:NoSchedule``: only pods that tolerate that (the chart's, with the
lab's values) land on it, never the GPU workloads.

Every setting below is there because this kind of machine needed it (cgroup v1 controllers beside a
cgroup2 tree, no CAP_SYS_RESOURCE, no registry reachable); docs/install.md ("A real node in the
lab") says which failure each one avoids. containerd applies the CDI devices a DRA driver's
NodePrepareResources returns (from the specs in :func:`cdi_dir`), so a claim's env reaches its
container. Everything lives under ``DIR/real-node``: containerd's root, state and socket, the CDI
specs, the kubelet's root, the CNI config and IPAM state; the processes are lab
components (``DIR/run/{containerd,kubelet}.pid``, ``DIR/logs``). :func:`stop_node` undoes all of
it: kubelet, the pods' tasks and containers, containerd, whatever stayed mounted, the bridge.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from gpufleet.lab import processes
from gpufleet.lab.binaries import BUILD_SCRIPT, binary
from gpufleet.lab.errors import LabError

NODE_NAME = "real-node"
TAINT_KEY = "gpufleet.io/system-only"
WORK = "real-node"  # under the lab directory
COMPONENTS = ("containerd", "kubelet")  # start order
POD_LOGS = "pod-logs"  # the containers' logs, under the node's directory
CDI = "cdi"  # the CDI specs containerd reads, under the node's directory
# The pods' bridge; its subnet lies outside KWOK's fake pod CIDR (10.64.0.0/10) and podman's
# default (10.88.0.0/16). No ipMasq, no portmap: the chart's pods use the host network, and a
# bridge without them leaves no iptables rules behind (no CNI DEL runs at `lab down`).
BRIDGE = "gfrn0"
POD_SUBNET = "10.244.0.0/16"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
CNI_BIN = Path("/usr/lib/cni")
TOOLS = ("runc", "gcc", "umoci", "ip")
DEBIAN_PACKAGES = "runc containernetworking-plugins gcc libc6-dev umoci iproute2"
# from the build script's cache: the kubelet, and containerd with its client and its runc shim
BUILT = ("kubelet", "containerd", "ctr", "containerd-shim-runc-v2")

# The sandbox ("pause") container: no registry is reachable from the lab, so it is built here.
PAUSE_C = """#include <signal.h>
#include <unistd.h>
static void quit(int sig) { (void)sig; _exit(0); }
int main(void) { signal(SIGINT, quit); signal(SIGTERM, quit); for (;;) pause(); }
"""


def work_dir(directory: Path) -> Path:
    return directory / WORK


def cdi_dir(directory: Path) -> Path:
    """The directory of CDI specs the node's containerd reads (``cdi_spec_dirs``): where a DRA
    driver on this node writes them (``gpufleet node-plugin --cdi-dir``)."""
    return work_dir(directory) / CDI


def missing_prerequisite() -> str | None:
    """None when a real node can start here, else one line saying what is missing."""
    if os.geteuid() != 0:
        return "--real-node needs root (containerd, runc and the kubelet mount and make cgroups)"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if not (CNI_BIN / "bridge").is_file():
        missing.append(f"{CNI_BIN}/bridge")
    if missing:
        return (f"--real-node needs {', '.join(missing)} (Debian: apt-get install "
                f"{DEBIAN_PACKAGES}; or `make image-deps`)")
    for name in BUILT:
        if not os.access(binary(name), os.X_OK):
            return (f"no {name} at {binary(name)}: build it with `make k8s-binaries` "
                    f"(bash {BUILD_SCRIPT})")
    return None


def _run(argv: list[str], what: str, timeout_s: float = 300.0) -> str:
    return processes.run_tool(argv, f"real node: {what}", timeout_s=timeout_s)


def build_static_image(work: Path, name: str, source: str, tag: str) -> Path:
    """A one-file image: the C program ``source`` built static as ``/name`` (its entrypoint),
    packed as an OCI archive with umoci under ``work/name``; the archive's path. Import it with
    :func:`import_static_image`."""
    d = work / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    (d / f"{name}.c").write_text(source)
    _run(["gcc", "-static", "-Os", "-o", str(d / name), str(d / f"{name}.c")],
         f"building the {name} binary (gcc -static; Debian: libc6-dev)")
    layout = d / "layout"
    _run(["umoci", "init", "--layout", str(layout)], "umoci init")
    _run(["umoci", "new", "--image", f"{layout}:{tag}"], "umoci new")
    _run(["umoci", "unpack", "--image", f"{layout}:{tag}", str(d / "bundle")], "umoci unpack")
    shutil.copy2(d / name, d / "bundle" / "rootfs" / name)
    _run(["umoci", "repack", "--image", f"{layout}:{tag}", str(d / "bundle")], "umoci repack")
    _run(["umoci", "config", "--image", f"{layout}:{tag}", "--config.entrypoint", f"/{name}"],
         "umoci config")
    archive = d / f"{name}.oci.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(layout, arcname=".")
    return archive


def import_static_image(directory: Path, archive: Path, image: str) -> None:
    """Import an archive of :func:`build_static_image` as ``image`` (``repository:tag``, the tag
    the archive was built with) into the node's containerd, for the kubelet."""
    _run(_ctr(work_dir(directory), "images", "import", "--base-name", image.rsplit(":", 1)[0],
              str(archive)), f"importing {image}")


def containerd_config(work: Path) -> str:
    """containerd 2.x's config (version 3; 2.4 migrates it to its version 4 at each start, with a
    warning, and still reads ``[grpc]``, which version 4 moves into a plugin's section):
    everything under ``work``; CRI with runc on cgroupfs, the CDI specs of ``work/cdi``."""
    # restrict_oom_score_adj: runc cannot give the sandbox a negative oom_score_adj without
    # CAP_SYS_RESOURCE ("can't get final child's PID from pipe: EOF"). runtime_path: the shim
    # built beside this containerd, not one another containerd installed on PATH. CDI is always
    # on in 2.4 (no enable_cdi). NRI off: it would serve a socket under /var/run/nri; the opt
    # plugin's directory (default /opt/containerd) under ``work`` too.
    return f"""version = 3
root = "{work}/containerd/root"
state = "{work}/containerd/state"
[grpc]
  address = "{work}/containerd.sock"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{PAUSE_IMAGE}"
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  cdi_spec_dirs = ["{work}/{CDI}"]
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    runtime_path = "{binary("containerd-shim-runc-v2")}"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["{CNI_BIN}"]
    conf_dir = "{work}/cni"
[plugins.'io.containerd.nri.v1.nri']
  disable = true
[plugins.'io.containerd.internal.v1.opt']
  path = "{work}/containerd/opt"
"""


def cni_config(work: Path) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": "gpufleet-real-node",
        "plugins": [{
            "type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": False,
            "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_SUBNET}]],
                     "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(work / "ipam")},
        }],
    }


def kubelet_config(work: Path, ca: Path, port: int, healthz_port: int) -> dict[str, Any]:
    """The KubeletConfiguration. failCgroupV1: false — v1.36 refuses cgroup v1 (a hybrid
    hierarchy counts as v1) by default; protectKernelDefaults: false — the sysctls it would check
    are the host's, not ours to set. Its API (logs, exec) takes client certificates of the lab's
    CA only: the API server presents the admin pair (``--kubelet-client-certificate``)."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "failSwapOn": False,
        "protectKernelDefaults": False,
        "containerRuntimeEndpoint": f"unix://{work}/containerd.sock",
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                           "x509": {"clientCAFile": str(ca)}},
        "authorization": {"mode": "AlwaysAllow"},
        "readOnlyPort": 0,
        "port": port,
        "healthzPort": healthz_port,
        "healthzBindAddress": "127.0.0.1",
        "registerWithTaints": [{"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"}],
        # containers' logs under the node's directory too (default /var/log/pods)
        "podLogsDir": str(work / POD_LOGS),
        # the node's disk and memory are the host's, shared with everything else on it: a host
        # past the kubelet's default thresholds (disk 85-90 % full) would taint the node with
        # disk-pressure, leaving the chart's Deployment Pending (a DaemonSet tolerates it), and
        # image GC would delete the imported image (pullPolicy Never). "0%" sets no threshold.
        "evictionHard": {signal: "0%" for signal in (
            "memory.available", "nodefs.available", "nodefs.inodesFree",
            "imagefs.available", "imagefs.inodesFree")},
        "imageGCHighThresholdPercent": 100,
    }


def _ctr(work: Path, *args: str) -> list[str]:
    return [str(binary("ctr")), "-a", str(work / "containerd.sock"), "-n", "k8s.io", *args]


def image_reference(archive: Path) -> str:
    """The image reference an OCI archive names (``org.opencontainers.image.ref.name``, which
    ``make image`` writes in full: ``localhost/gpufleet:<version>``)."""
    try:
        with tarfile.open(archive) as tar:
            member = next(m for m in tar.getmembers() if m.name.lstrip("./") == "index.json")
            f = tar.extractfile(member)
            index = json.loads(f.read() if f else b"{}")
        ref = index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"]
    except (OSError, tarfile.TarError, StopIteration, ValueError, KeyError, IndexError) as exc:
        raise LabError(f"{archive}: not an OCI archive with a reference name ({exc!r})") from None
    if "/" not in ref or ":" not in ref.rsplit("/", 1)[1]:
        raise LabError(f"{archive}: reference {ref!r} is not repository:tag")
    return str(ref)


def import_image(directory: Path, archive: Path) -> str:
    """Import an OCI archive into the node's containerd (the kubelet's ``k8s.io`` namespace);
    the image's reference."""
    ref = image_reference(archive)
    _run(_ctr(work_dir(directory), "images", "import", str(archive)),
         f"importing {archive} into containerd", timeout_s=600)
    return ref


def _node_ready(api: Any, name: str) -> bool:
    from kubernetes import client

    node = client.CoreV1Api(api).read_node(name)
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or ())


def start_node(
    directory: Path,
    kubeconfig: Path,
    ca: Path,
    api: Any,
    start: Callable[..., processes.Running],
    *,
    timeout_s: float = 120.0,
    log: Callable[[str], None] = lambda _m: None,
) -> str:
    """Start containerd and the kubelet (through ``start``, the lab's component starter) and wait
    until the Node is Ready; its name. containerd serves the kubelet on a Unix socket (and binds
    its own streaming port); the kubelet is started on free ports, again on others when one was
    taken (:func:`gpufleet.lab.processes.start_on_free_ports`)."""
    work = work_dir(directory)
    stop_node(directory)  # leftovers of a run that was not taken down
    for sub in ("cni", CDI, "containerd", "kubelet", POD_LOGS):
        (work / sub).mkdir(parents=True, exist_ok=True)
    pause = build_static_image(work, "pause", PAUSE_C, PAUSE_IMAGE.rsplit(":", 1)[1])
    (work / "cni" / "10-bridge.conflist").write_text(json.dumps(cni_config(work), indent=2))
    config = work / "containerd.toml"
    config.write_text(containerd_config(work))
    sock = work / "containerd.sock"
    containerd = start("containerd", [str(binary("containerd")), "--config", str(config)])
    processes.wait_until(containerd, sock.is_socket, what="serving (no socket)",
                         timeout_s=timeout_s)
    import_static_image(directory, pause, PAUSE_IMAGE)
    kubelet_yaml = work / "kubelet.yaml"

    def kubelet_argv(ports: Sequence[int]) -> list[str]:
        # the kubelet takes no port 0 for its API: free ports, again on others if one is taken
        port, healthz = ports
        kubelet_yaml.write_text(yaml.safe_dump(kubelet_config(work, ca, port, healthz),
                                               sort_keys=False))
        return [
            str(binary("kubelet")), f"--config={kubelet_yaml}", f"--kubeconfig={kubeconfig}",
            f"--root-dir={work / 'kubelet'}", f"--cert-dir={work / 'kubelet' / 'pki'}",
            f"--hostname-override={NODE_NAME}",
        ]

    processes.start_on_free_ports(
        "kubelet", kubelet_argv, lambda _ports: _node_ready(api, NODE_NAME), start=start,
        what=f"registered and Ready (Node {NODE_NAME})", count=2, timeout_s=timeout_s, log=log)
    return NODE_NAME


def _mounts_under(path: Path) -> list[str]:
    prefix = f"{path}/"
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return []
    points = [line.split()[1].encode().decode("unicode_escape") for line in lines if line]
    return sorted((p for p in points if p.startswith(prefix)), reverse=True)


def _ids(work: Path, kind: str) -> list[str]:
    out = subprocess.run(_ctr(work, kind, "ls", "-q"), capture_output=True, text=True,
                         timeout=30, check=False)
    return out.stdout.split() if out.returncode == 0 else []


def running_tasks(directory: Path) -> list[str]:
    """The ids of the tasks (containers' processes) the node's containerd runs for the kubelet."""
    work = work_dir(directory)
    return _ids(work, "tasks") if (work / "containerd.sock").is_socket() else []


def _stop_pods(work: Path) -> None:
    """Kill and delete every task and container containerd runs for the kubelet."""
    if not (work / "containerd.sock").is_socket():
        return

    def ids(kind: str) -> list[str]:
        return _ids(work, kind)

    def each(ids_: list[str], *args: str) -> None:
        for i in ids_:
            subprocess.run(_ctr(work, *args, i), capture_output=True, timeout=30, check=False)

    each(ids("tasks"), "tasks", "kill", "-s", "SIGKILL")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        each(ids("tasks"), "tasks", "delete")
        if not ids("tasks"):
            break
        time.sleep(0.5)
    each(ids("containers"), "containers", "delete")


def stop_node(directory: Path, log: Callable[[str], None] = lambda _m: None) -> list[str]:
    """Take the real node down (idempotent): the kubelet first (so that it restarts nothing),
    the pods' tasks and containers, containerd, what stayed mounted under the node's directory,
    the bridge; then the directory itself when nothing is mounted there any more."""
    work = work_dir(directory)
    run_dir, log_dir = directory / "run", directory / "logs"
    if not work.exists() and not any((run_dir / f"{c}.pid").exists() for c in COMPONENTS):
        return []  # never a real-node lab: in particular, another lab's bridge is not ours
    stopped = []
    kubelet = processes.read_pidfile(run_dir / "kubelet.pid", log_dir)
    if kubelet is not None:
        if kubelet.alive():
            log(f"stopping kubelet (pid {kubelet.pid})")
            stopped.append("kubelet")
        processes.stop(kubelet)
    containerd = processes.read_pidfile(run_dir / "containerd.pid", log_dir)
    if containerd is not None and containerd.alive():
        _stop_pods(work)
    if containerd is not None:
        if containerd.alive():
            log(f"stopping containerd (pid {containerd.pid})")
            stopped.append("containerd")
        processes.stop(containerd)
    for point in _mounts_under(work):
        if subprocess.run(["umount", point], capture_output=True, check=False).returncode:
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        subprocess.run(["ip", "link", "delete", BRIDGE], capture_output=True, check=False)
    left = _mounts_under(work)
    if left:
        log(f"still mounted under {work}: {', '.join(left[:3])}; not removing it")
    elif work.exists():
        shutil.rmtree(work, ignore_errors=True)
    return stopped
