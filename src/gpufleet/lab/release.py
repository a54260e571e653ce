"""The chart (``charts/gpufleet``) installed into the lab, its pods on the real node.

The values are the chart's defaults plus what the lab needs, each for one reason:

- ``hostNetwork`` and ``KUBERNETES_SERVICE_HOST=127.0.0.1`` / ``KUBERNETES_SERVICE_PORT`` for the
  controller and the agent: the lab runs no kube-proxy (the ``kubernetes`` Service IP leads
  nowhere) and its API server listens on 127.0.0.1 only;
- a node selector for the real node and a toleration of its taint (the KWOK nodes run nothing);
- the image ``make image`` built, imported into the node's containerd: ``pullPolicy: Never``
  (no registry is reachable; a missing image fails at once, not after pull retries);
- ports the kernel says are free (the host network is shared with everything else here). Another
  process can take one before the pod binds it; :func:`install_for_lab` then sees the pod say so
  in its log on the node and upgrades the release with another port for that workload, a bounded
  number of times.

With two replicas on one node and the host network, the second controller replica waits Pending
(the first holds the port) until the first goes: a takeover is then a reschedule, then the Lease.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from gpufleet.lab.binaries import binary
from gpufleet.lab.errors import LabError
from gpufleet.lab.processes import ADDRESS_IN_USE, PORT_TRIES, free_ports, run_tool
from gpufleet.lab.real_node import TAINT_KEY

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "gpufleet"
IMAGE_BUILD = "deploy/image/build.sh"
RELEASE = "gpufleet"
NAMESPACE = "gpufleet-system"
CONTROLLER_SELECTOR = "app.kubernetes.io/component=scheduler"
AGENT_SELECTOR = "app.kubernetes.io/component=agent"
# (values key, pod selector, container name) of each workload that serves on a host port
WORKLOADS = (("controller", CONTROLLER_SELECTOR, "controller"), ("agent", AGENT_SELECTOR, "agent"))


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


def lab_values(server: str, node: str, image: str,
               ports: tuple[int, int] | None = None) -> dict[str, Any]:
    """The chart values for the lab's real node (see the module docstring): the controller's and
    the agent's ``ports``, else two ports free now."""
    controller_port, agent_port = ports or free_ports(2)
    api = urlsplit(server)
    env = [{"name": "KUBERNETES_SERVICE_HOST", "value": api.hostname},
           {"name": "KUBERNETES_SERVICE_PORT", "value": str(api.port)}]
    on_node = {"kubernetes.io/hostname": node}
    tolerate = [{"key": TAINT_KEY, "operator": "Exists"}]
    repository, tag = image.rsplit(":", 1)
    return {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "controller": {"hostNetwork": True, "env": env, "nodeSelector": on_node,
                       "tolerations": tolerate, "port": controller_port},
        # null drops the default spot selector (helm merges maps)
        "agent": {"hostNetwork": True, "env": env, "port": agent_port,
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


def upgrade(kubeconfig: Path, values: dict[str, Any], *, release: str = RELEASE,
            namespace: str = NAMESPACE) -> None:
    """``helm upgrade`` to ``values`` (no ``--wait``, as :func:`install`)."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="gpufleet-values-") as f:
        yaml.safe_dump(values, f)
        f.flush()
        helm(kubeconfig, "upgrade", release, str(chart_dir()), "--namespace", namespace,
             "--values", f.name)


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
                release: str = RELEASE, timeout_s: float = 120.0,
                check: Callable[[], None] = lambda: None) -> str:
    """Wait until a controller pod is Ready and holds the Lease; its name. ``check`` runs at
    each poll and may raise :class:`PodPortTaken` to end the wait."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            check()
            holder = lease_holder(api, namespace, release)
            if holder is not None and holder in _ready_pods(api, CONTROLLER_SELECTOR, namespace):
                return holder
        except PodPortTaken:
            raise
        except Exception:  # not created yet, or the API hiccuped: "not yet"
            pass
        if time.monotonic() >= deadline:
            raise LabError(f"no Ready controller pod holds the Lease after {timeout_s:.0f} s:\n"
                           f"{describe(kubeconfig, namespace)}")
        time.sleep(0.5)


class PodPortTaken(LabError):
    """A pod of the release found its host port in use by another process."""

    def __init__(self, workload: str, port: int, pod: str, log: str) -> None:
        super().__init__(f"the {workload} pod {pod} found port {port} in use by another "
                         f"process:\n{log}")
        self.workload, self.port = workload, port


def on_port(pods: Iterable[Any], container: str, port: int) -> list[Any]:
    """The pods whose ``container`` serves on ``port`` (the pods of one set of values)."""
    return [p for p in pods if any(
        c.name == container and any(cp.container_port == port for cp in c.ports or ())
        for c in p.spec.containers)]


def container_log(pod_logs: Path, pod: Any, container: str) -> str:
    """Everything ``container`` of ``pod`` wrote, every restart, from the node's log files
    (``<podLogsDir>/<namespace>_<pod>_<uid>/<container>/<restart>.log``)."""
    d = pod_logs / f"{pod.metadata.namespace}_{pod.metadata.name}_{pod.metadata.uid}" / container
    out = []
    for f in sorted(d.glob("*.log")):
        try:
            out.append(f.read_text(errors="replace"))
        except OSError:  # rotated or removed meanwhile
            continue
    return "".join(out)


def check_port(pods: Iterable[Any], pod_logs: Path, workload: str, port: int) -> None:
    """Raise :class:`PodPortTaken` when a pod of ``workload`` (``controller`` or ``agent``) on
    ``port`` says in its log that the port is in use (its only port: so it did not serve)."""
    container = next(c for w, _, c in WORKLOADS if w == workload)
    for pod in on_port(pods, container, port):
        text = container_log(pod_logs, pod, container)
        if ADDRESS_IN_USE in text.lower():
            tail = "\n".join(text.strip().splitlines()[-5:])
            raise PodPortTaken(workload, port, pod.metadata.name, tail)


def agent_serving(pods: Iterable[Any], pod_logs: Path, port: int) -> bool:
    """Whether an agent pod on ``port`` has said it serves its probes there (it says so once it
    holds the port: no other process answering on the port can pass for the agent)."""
    return any(line.rstrip().endswith(f":{port}") and "probes on" in line
               for pod in on_port(pods, "agent", port)
               for line in container_log(pod_logs, pod, "agent").splitlines())


def install_for_lab(api: Any, kubeconfig: Path, server: str, node: str, image: str, *,
                    pod_logs: Path, timeout_s: float = 120.0, tries: int = PORT_TRIES,
                    log: Callable[[str], None] = lambda _m: None) -> str:
    """Install the chart with :func:`lab_values` and wait until a controller pod leads and the
    agent serves its probes; the leader's name.

    The pods use the host's network, on ports free when the values were made. When a pod says
    its port is in use (its log on the node, ``pod_logs``), the release is upgraded with a fresh
    port for that workload (the other keeps its own: its pods stay as they are), ``tries``
    installs in all; then a :class:`LabError` names the pod and the port.
    """
    from kubernetes import client

    core = client.CoreV1Api(api)

    def pods(selector: str) -> list[Any]:
        return list(core.list_namespaced_pod(NAMESPACE, label_selector=selector).items)

    ports = dict(zip((w for w, _, _ in WORKLOADS), free_ports(len(WORKLOADS)), strict=True))
    for attempt in range(1, tries + 1):
        values = lab_values(server, node, image, (ports["controller"], ports["agent"]))
        (install if attempt == 1 else upgrade)(kubeconfig, values)

        def taken(ports: dict[str, int] = ports) -> None:
            for workload, selector, _ in WORKLOADS:
                check_port(pods(selector), pod_logs, workload, ports[workload])

        def agent_up(ports: dict[str, int] = ports) -> bool:
            taken(ports)
            return agent_serving(pods(AGENT_SELECTOR), pod_logs, ports["agent"])

        try:
            leader = wait_leader(api, kubeconfig, timeout_s=timeout_s, check=taken)
            _wait(agent_up, f"the agent serving on port {ports['agent']}", timeout_s, kubeconfig)
            return leader
        except PodPortTaken as exc:
            if attempt == tries:
                raise LabError(f"{exc}\n(gave up after {tries} installs on free ports)") from None
            ports[exc.workload] = next(p for p in free_ports(len(ports) + 1)
                                       if p not in ports.values())
            log(f"{exc.workload}: port {exc.port} was taken by another process; upgrading the "
                f"release to port {ports[exc.workload]} ({attempt + 1} of {tries})")
    raise AssertionError("unreachable")  # the loop returns or raises


def _wait(cond: Callable[[], bool], what: str, timeout_s: float, kubeconfig: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if cond():
                return
        except PodPortTaken:
            raise
        except Exception:  # not created yet, or the API hiccuped: "not yet"
            pass
        if time.monotonic() >= deadline:
            raise LabError(f"not {what} after {timeout_s:.0f} s:\n{describe(kubeconfig)}")
        time.sleep(0.5)


def describe(kubeconfig: Path, namespace: str = NAMESPACE) -> str:
    """The release's pods, one per line, then why each unscheduled one waits (its
    ``PodScheduled`` message) and the nodes' taints and pressure conditions, for an error
    message: a pod left Pending is explained by the scheduler's words, not guessed at."""
    def kubectl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(binary("kubectl")), f"--kubeconfig={kubeconfig}", *args],
                              capture_output=True, text=True, timeout=60, check=False)

    out = kubectl("get", "pods", "-n", namespace, "-o", "wide")
    lines = [(out.stdout or out.stderr).strip()]
    pods = kubectl("get", "pods", "-n", namespace, "-o", "json")
    nodes = kubectl("get", "nodes", "-l", "type!=kwok", "-o", "json")
    try:
        for pod in json.loads(pods.stdout).get("items", []):
            for c in pod.get("status", {}).get("conditions") or []:
                if c.get("type") == "PodScheduled" and c.get("status") != "True":
                    lines.append(f"{pod['metadata']['name']}: {c.get('reason')}: "
                                 f"{c.get('message')}")
        for node in json.loads(nodes.stdout).get("items", []):
            taints = [f"{t['key']}:{t.get('effect')}" for t in node["spec"].get("taints") or []]
            conditions = [f"{c['type']}={c['status']}" for c in
                          node.get("status", {}).get("conditions") or []
                          if (c["type"] == "Ready") != (c["status"] == "True")]
            lines.append(f"node {node['metadata']['name']}: taints {taints or 'none'}; "
                         f"conditions {conditions or 'Ready, no pressure'}")
    except (ValueError, KeyError, TypeError) as exc:
        lines.append(f"(pods' and nodes' status unreadable: {exc!r})")
    return "\n".join(lines)


