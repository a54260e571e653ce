"""The chart (``charts/gpufleet``) installed into the lab, its pods on the real node.

The values are the chart's defaults plus what the lab needs, each for one reason:

- ``hostNetwork`` and ``KUBERNETES_SERVICE_HOST=127.0.0.1`` / ``KUBERNETES_SERVICE_PORT`` for the
  controller and the agent: the lab runs no kube-proxy (the ``kubernetes`` Service IP leads
  nowhere) and its API server listens on 127.0.0.1 only;
- a node selector for the real node and a toleration of its taint (the KWOK nodes run nothing);
- the image ``make image`` built, imported into the node's containerd: ``pullPolicy: Never``
  (no registry is reachable; a missing image fails at once, not after pull retries);
- ports the kernel says are free (the host network is shared with everything else here).

With two replicas on one node and the host network, the second controller replica waits Pending
(the first holds the port) until the first goes: a takeover is then a reschedule, then the Lease.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from gpufleet.lab.binaries import binary
from gpufleet.lab.errors import LabError
from gpufleet.lab.processes import free_port, run_tool
from gpufleet.lab.real_node import TAINT_KEY

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "gpufleet"
IMAGE_BUILD = "deploy/image/build.sh"
RELEASE = "gpufleet"
NAMESPACE = "gpufleet-system"
CONTROLLER_SELECTOR = "app.kubernetes.io/component=scheduler"
AGENT_SELECTOR = "app.kubernetes.io/component=agent"


def chart_dir() -> Path:
    if not (CHART / "Chart.yaml").is_file():
        raise LabError(f"chart not found at {CHART}: --real-node runs from a source checkout")
    return CHART


def image_archive(log: Callable[[str], None] = lambda _m: None) -> Path:
    """The image archive of this checkout: ``deploy/image/build.sh`` (what ``make image`` runs;
    cached by content, so a no-op when built) with this Python's wheels; its path."""
    script = ROOT / IMAGE_BUILD
    if not script.is_file():
        raise LabError(f"{script} not found: pass --image ARCHIVE or run from a source checkout")
    log(f"building the image if needed (bash {IMAGE_BUILD}; minutes the first time)")
    out = run_tool(["bash", str(script)], IMAGE_BUILD, timeout_s=1800,
                   env={"PYTHON": sys.executable})
    lines = out.strip().splitlines()
    if not lines:
        raise LabError(f"{IMAGE_BUILD} printed no archive path")
    return Path(lines[-1])


def lab_values(server: str, node: str, image: str) -> dict[str, Any]:
    """The chart values for the lab's real node (see the module docstring)."""
    api = urlsplit(server)
    env = [{"name": "KUBERNETES_SERVICE_HOST", "value": api.hostname},
           {"name": "KUBERNETES_SERVICE_PORT", "value": str(api.port)}]
    on_node = {"kubernetes.io/hostname": node}
    tolerate = [{"key": TAINT_KEY, "operator": "Exists"}]
    repository, tag = image.rsplit(":", 1)
    return {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "controller": {"hostNetwork": True, "env": env, "nodeSelector": on_node,
                       "tolerations": tolerate, "port": free_port()},
        # null drops the default spot selector (helm merges maps)
        "agent": {"hostNetwork": True, "env": env, "port": free_port(),
                  "nodeSelector": {"karpenter.sh/capacity-type": None, **on_node}},
    }


def helm(kubeconfig: Path, *args: str, timeout_s: float = 300.0) -> str:
    return run_tool([str(binary("helm")), f"--kubeconfig={kubeconfig}", *args],
                    f"helm {args[0]}", timeout_s=timeout_s)


def install(kubeconfig: Path, values: dict[str, Any], *, release: str = RELEASE,
            namespace: str = NAMESPACE) -> None:
    """``helm install`` (no ``--wait``: the second replica stays Pending on one node, see the
    module docstring; the caller waits for what it needs)."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="gpufleet-values-") as f:
        yaml.safe_dump(values, f)
        f.flush()
        helm(kubeconfig, "install", release, str(chart_dir()), "--namespace", namespace,
             "--create-namespace", "--values", f.name)


def uninstall(kubeconfig: Path, *, release: str = RELEASE, namespace: str = NAMESPACE) -> None:
    helm(kubeconfig, "uninstall", release, "--namespace", namespace, "--wait")


def lease_holder(api: Any, namespace: str = NAMESPACE, release: str = RELEASE) -> str | None:
    """Who holds the controller's Lease (the chart names it ``<fullname>-scheduler``)."""
    from kubernetes import client

    name = f"{release if 'gpufleet' in release else f'{release}-gpufleet'}-scheduler"
    lease = client.CoordinationV1Api(api).read_namespaced_lease(name, namespace)
    return lease.spec.holder_identity or None


def _ready_pods(api: Any, selector: str, namespace: str) -> list[str]:
    from kubernetes import client

    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector).items
    return [p.metadata.name for p in pods
            if any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or ())]


def wait_leader(api: Any, kubeconfig: Path, *, namespace: str = NAMESPACE,
                release: str = RELEASE, timeout_s: float = 120.0) -> str:
    """Wait until a controller pod is Ready and holds the Lease; its name."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            holder = lease_holder(api, namespace, release)
            if holder is not None and holder in _ready_pods(api, CONTROLLER_SELECTOR, namespace):
                return holder
        except Exception:  # not created yet, or the API hiccuped: "not yet"
            pass
        if time.monotonic() >= deadline:
            raise LabError(f"no Ready controller pod holds the Lease after {timeout_s:.0f} s:\n"
                           f"{describe(kubeconfig, namespace)}")
        time.sleep(0.5)


def describe(kubeconfig: Path, namespace: str = NAMESPACE) -> str:
    """The release's pods, one per line, for an error message."""
    out = subprocess.run([str(binary("kubectl")), f"--kubeconfig={kubeconfig}", "get", "pods",
                          "-n", namespace, "-o", "wide"], capture_output=True, text=True,
                         timeout=60, check=False)
    return (out.stdout or out.stderr).strip()


