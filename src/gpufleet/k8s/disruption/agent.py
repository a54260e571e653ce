"""``gpufleet agent``: the node agent that turns a metadata-service notice into a Node mark.

One per node (a DaemonSet, ``deploy/kubernetes/40-agent.yaml``). It polls the cloud's metadata
service with the checkpoint library's watchers (AWS IMDSv2, Aliyun, GCP) and, on a notice, marks
its own Node (:func:`gpufleet.k8s.disruption.interruption.mark_node`: annotation + taint, once). It
does not
drain: the controller does that for every marked Node, whoever marked it, so the agent needs only
get/patch on its own Node and the SQS path and this one never drain twice.

A rebalance recommendation is advice, not a reclaim: by default the agent only logs it
(``--mark-rebalance`` marks on it too, draining early). If the API server cannot be reached when
a notice arrives the agent keeps retrying until it has written the mark or the pod is stopped —
the notice is the one thing it must not lose.

It never exits for want of its cloud: a Node without a providerID yet (the cloud controller
manager sets it after the kubelet registers), an API server it cannot reach, or a metadata service
that does not answer (off-cloud, or a hop limit too low) are states it waits out, retrying with a
bounded backoff and logging each change of state once. Meanwhile ``/readyz`` answers 503 and
``gpufleet_agent_metadata_reachable`` is 0, so a DaemonSet pod that cannot watch shows as not
ready instead of crash-looping.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from prometheus_client import CollectorRegistry, Gauge
from rich.console import Console

from gpufleet.checkpoint.notices import (
    DEFAULT_POLL_S,
    PROVIDERS,
    Notice,
    NoticePoller,
    Watcher,
    check_metadata_url,
    check_poll_interval,
    make_watcher,
)
from gpufleet.cli_app import app, friendly_errors
from gpufleet.errors import InputError
from gpufleet.k8s.disruption.interruption import mark_from_notice, mark_node, read_node
from gpufleet.k8s.schedule.apply import ApiErrors
from gpufleet.k8s.schedule.telemetry import serve

log = logging.getLogger(__name__)
console = Console(stderr=True)

# spec.providerID prefix → the metadata service that node's cloud runs
PROVIDER_ID_PREFIXES = {"aws://": "aws", "alicloud://": "aliyun", "gce://": "gcp"}
# Waiting for the Node's providerID (or for the API server): 1, 2, 4 … seconds, at most this.
MAX_BACKOFF_S = 60.0


def provider_of(provider_id: str | None) -> str | None:
    """The notice provider for a Node's ``spec.providerID`` (None: not a cloud we watch)."""
    for prefix, name in PROVIDER_ID_PREFIXES.items():
        if (provider_id or "").startswith(prefix):
            return name
    return None


def backoff_s(attempt: int, cap_s: float = MAX_BACKOFF_S) -> float:
    """Seconds before retry ``attempt`` (0-based): doubling from 1 s, never above ``cap_s``."""
    return float(min(cap_s, 2.0 ** min(attempt, 16)))


class StateLog:
    """Logs a state only when it differs from the previous one: a node that waits an hour for
    its providerID logs one line, not one a minute."""

    def __init__(self) -> None:
        self.state: str | None = None

    def __call__(self, state: str) -> None:
        if state != self.state:
            self.state = state
            log.warning("%s", state)


def wait_for_provider(core: Any, node_name: str, stop: threading.Event,
                      cap_s: float = MAX_BACKOFF_S) -> str | None:
    """The notice provider named by the Node's ``spec.providerID``, read again with a bounded
    backoff while the Node cannot be read or has no cloud providerID yet; None once stopped."""
    say = StateLog()
    attempt = 0
    while not stop.is_set():
        try:
            node = read_node(core, node_name)
        except ApiErrors as exc:
            status = exc.status if isinstance(exc, ApiException) else type(exc).__name__
            say(f"cannot read Node {node_name!r} to find its cloud ({status}); retrying")
        else:
            provider = provider_of((node.get("spec") or {}).get("providerID"))
            if provider is not None:
                if say.state is not None:
                    log.warning("Node %s: provider %s", node_name, provider)
                return provider
            say(f"Node {node_name!r} has no providerID of a cloud with notices "
                f"({', '.join(PROVIDER_ID_PREFIXES)}) yet; waiting (--provider skips this)")
        stop.wait(backoff_s(attempt, cap_s))
        attempt += 1
    return None


class AgentProbes:
    """The agent's ``/healthz`` (the process serves), ``/readyz`` (notices are being read) and
    ``/metrics`` (``gpufleet_agent_metadata_reachable``)."""

    def __init__(self) -> None:
        self.poller: NoticePoller | None = None  # set once the provider is known
        self.registry = CollectorRegistry()
        Gauge("gpufleet_agent_metadata_reachable",
              "1 while the last poll read the cloud's metadata service (0 while the provider "
              "is unknown or the service does not answer)",
              registry=self.registry).set_function(lambda: 1.0 if self.ready() else 0.0)

    def healthy(self) -> bool:
        return self.poller is None or self.poller.alive

    def ready(self) -> bool:
        return self.poller is not None and self.poller.reading


