"""The capacity loop end to end on a lab of its own: ``gpufleet lab up --nodes 0 --config cfg``
starts the controller with the kwok cloud; plain batch/v1 Jobs asking for ``nvidia.com/gpu`` make it
launch nodes (spot only for the Jobs that tolerate spot), run to completion through a spot
reclaim, and the fleet goes back to zero. Then the controller is killed with SIGKILL in the
middle of a scale-up and a second one converges.

How a plain Job completes in the lab: the lab's KWOK ``pod-complete`` stage finishes a running pod
owned by a Job after the delay in its ``pod-complete.stage.kwok.x-k8s.io/delay`` annotation (a
KWOK annotation on the Job's pod template, nothing gpufleet-specific; see
``gpufleet/lab/stages/pod-complete.yaml``).

The reclaim is driven through the kwok provider's market clock, which lives in the API
(ConfigMap ``gpufleet-kwok-clock``): the test moves the market to just before a drop in the
availability trace it wrote, exactly as a lab user fast-forwards the market.

Every wait is on a condition, with a deadline sized for a loaded machine (a load of 5 on 2
cores, where starting a controller alone takes tens of seconds): the deadlines only turn a hang
into a failure, nothing here is timed. Each check reads one listing (or the watch's record of
every Node ever added), never two listings taken at different moments, between which a node can
be reclaimed or scaled down.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch
from live_wait import wait_for

from gpufleet.cloud.kwok import CLOCK_NAME, PENDING_LABEL
from gpufleet.cloud.provider import TAG_MANAGED, TAG_TOKEN
from gpufleet.k8s.capacity.launch_records import LABEL as RECORD_LABEL
from gpufleet.k8s.translate.names import ANN_INTERRUPTION
from gpufleet.lab.cluster import api_client
from gpufleet.lab.processes import read_pidfile, stop

# the sum of a test's deadlines, so that a wait's own message, not the suite's timeout, reports a
# hang
pytestmark = [pytest.mark.live, pytest.mark.timeout(1800)]

NS = "kube-system"  # where the lab's controller keeps launch records and the kwok clock
MANAGED = f"{TAG_MANAGED}=true"
DROP_AT_S = 3600.0  # the trace below: spot in us-east-1b until market second 3600
CAPACITY_TYPE = "karpenter.sh/capacity-type"
SPOT_TOL = {"key": CAPACITY_TYPE, "operator": "Equal", "value": "spot", "effect": "NoSchedule"}


def gpufleet(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpufleet", *args], capture_output=True,
                          text=True, timeout=timeout)


@dataclass
class NodeLog:
    """Every gpufleet Node ever added, by name, with its token and its capacity type (a watch
    thread): what a node was stays known after it is gone."""

    added: dict[str, str] = field(default_factory=dict)
    capacity: dict[str, str] = field(default_factory=dict)
    adds: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self, core: client.CoreV1Api) -> None:
        while not self.stop.is_set():
            w = watch.Watch()
            try:
                for ev in w.stream(core.list_node, label_selector=MANAGED, timeout_seconds=2):
                    if ev["type"] == "ADDED":
                        meta = ev["object"].metadata
                        if meta.name not in self.added:
                            self.adds += 1
                        self.added[meta.name] = meta.labels.get(TAG_TOKEN, "")
                        self.capacity[meta.name] = meta.labels.get(CAPACITY_TYPE, "")
                    if self.stop.is_set():
                        break
            except Exception:
                time.sleep(0.2)


@dataclass
class Lab:
    directory: Path
    kubeconfig: Path
    api: Any
    config: Path

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def batch(self) -> client.BatchV1Api:
        return client.BatchV1Api(self.api)

    @property
    def controller_log(self) -> Path:
        return self.directory / "logs" / "gpufleet-controller.log"


CONFIG = """
name: lab-capacity
provisioning_delay_s: 5
scale_down_unneeded_s: 30
max_pending_wait_s: 5
instance_types: [p3.2xlarge, p3.8xlarge, p3.16xlarge]
availability_dir: {traces}
cloud:
  name: kwok
  registration_timeout_s: 120
  kwok: {{notice_s: 5, namespace: {ns}}}
