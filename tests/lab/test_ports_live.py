"""The lab's ports on a shared machine: a port another process takes between the lab choosing it
and the component binding it costs a restart on another port, not the lab; and several labs
start side by side, each on ports of its own.

What each component does (``gpufleet.lab.cluster``): kine serves on a Unix socket; KWOK and the
gpufleet controller bind port 0 and the lab reads back the port; the API server, the
controller-manager, the scheduler and the real node's kubelet are told free ports and started
again on others when they say one is in use; the chart's pods on the real node get free host ports
and the release is upgraded to another when a pod says its own is in use.
"""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from live_skip import need_real_node_and_image
from live_wait import wait_for

from gpufleet.lab import processes, release
from gpufleet.lab.cluster import LabInfo, LabOptions, down, load_info, up
from gpufleet.lab.processes import Running, listening_ports, read_pidfile
from gpufleet.lab.real_node import NODE_NAME
from gpufleet.lab.session import LabSession

pytestmark = pytest.mark.live

RETRIED = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
OWN_PORT = ("kwok", "gpufleet-controller")
# How many labs start at once: eight, each the cheapest lab that still binds every component's
# port (no nodes, no DRA inventory; the kube-scheduler and the gpufleet controller on).
LABS = 8


def components(d: Path) -> dict[str, Running]:
    found = (read_pidfile(p, d / "logs") for p in sorted((d / "run").glob("*.pid")))
    return {r.name: r for r in found if r is not None}


def readyz(info: LabInfo) -> bool:
    pki = info.directory / "pki"
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    with urllib.request.urlopen(f"{info.server}/readyz", context=ctx, timeout=10) as resp:
        return bool(resp.status == 200)


def assert_own_ports(d: Path) -> set[int]:
    """Every component runs and listens on ports of its own (kine on none: its socket); the
    ports, all of them."""
    running = components(d)
    assert set(running) == {"kine", *RETRIED, *OWN_PORT}, sorted(running)
    ports: set[int] = set()
    for name, r in running.items():
        assert r.alive(), f"{name} is not running:\n{processes.log_tail(r.log)}"
        mine = listening_ports(r.pid)
        assert (mine == set()) if name == "kine" else (len(mine) == 1), (name, mine)
        ports |= mine
    assert (d / "kine" / "kine.sock").is_socket()
    return ports


@pytest.fixture
def held() -> Iterator[list[socket.socket]]:
    """Ports other processes took first: bound and listening (a probe connecting to one gets
    through, as it would to another lab's component)."""
    socks: list[socket.socket] = []
    yield socks
    for s in socks:
        s.close()


def test_a_port_taken_before_the_component_binds_it_is_retried_and_the_lab_comes_up(
        lab_binaries: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        held: list[socket.socket]) -> None:
    """The first port the lab picks for each component that must be told one is already
    listening elsewhere when the component starts; each says ``address already in use``, is
    started again on another port, and the lab comes up whole."""
    real = processes.free_port
    picks: list[int] = []

    def pick() -> int:
        # every other pick is taken by "another process" just after the lab chose it
        if len(picks) % 2 == 0 and len(held) < len(RETRIED):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            s.listen()
            held.append(s)
            picks.append(s.getsockname()[1])
        else:
            picks.append(real())
        return picks[-1]

    monkeypatch.setattr(processes, "free_port", pick)
    notes: list[str] = []
    d = tmp_path / "lab"
    info = up(LabOptions(directory=d, nodes=[], kube_scheduler=True, dra=False), log=notes.append)
    running = components(d)
    try:
        taken = [s.getsockname()[1] for s in held]
        assert len(taken) == len(RETRIED) and len(picks) == 2 * len(RETRIED)
        for name, port in zip(RETRIED, taken, strict=True):
            assert f"{name}: port {port} was taken by another process; starting it again on " \
                   "another port (2 of 5)" in notes
            log = (d / "logs" / f"{name}.log").read_text()
            assert f"127.0.0.1:{port}: bind: address already in use" in log
            assert log.count("\n==> ") == 2  # two starts in its log: the failed one, this one
        ports = assert_own_ports(d)
        assert not ports & set(taken)
        assert readyz(info)
        assert info.components == ("kine", *RETRIED, *OWN_PORT)
        assert load_info(d) == info
    finally:
        down(d)
    assert running and not any(r.alive() for r in running.values())


