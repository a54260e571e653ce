"""``gpufleet agent`` for real: a subprocess, the lab's API server, a loopback IMDSv2.

The metadata service is a local HTTP server speaking IMDSv2 (token PUT, then instance-action:
404 until the test "reclaims" the instance). The agent must mark its Node exactly once; the
controller's SQS path marking the same Node afterwards (the same function) must change nothing,
and several sources racing to mark one Node must produce one mark.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from imds import Imds
from live_wait import wait_for

from gpufleet.cloud.provider import Interruption, InterruptionKind
from gpufleet.k8s.disruption.interruption import (
    InterruptionMark,
    mark_interrupted_instance,
    mark_node,
    mark_of,
    read_node,
)
from gpufleet.k8s.translate import names

pytestmark = pytest.mark.live



@pytest.fixture()
def imds() -> Iterator[Imds]:
    server = Imds()
    yield server
    server.close()


@pytest.fixture()
def spot_node(lab: Any) -> Iterator[str]:
    (name,) = lab.add_instance_nodes("g4dn.12xlarge", 1, prefix="agent", capacity_type="spot")
    yield name
    lab.core.delete_node(name)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def agent_cmd(lab: Any, *args: str) -> list[str]:
    return [sys.executable, "-m", "gpufleet", "agent", f"--kubeconfig={lab.kubeconfig}", *args]


def test_the_agent_marks_its_node_once_and_the_sqs_path_does_not_mark_again(
        lab: Any, imds: Imds, spot_node: str) -> None:
    proc = subprocess.Popen(
        agent_cmd(lab, "--node-name", spot_node, "--provider", "aws",
                  "--metadata-url", imds.url, "--poll", "0.05"),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "NO_COLOR": "1"})
    try:
        wait_for("the agent to poll IMDS", lambda: imds.gets >= 3)
        assert mark_of(read_node(lab.core, spot_node)) is None  # no notice, no mark
        deadline = int(time.time()) + 120
        imds.action = {"action": "terminate",
                       "time": datetime.fromtimestamp(deadline, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
        noticed_from = time.time()
        node = wait_for("the Node to be marked",
                        lambda: (n := read_node(lab.core, spot_node)) and mark_of(n) and n)
        mark = mark_of(node)
        assert mark is not None
        assert (mark.kind, mark.deadline, mark.source) == (
            InterruptionKind.SPOT_INTERRUPTION, float(deadline), "agent")
        assert noticed_from - 1 <= mark.noticed_at <= time.time()
        ours = [t for t in node["spec"]["taints"] if t["key"] == names.INTERRUPTED_TAINT_KEY]
        assert ours == [{"key": names.INTERRUPTED_TAINT_KEY, "value": "agent",
                         "effect": "NoSchedule"}]
        version = node["metadata"]["resourceVersion"]

        # The controller learns of the same reclaim from SQS later: already marked, no write.
        sqs = InterruptionMark(InterruptionKind.SPOT_INTERRUPTION, float(deadline), time.time(),
                               "aws-sqs")
        assert mark_node(lab.core, spot_node, sqs) is False
        event = Interruption(spot_node, InterruptionKind.SPOT_INTERRUPTION, float(deadline))
        assert mark_interrupted_instance(lab.core, [node], event, "aws-sqs") == spot_node
        after = read_node(lab.core, spot_node)
        assert after["metadata"]["resourceVersion"] == version
        assert mark_of(after) == mark
        assert proc.poll() is None  # the agent keeps running (its node is draining, not gone)
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0, out
    assert f"gpufleet agent on {spot_node}" in out
    assert f"aws notice on {spot_node}: terminate" in out


def test_sources_racing_to_mark_one_node_write_one_mark(lab: Any, spot_node: str) -> None:
    results: list[bool] = []
    barrier = threading.Barrier(4)

    def race(source: str) -> None:
        barrier.wait()
        mark = InterruptionMark(InterruptionKind.SPOT_INTERRUPTION, None, time.time(), source)
        results.append(mark_node(lab.core, spot_node, mark))

    threads = [threading.Thread(target=race, args=(s,))
               for s in ("agent", "aws-sqs", "aliyun", "kwok")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False, False, False, True]
    node = read_node(lab.core, spot_node)
    assert len([t for t in node["spec"]["taints"]
                if t["key"] == names.INTERRUPTED_TAINT_KEY]) == 1


def test_marking_a_node_that_is_gone_is_not_an_error(lab: Any) -> None:
    mark = InterruptionMark(InterruptionKind.SPOT_INTERRUPTION, None, time.time(), "aws-sqs")
    assert mark_node(lab.core, "no-such-node-4f2a", mark) is False


def test_agent_bad_input_is_one_line_and_exit_2(lab: Any, spot_node: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "NODE_NAME"}
    out = subprocess.run(agent_cmd(lab, "--provider", "aws"), capture_output=True, text=True,
                         env=env, timeout=60)
    assert out.returncode == 2 and "--node-name" in out.stderr and "Traceback" not in out.stderr
    out = subprocess.run(agent_cmd(lab, "--node-name", spot_node, "--provider", "azure"),
                         capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 2 and "aws, aliyun, gcp" in out.stderr


def _probe(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:  # not listening yet
        return 0, ""


def test_agent_waits_unready_for_its_cloud_then_watches(lab: Any, imds: Imds) -> None:
    """A Node without a providerID (on a cloud, one the cloud controller manager has not
    initialised yet): the agent keeps running, /readyz 503 and the metric 0, and it says so once;
    when the providerID appears it watches that cloud's metadata service and turns ready."""
    node = f"agentwait-{uuid.uuid4().hex[:6]}"  # a bare Node: no providerID (KWOK's have kwok://)
    lab.core.create_node({"metadata": {"name": node}})
    port = free_port()
    proc = subprocess.Popen(
        agent_cmd(lab, "--node-name", node, "--metadata-url", imds.url, "--poll", "0.05",
                  "--bind-address", "127.0.0.1", "--port", str(port)),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "NO_COLOR": "1"})
    try:
        wait_for("the agent's /readyz to answer 503",
                 lambda: _probe(port, "/readyz")[0] == 503 or None)
        assert _probe(port, "/healthz")[0] == 200
        assert "gpufleet_agent_metadata_reachable 0.0" in _probe(port, "/metrics")[1]
        time.sleep(4)  # retries at 1, 2, 4 s: still waiting, still running, still one log line
        assert proc.poll() is None
        lab.core.patch_node(node, {"spec": {"providerID": "aws:///us-east-1a/i-0agentwait"}})
        wait_for("the agent to read IMDS and turn ready",
                 lambda: _probe(port, "/readyz")[0] == 200 or None, 90)
        assert imds.gets > 0
        assert "gpufleet_agent_metadata_reachable 1.0" in _probe(port, "/metrics")[1]
        imds.close()  # the metadata service stops answering: not ready again
        wait_for("the agent to turn unready", lambda: _probe(port, "/readyz")[0] == 503 or None)
        assert proc.poll() is None
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=20)
        lab.core.delete_node(node)
    assert proc.returncode == 0, out
    assert out.count("has no providerID") == 1, out
    assert "Traceback" not in out, out