"""


@pytest.fixture(scope="module")
def capacity_lab(lab_binaries: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    tmp = tmp_path_factory.mktemp("capacity")
    traces = tmp / "traces" / "lab"
    traces.mkdir(parents=True)
    ticks = int(DROP_AT_S // 60)
    (traces / "us-east-1b_v100_1.json").write_text(json.dumps(
        {"metadata": {"gap_seconds": 60}, "data": [1] * ticks + [0] * 30 + [1] * 30}))
    cfg = tmp / "cfg.yaml"
    cfg.write_text(CONFIG.format(traces=traces, ns=NS))
    d = tmp / "lab"
    up = gpufleet("lab", "up", "--dir", str(d), "--nodes", "0", "--config", str(cfg))
    try:
        assert up.returncode == 0, up.stderr
        assert "gpufleet controller: started" in up.stdout
        kubeconfig = Path(up.stdout.strip().splitlines()[-1])
        yield Lab(d, kubeconfig, api_client(kubeconfig), cfg)
    finally:
        down = gpufleet("lab", "down", "--dir", str(d))
        assert down.returncode == 0, down.stderr


def job(name: str, spot: bool, run_s: int) -> dict:
    spec: dict[str, Any] = {
        "schedulerName": "gpufleet", "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "train", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "1",
                                                 "memory": "1Gi"}}}],
    }
    if spot:
        spec["tolerations"] = [SPOT_TOL]
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"backoffLimit": 6, "template": {
                "metadata": {"annotations": {
                    "pod-complete.stage.kwok.x-k8s.io/delay": f"{run_s}s"}},
                "spec": spec}}}


def namespace(core: client.CoreV1Api, name: str) -> str:
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    wait_for("the default ServiceAccount", lambda: _has_sa(core, name), 120)
    return name


def _has_sa(core: client.CoreV1Api, ns: str) -> bool:
    return any(s.metadata.name == "default"
               for s in core.list_namespaced_service_account(ns).items)


def succeeded(batch: client.BatchV1Api, ns: str) -> int:
    return sum(1 for j in batch.list_namespaced_job(ns).items if (j.status.succeeded or 0) >= 1)


def managed_nodes(core: client.CoreV1Api) -> list[Any]:
    return core.list_node(label_selector=MANAGED).items


def leftovers(core: client.CoreV1Api) -> tuple[list[str], list[str], list[str]]:
    """(gpufleet Nodes, pending kwok launches, launch records) still in the API."""
    return ([n.metadata.name for n in managed_nodes(core)],
            [c.metadata.name for c in core.list_namespaced_config_map(
                NS, label_selector=f"{PENDING_LABEL}=true").items],
            [c.metadata.name for c in core.list_namespaced_config_map(
                NS, label_selector=f"{RECORD_LABEL}=true").items])


def move_market_to(core: client.CoreV1Api, market_s: float) -> None:
    """Set the kwok market clock's offset so that market time is ``market_s`` now."""
    cm = core.read_namespaced_config_map(CLOCK_NAME, NS)
    origin = float(cm.data["origin"])
    offset = market_s - (time.time() - origin)  # speedup 1, market_start_s 0
    core.patch_namespaced_config_map(CLOCK_NAME, NS, {"data": {"offset_s": repr(offset)}})


def test_twenty_jobs_scale_up_survive_a_reclaim_and_scale_back_to_zero(
        capacity_lab: Lab) -> None:
    core, batch, log = capacity_lab.core, capacity_lab.batch, capacity_lab.controller_log
    assert managed_nodes(core) == [] and core.list_node().items == []  # --nodes 0
    nodes = NodeLog()
    watcher = threading.Thread(target=nodes.run, args=(core,), daemon=True)
    watcher.start()
    ns = namespace(core, "e2e")
    try:
        for i in range(20):
            batch.create_namespaced_job(ns, job(f"train-{i:02d}", spot=i % 2 == 0, run_s=20))

        def spot_nodes_running() -> list[str]:
            pods = core.list_namespaced_pod(ns).items
            spot = {n.metadata.name for n in managed_nodes(core)
                    if n.metadata.labels[CAPACITY_TYPE] == "spot"}
            return sorted({p.spec.node_name for p in pods if p.spec.node_name in spot
                           and p.status.phase == "Running"})

        wait_for("pods running on launched spot nodes", spot_nodes_running, 240, log)

        def placements() -> list[tuple[str, str, bool]]:
            """(pod, its node's capacity type, whether it tolerates spot) for every bound pod of
            one listing, once the watch has seen each of their nodes; [] until then."""
            bound = [p for p in core.list_namespaced_pod(ns).items if p.spec.node_name]
            if not all(p.spec.node_name in nodes.capacity for p in bound):
                return []
            return [(p.metadata.name, nodes.capacity[p.spec.node_name],
                     any(t.key == CAPACITY_TYPE for t in p.spec.tolerations or ()))
                    for p in bound]

        # the capacity types follow the Jobs: spot only for the pods that tolerate it
        for pod, ct, tolerant in wait_for("the watch to see the bound pods' nodes", placements,
                                          60):
            assert ct == "on-demand" or tolerant, (pod, ct)

        move_market_to(core, DROP_AT_S - 2)  # the trace drops in two seconds

        def marked_nodes() -> dict[str, str]:
            """The nodes marked for reclaim, with their capacity types, from one listing."""
            return {n.metadata.name: n.metadata.labels[CAPACITY_TYPE] for n in managed_nodes(core)
                    if ANN_INTERRUPTION in (n.metadata.annotations or {})}

        marked = wait_for("the reclaim notice on a spot node", marked_nodes, 120, log)
        assert set(marked.values()) == {"spot"}, marked  # the trace drop reclaims spot nodes only
        wait_for("the reclaimed nodes to go",
                 lambda: not {n.metadata.name for n in managed_nodes(core)} & set(marked), 180,
                 log)

        wait_for("all 20 Jobs to complete", lambda: succeeded(batch, ns) == 20, 480, log)
        jobs = batch.list_namespaced_job(ns).items
        # the reclaimed pods were recreated by the Job controller and completed elsewhere
        assert sum(j.status.failed or 0 for j in jobs) >= 1

        wait_for("scale-down to zero", lambda: managed_nodes(core) == [], 30 + 210, log)
        assert leftovers(core) == ([], [], [])  # no instance leaked, no record left
        tokens = list(nodes.added.values())
        assert nodes.adds == len(set(tokens)) == len(tokens)  # one Node per token, ever
        assert len(tokens) >= 20 + 1  # the replacements after the reclaim are new instances
    finally:
        nodes.stop.set()
        core.delete_namespace(ns)
        watcher.join(timeout=5)