class NodeAgent:
    """Polls ``watcher``; marks ``node_name`` on the first notice that stops the instance."""

    def __init__(self, core: Any, node_name: str, watcher: Watcher, *,
                 interval_s: float = DEFAULT_POLL_S, mark_rebalance: bool = False,
                 retry_s: float = 2.0) -> None:
        self.core = core
        self.node_name = node_name
        self.watcher = watcher
        self.interval_s = interval_s
        self.mark_rebalance = mark_rebalance
        self.retry_s = retry_s
        self.marked: bool | None = None  # True: we marked it; False: someone else had
        self._notices: queue.Queue[Notice] = queue.Queue()

    def run(self, stop: threading.Event, probes: AgentProbes | None = None) -> None:
        poller = NoticePoller(self.watcher, self._notices.put, self.interval_s,
                              on_problem=lambda m: log.warning("%s", m)).start()
        if probes is not None:
            probes.poller = poller
        try:
            while not stop.is_set():
                try:
                    notice = self._notices.get(timeout=0.2)
                except queue.Empty:
                    continue
                self._handle(notice, stop)
        finally:
            poller.stop()

    def _handle(self, notice: Notice, stop: threading.Event) -> None:
        log.warning("%s notice on %s: %s (deadline %s)", notice.provider, self.node_name,
                    notice.kind, notice.deadline)
        if not notice.stops and not self.mark_rebalance:
            log.info("rebalance recommendation: not marking (see --mark-rebalance)")
            return
        mark = mark_from_notice(notice)
        while not stop.is_set():
            try:
                self.marked = mark_node(self.core, self.node_name, mark)
            except ApiErrors as exc:
                log.warning("cannot mark node %s yet (%s); retrying", self.node_name, exc)
                stop.wait(self.retry_s)
                continue
            if not self.marked:
                log.info("node %s was already marked: the drain is under way", self.node_name)
            return


@app.command("agent")
@friendly_errors
def agent(
    node_name: Annotated[str | None, typer.Option(
        envvar="NODE_NAME", help="This node's name (the DaemonSet passes spec.nodeName).")] = None,
    provider: Annotated[str | None, typer.Option(
        help=f"Metadata service to watch: {', '.join(PROVIDERS)} (default: from the Node's "
             "spec.providerID).")] = None,
    metadata_url: Annotated[str | None, typer.Option(
        help="Base URL of the metadata service (default: the provider's link-local one).")] = None,
    poll: Annotated[float, typer.Option(help="Seconds between polls.")] = DEFAULT_POLL_S,
    mark_rebalance: Annotated[bool, typer.Option(
        help="Also mark (and so drain) on an AWS rebalance recommendation.")] = False,
    kubeconfig: Annotated[Path | None, typer.Option(
        help="Kubeconfig file (default: in-cluster service account, else $KUBECONFIG).")] = None,
    log_level: Annotated[str, typer.Option(help="DEBUG, INFO, WARNING.")] = "INFO",
    bind_address: Annotated[str, typer.Option(help="Address of /healthz, /readyz, /metrics.")]
    = "0.0.0.0",
    port: Annotated[int, typer.Option(
        help="Port of /healthz, /readyz (503 until notices are read) and /metrics; 0: none.")]
    = 0,
) -> None:
    """Watch this node's cloud metadata for spot/preemption notices; mark the Node on one."""
    from gpufleet.k8s.cli import api_client

    logging.basicConfig(level=log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not node_name:
        raise InputError("no node name: pass --node-name or set NODE_NAME (the DaemonSet sets "
                         "it from spec.nodeName)", field="node-name")
    check_poll_interval(poll, field="poll")
    if provider is not None:
        make_watcher(provider, metadata_url)  # an unknown provider is bad input: say so now
    if metadata_url is not None:
        check_metadata_url(metadata_url)
    if not 0 <= port <= 65535:
        raise InputError(f"port {port} out of range 0-65535", field="port")
    core = client.CoreV1Api(api_client(kubeconfig))
    stop = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    probes = AgentProbes()
    if port:
        serve(probes.registry, bind_address, port, probes.healthy, probes.ready)
    console.print(f"gpufleet agent on {node_name} (pid {os.getpid()})"
                  + (f", probes on {bind_address}:{port}" if port else ""),
                  highlight=False, soft_wrap=True)
    if provider is None:
        provider = wait_for_provider(core, node_name, stop)
        if provider is None:
            return
    watcher = make_watcher(provider, metadata_url)
    console.print(f"gpufleet agent on {node_name}: watching {watcher.provider} notices every "
                  f"{poll:g} s", highlight=False, soft_wrap=True)
    NodeAgent(core, node_name, watcher, interval_s=poll,
              mark_rebalance=mark_rebalance).run(stop, probes)