def test_a_real_node_whose_ports_are_taken_still_comes_up(
        lab_binaries: Path, tmp_path_factory: pytest.TempPathFactory,
        monkeypatch: pytest.MonkeyPatch, held: list[socket.socket]) -> None:
    """``--real-node``: the kubelet's healthz port is taken before it binds it (the kubelet keeps
    running and retrying that server, so the lab reads its log, stops it and starts it on other
    ports), and so is the agent pod's host port (the pod says so in its log on the node, and the
    release is upgraded to another port for the agent alone)."""
    need_real_node_and_image()
    prebuilt = os.environ.get("GPUFLEET_IMAGE_ARCHIVE")

    def take() -> int:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen()
        held.append(s)
        return int(s.getsockname()[1])

    def first_taken(real: Callable[[int], list[int]], count: int) -> Callable[[int], list[int]]:
        """``free_ports`` whose first answer for ``count`` ports has its last one taken."""
        answered: list[int] = []

        def pick(n: int) -> list[int]:
            if n != count or answered:
                return real(n)
            answered.append(n)
            return [*real(n - 1), take()]

        return pick

    monkeypatch.setattr(processes, "free_ports", first_taken(processes.free_ports, 2))  # kubelet
    monkeypatch.setattr(release, "free_ports", first_taken(release.free_ports, 2))  # the chart
    notes: list[str] = []
    # a short directory: the kubelet's sockets under it must fit a socket path's 107 bytes
    d = tmp_path_factory.mktemp("rn") / "lab"
    try:
        info = up(LabOptions(directory=d, controller=False, real_node=True, device_plugin=True,
                             image=Path(prebuilt) if prebuilt else None), log=notes.append)
        healthz, agent = (s.getsockname()[1] for s in held)
        assert f"kubelet: port {healthz} was taken by another process; starting it again on " \
               "another port (2 of 5)" in notes
        kubelet_log = (d / "logs" / "kubelet.log").read_text()
        assert f"127.0.0.1:{healthz}: bind: address already in use" in kubelet_log
        assert any(n.startswith(f"agent: port {agent} was taken by another process; upgrading "
                                "the release to port ") for n in notes), notes
        lab = LabSession(info)
        assert info.real_node == NODE_NAME and info.controller.startswith("in-cluster")
        kubelet = components(d)["kubelet"]
        assert kubelet.alive() and healthz not in listening_ports(kubelet.pid)
        def agent_pods() -> list[Any]:
            """The agent's pods once there is one, Running (the first one gone)."""
            pods = lab.core.list_namespaced_pod(release.NAMESPACE,
                                                label_selector=release.AGENT_SELECTOR).items
            return pods if len(pods) == 1 and pods[0].status.phase == "Running" else []

        (pod,) = wait_for("the agent's pod on its new port alone, Running", agent_pods, 120)
        port = pod.spec.containers[0].ports[0].container_port
        assert port != agent
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as resp:
            assert resp.status == 200
    finally:
        down(d)


def gpufleet(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpufleet", *args], capture_output=True,
                          text=True, timeout=timeout, check=False)


def test_eight_labs_start_at_once_each_on_ports_of_its_own(lab_binaries: Path,
                                                            tmp_path: Path) -> None:
    """``gpufleet lab up`` eight times at once, as eight jobs on one machine would: every lab
    comes up, every component listens on its own port, no two labs share one."""
    dirs = [tmp_path / f"lab{i}" for i in range(LABS)]
    running: list[Running] = []
    t0 = time.monotonic()
    try:
        with ThreadPoolExecutor(LABS) as pool:
            ups = list(pool.map(lambda d: gpufleet(
                "lab", "up", "--dir", str(d), "--nodes", "0", "--kube-scheduler", "--classic",
                timeout=540), dirs))
        elapsed = time.monotonic() - t0
        for d, out in zip(dirs, ups, strict=True):
            assert out.returncode == 0, f"{d}:\n{out.stderr[-3000:]}"
        every: list[int] = []
        for d in dirs:
            running += components(d).values()
            info = load_info(d)
            assert info is not None and readyz(info)
            every += sorted(assert_own_ports(d))
        assert len(every) == len(set(every)) == LABS * (len(RETRIED) + len(OWN_PORT))
        print(f"{LABS} labs up at once in {elapsed:.0f} s")
    finally:
        with ThreadPoolExecutor(LABS) as pool:
            downs = list(pool.map(lambda d: gpufleet("lab", "down", "--dir", str(d),
                                                     timeout=120), dirs))
    for out in downs:
        assert out.returncode == 0, out.stderr
    assert running and not any(r.alive() for r in running)