def test_kill_9_in_the_middle_of_a_scale_up_then_a_second_controller_converges(
        capacity_lab: Lab) -> None:
    core, batch = capacity_lab.core, capacity_lab.batch
    d = capacity_lab.directory
    running = read_pidfile(d / "run" / "gpufleet-controller.pid", d / "logs")
    if running is not None:
        stop(running)  # the lab's own controller steps aside (and releases its Lease)
    nodes = NodeLog()
    watcher = threading.Thread(target=nodes.run, args=(core,), daemon=True)
    watcher.start()
    ns = namespace(core, "kill9")
    logs = [d / "logs" / "kill9-a.log", d / "logs" / "kill9-b.log"]
    argv = [sys.executable, "-m", "gpufleet", "controller", "--kubeconfig",
            str(capacity_lab.kubeconfig), "--config", str(capacity_lab.config), "--port", "0",
            "--lease-duration", "6", "--renew-deadline", "4", "--retry-period", "1"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    procs: list[subprocess.Popen] = []
    try:
        for i in range(6):
            batch.create_namespaced_job(ns, job(f"k-{i}", spot=False, run_s=5))
        with logs[0].open("w") as out:
            procs.append(subprocess.Popen([*argv, "--identity", "a"], stdout=out,
                                          stderr=subprocess.STDOUT, env=env))

        def first_record() -> list[str]:
            return [c.metadata.name for c in core.list_namespaced_config_map(
                NS, label_selector=f"{RECORD_LABEL}=true").items]

        # a record lives at least the provisioning delay (5 s) before its Node registers: a
        # tenth of a second between looks still kills the controller in the middle of the
        # scale-up, without a tight loop of API calls competing with it for the CPU
        wait_for("the first launch record", first_record, 240, logs[0], poll_s=0.1)
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait(timeout=10)
        recorded = set(first_record())
        assert recorded  # killed before anything could clean up
        with logs[1].open("w") as out:
            procs.append(subprocess.Popen([*argv, "--identity", "b"], stdout=out,
                                          stderr=subprocess.STDOUT, env=env))
        wait_for("all Jobs to complete after the restart", lambda: succeeded(batch, ns) == 6,
                 360, logs[1])
        # every launch the killed controller recorded becomes a Node: nothing was lost (a launch
        # the Jobs no longer need may register after they completed)
        launched = {r.removeprefix("gpufleet-launch-") for r in recorded}
        wait_for("every recorded launch to become a Node",
                 lambda: launched <= set(nodes.added.values()), 180, logs[1])
        # converged: no record or pending launch left, every instance is a Node (scale-down to
        # zero is the first test's)
        wait_for("the launch records to converge", lambda: leftovers(core)[1:] == ([], []), 180,
                 logs[1])
        # the watch has seen every gpufleet Node there is, so the counts below are of all of them
        wait_for("the watch to see every gpufleet Node",
                 lambda: set(leftovers(core)[0]) <= set(nodes.added), 60, logs[1])
        tokens = list(nodes.added.values())  # every Node ever added, up to the converged state
        assert nodes.adds == len(tokens) == len(set(tokens))  # no instance launched twice
        assert len(tokens) <= 6  # six 1-GPU Jobs never need more than six nodes
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
        nodes.stop.set()
        core.delete_namespace(ns)
        watcher.join(timeout=5)
