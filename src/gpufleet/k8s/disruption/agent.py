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
from rich.console import Console

from gpufleet.checkpoint.notices import (
    DEFAULT_POLL_S,
    PROVIDERS,
    Notice,
    NoticePoller,
    Watcher,
    check_poll_interval,
    make_watcher,
)
from gpufleet.cli_app import app, friendly_errors
from gpufleet.errors import InputError
from gpufleet.k8s.disruption.interruption import mark_from_notice, mark_node, read_node
from gpufleet.k8s.schedule.apply import ApiErrors

log = logging.getLogger(__name__)
console = Console(stderr=True)

# spec.providerID prefix → the metadata service that node's cloud runs
PROVIDER_ID_PREFIXES = {"aws://": "aws", "alicloud://": "aliyun", "gce://": "gcp"}


def provider_of(provider_id: str | None) -> str | None:
    """The notice provider for a Node's ``spec.providerID`` (None: not a cloud we watch)."""
    for prefix, name in PROVIDER_ID_PREFIXES.items():
        if (provider_id or "").startswith(prefix):
            return name
    return None


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

    def run(self, stop: threading.Event) -> None:
        poller = NoticePoller(self.watcher, self._notices.put, self.interval_s,
                              on_problem=lambda m: log.warning("%s", m)).start()
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
) -> None:
    """Watch this node's cloud metadata for spot/preemption notices; mark the Node on one."""
    from gpufleet.k8s.cli import api_client

    logging.basicConfig(level=log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not node_name:
        raise InputError("no node name: pass --node-name or set NODE_NAME (the DaemonSet sets "
                         "it from spec.nodeName)", field="node-name")
    check_poll_interval(poll, field="poll")
    core = client.CoreV1Api(api_client(kubeconfig))
    if provider is None:
        try:
            node = read_node(core, node_name)
        except ApiErrors as exc:
            status = exc.status if isinstance(exc, ApiException) else exc
            raise InputError(f"cannot read Node {node_name!r} to find its cloud ({status}); "
                             "pass --provider", field="provider") from None
        provider = provider_of((node.get("spec") or {}).get("providerID"))
        if provider is None:
            raise InputError(f"Node {node_name!r} has no providerID of a cloud with notices "
                             f"({', '.join(PROVIDER_ID_PREFIXES)}); pass --provider",
                             field="provider")
    watcher = make_watcher(provider, metadata_url)
    stop = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    console.print(f"gpufleet agent on {node_name} (pid {os.getpid()}): watching "
                  f"{watcher.provider} notices every {poll:g} s", highlight=False, soft_wrap=True)
    NodeAgent(core, node_name, watcher, interval_s=poll, mark_rebalance=mark_rebalance).run(stop)
