"""The sweep's runs as tasks on a Ray cluster (``gpufleet sweep --ray ADDRESS``).

Each run (``sim.sweep.Run``) is one Ray task of one CPU, ``sim.batch.run_billed`` itself, so
the cluster's scheduler places them and a cell's summary is the one a local run gives, to the
bit (``sim.sweep``). A group's jobs go into Ray's object store once per workload and seed (a
trace once, whatever the seeds), and every task of the group takes the same reference.

Ray is an optional dependency (``pip install 'gpufleet[ray]'``), imported here only: the CLI
imports this module when ``--ray`` is given. The cluster's workers run the tasks with their
own Python: they need the same gpufleet installed (and the same numpy), as any Ray job does.

An address nobody answers makes ``ray.init`` retry for minutes; the address is therefore
tried with a plain TCP connection first (``CONNECT_TIMEOUT_S``), so a typo is one line naming
``--ray`` at once.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable, Sequence
from typing import Any

from gpufleet.errors import InputError
from gpufleet.sim.batch import Outcome, run_billed
from gpufleet.sim.sweep import Executor, Group, Run

CONNECT_TIMEOUT_S = 5.0
INSTALL = "pip install 'gpufleet[ray]'"


def require_ray() -> Any:
    """The ``ray`` module, or an error naming ``--ray`` that says how to install it."""
    try:
        import ray
    except ImportError:
        raise InputError(f"Ray is not installed; install it with: {INSTALL}",
                         field="--ray") from None
    return ray


def host_port(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of ``HOST:PORT`` or ``ray://HOST:PORT``; None for ``auto`` (the
    cluster this machine runs, which Ray finds itself)."""
    if address == "auto":
        return None
    rest = address.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    host = host.strip("[]")  # [::1]:6379
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InputError(f"expected HOST:PORT, ray://HOST:PORT or auto, got {address!r}",
                         field="--ray")
    return host, int(port)


def check_reachable(address: str) -> None:
    """A TCP connection to ``address`` within ``CONNECT_TIMEOUT_S``, or an error naming
    ``--ray`` (module docstring)."""
    hp = host_port(address)
    if hp is None:
        return
    try:
        with socket.create_connection(hp, timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        why = exc.strerror or str(exc) or type(exc).__name__
        raise InputError(f"cannot reach a Ray cluster at {address}: {why}",
                         field="--ray") from None


def connect(address: str) -> Any:
    """The ``ray`` module, connected to the cluster at ``address``."""
    ray = require_ray()
    check_reachable(address)
    try:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise InputError(f"cannot connect to the Ray cluster at {address}: {first}",
                         field="--ray") from None
    return ray


def run_ray(address: str) -> Executor:
    """Runs as tasks on the Ray cluster at ``address`` (module docstring); connects when the
    grid starts and disconnects when it ends (the cluster stays up)."""

    def execute(groups: Sequence[Group], runs: Sequence[Run],
                on_done: Callable[[int], None]) -> list[list[Outcome]]:
        ray = connect(address)
        try:
            task = ray.remote(num_cpus=1)(run_billed)
            stored: dict[int, Any] = {}  # id of a group's jobs list → its object reference
            pending: dict[Any, int] = {}
            for i, r in enumerate(runs):
                jobs = groups[r.group].jobs
                ref = stored.get(id(jobs))
                if ref is None:
                    ref = stored[id(jobs)] = ray.put(jobs)
                pending[task.remote(r.scenario, r.rebills, r.seed, ref)] = i
            got: list[list[Outcome]] = [[] for _ in runs]
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    i = pending.pop(ref)
                    got[i] = ray.get(ref)
                    on_done(i)
            return got
        finally:
            ray.shutdown()

    return execute
