"""End to end with the real thing: Debian's ``prometheus`` scrapes our exporter on 127.0.0.1 and
every PromQL expression of dashboards/gpufleet.json (panels and template variables) must return
data through Prometheus's HTTP API; ``promtool check metrics`` lints the exposition.

Two exporters are exercised: ``serve_sim`` in-process driving a scripted fleet (always runs), and
``gpufleet exporter --source sim`` as a real subprocess running the simulator's default scenario
(skipped with a reason while ``gpufleet.sim.runner`` is not part of the build).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpufleet.metrics.exporter import serve_sim
from gpufleet.metrics.snapshot import FleetSnapshot

from .conftest import fleet_snapshot, queue_views

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "dashboards" / "gpufleet.json"
GPUFLEET = [sys.executable, "-c", "from gpufleet.cli import main; main()"]
# Grafana's built-ins, as Grafana would expand them for a 1 s scrape interval
BUILTINS = {"$__rate_interval": "1m", "$__interval": "1s", "$__range": "5m"}
DEADLINE_S = 40.0

pytestmark = pytest.mark.timeout(120)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_get(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return bytes(resp.read())


def binary(name: str) -> str:
    debian = Path("/usr/bin") / name
    found = shutil.which(name) or (str(debian) if debian.exists() else None)
    if found is None:
        pytest.skip(f"`{name}` not found: install Debian's prometheus (make system-deps)")
    return found


# ------------------------------------------------------------------ the dashboard's queries


def dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def panels(dash: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dash["panels"]:
        yield panel
        yield from panel.get("panels", [])


def substitute(expr: str, dash: dict[str, Any]) -> str:
    """Expand template variables the way Grafana does with "All" selected (the allValue regex)."""
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            for form in ("${" + var["name"] + "}", "$" + var["name"]):
                expr = expr.replace(form, var["allValue"])
    for name, value in BUILTINS.items():
        expr = expr.replace(name, value)
    assert "$" not in expr, f"unexpanded variable in {expr!r}"
    return expr


def panel_queries() -> list[tuple[str, str]]:
    dash = dashboard()
    return [
        (f"{p['title']} [{t['refId']}]", substitute(t["expr"], dash))
        for p in panels(dash)
        for t in p.get("targets", [])
    ]


def variable_queries() -> list[tuple[str, str, str]]:
    """(variable, series selector, label) for every ``label_values(selector, label)`` variable."""
    dash = dashboard()
    out = []
    for var in dash["templating"]["list"]:
        if var["type"] != "query":
            continue
        q = var["query"]["query"]
        assert q.startswith("label_values(") and q.endswith(")"), q
        selector, label = q[len("label_values(") : -1].rsplit(",", 1)
        out.append((var["name"], substitute(selector.strip(), dash), label.strip()))
    return out


# ------------------------------------------------------------------ Prometheus


class Prometheus:
    """A throwaway Prometheus on 127.0.0.1 scraping one target every second."""

    def __init__(self, target_port: int, workdir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cfg = workdir / "prometheus.yml"
        cfg.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: gpufleet\n    static_configs:\n"
            f"      - targets: ['127.0.0.1:{target_port}']\n"
        )
        self.log = workdir / "prometheus.log"
        self._log_file = self.log.open("wb")
        self.proc = subprocess.Popen(
            [
                binary("prometheus"),
                f"--config.file={cfg}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
        )

    def api(self, path: str, **params: str) -> Any:
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        body = json.loads(http_get(url))
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", (expr, data)
        return list(data["result"])

    def wait_ready(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"prometheus exited: {self.log.read_text()[-2000:]}")
            try:
                http_get(f"{self.url}/-/ready", timeout=1.0)
                return
            except OSError:
                time.sleep(0.2)
        raise AssertionError(f"prometheus not ready in time: {self.log.read_text()[-2000:]}")

    def wait_scraped(
        self,
        deadline: float,
        scrapes: int = 4,
        exporter: subprocess.Popen[bytes] | None = None,
        exporter_log: Path | None = None,
    ) -> None:
        """Until the target is up and has been scraped ``scrapes`` times (rate() needs >= 2)."""
        last: Any = None
        while time.monotonic() < deadline:
            if exporter is not None and exporter.poll() is not None:
                log = exporter_log.read_text()[-3000:] if exporter_log else ""
                raise AssertionError(f"exporter exited with {exporter.returncode}:\n{log}")
            targets = self.api("targets")["activeTargets"]
            last = targets
            if targets and targets[0]["health"] == "up":
                got = self.query("count_over_time(up[1m])")
                if got and float(got[0]["value"][1]) >= scrapes:
                    return
            time.sleep(0.5)
        raise AssertionError(f"target never came up / scraped: {last}")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log_file.close()


# ------------------------------------------------------------------ exporters under test


class ScriptedFleet:
    """A stand-in simulation whose fleet changes every step: interruptions, recoveries, cost."""

    def __init__(self) -> None:
        self.now = 0.0
        self._last = 0.0

    def run_until(self, t_s: float) -> bool:
        self._last, self.now = self.now, t_s
        return True

    def snapshot(self) -> FleetSnapshot:
        base = fleet_snapshot(time_s=self.now, recoveries=(90.0 + self.now % 600, 400.0))
        hours = self.now / 3600
        return dataclasses.replace(
            base,
            spot_interruptions_total=int(self.now // 300),
            cost_usd_total_by_tenant={"alice": 36.0 * hours, "bob": 7.2 * hours},
        )


QUEUE_FAMILIES = "gpufleet_queue_"  # the team-queue row: the live controller's (k8s.queues)


def queries_without_data(prom: Prometheus, queues: bool = False) -> list[str]:
    """The dashboard's queries (``queues``: only the team-queue row's, else all others) that
    return no data."""
    missing = []
    for title, expr in panel_queries():
        if (QUEUE_FAMILIES in expr) != queues:
            continue
        values = [float(r["value"][1]) for r in prom.query(expr)]
        if not any(math.isfinite(v) for v in values):
            missing.append(f"{title}: {expr} -> {values}")
    for name, selector, label in variable_queries():
        if (QUEUE_FAMILIES in selector) != queues:
            continue
        series = prom.api("series", **{"match[]": selector})
        if not {s.get(label) for s in series} - {None}:
            missing.append(f"variable {name}: no {label} on {selector}")
    return missing


def _check_against(prom: Prometheus, exporter_port: int, deadline: float,
                   queues: bool = False) -> None:
    """The shared assertions: every dashboard query has data; promtool accepts the exposition.

    Some panels only have data once the event they show happened inside their window (a spot
    recovery for the windowed recovery-time quantiles), so poll until all have data or time is up.
    """
    missing = queries_without_data(prom, queues)
    while missing and time.monotonic() < deadline:
        time.sleep(1.0)
        missing = queries_without_data(prom, queues)
    assert not missing, "dashboard queries without data:\n" + "\n".join(missing)

    exposition = http_get(f"http://127.0.0.1:{exporter_port}/metrics")
    lint = promtool_check(exposition)
    assert lint.returncode in (0, 3), lint.stdout + lint.stderr  # 1 would be a parse error
    for line in (lint.stdout + lint.stderr).splitlines():
        # dcgm-exporter's own label `modelName` is camelCase; we keep it for compatibility.
        assert (
            line.startswith("DCGM_FI_") and "label names should be written in 'snake_case'" in line
        ), line
    own = promtool_check(only_families(exposition, "gpufleet_"))
    assert own.returncode == 0, own.stdout + own.stderr


def only_families(exposition: bytes, prefix: str) -> bytes:
    """The part of an exposition belonging to metric families whose name starts with prefix."""
    keep, out = False, []
    for line in exposition.decode().splitlines(keepends=True):
        if line.startswith("# HELP "):
            keep = line.split()[2].startswith(prefix)
        if keep:
            out.append(line)
    assert out, f"no {prefix}* families in the exposition"
    return "".join(out).encode()


def promtool_check(exposition: bytes) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [binary("promtool"), "check", "metrics"],
        input=exposition.decode(),
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_dashboard_against_prometheus_in_process_exporter(tmp_path: Path) -> None:
    """serve_sim + run_paced + FleetMetrics behind a real HTTP server, scraped by Prometheus."""
    binary("prometheus")
    deadline = time.monotonic() + DEADLINE_S
    port = free_port()
    stop = threading.Event()
    ready = threading.Event()
    thread = threading.Thread(
        target=serve_sim,
        args=("127.0.0.1", port, stop, lambda line: ready.set()),
        kwargs={"speed": 600.0, "interval_s": 0.25, "seed": 0, "sim": ScriptedFleet()},
        daemon=True,
    )
    thread.start()
    assert ready.wait(10), "exporter did not start"
    prom = Prometheus(port, tmp_path)
    try:
        prom.wait_ready(deadline)
        prom.wait_scraped(deadline)
        _check_against(prom, port, deadline)
    finally:
        prom.stop()
        stop.set()
        thread.join(10)
    assert not thread.is_alive()


def test_queue_row_against_prometheus_live_controller_metrics(tmp_path: Path) -> None:
    """The team-queue row against the live controller's own /metrics (its registry with the
    queue collector, ``k8s.queues.metrics``), scraped by Prometheus: the simulator's exporter
    has no GpuQueues."""
    from gpufleet.k8s.queues.metrics import QueueCollector
    from gpufleet.k8s.schedule.telemetry import ControllerMetrics, serve

    binary("prometheus")
    deadline = time.monotonic() + DEADLINE_S
    metrics = ControllerMetrics()
    metrics.registry.register(QueueCollector(queue_views, lambda: True))
    server = serve(metrics.registry, "127.0.0.1", 0, lambda: True, lambda: True)
    port = server.server_address[1]
    prom = Prometheus(port, tmp_path)
    try:
        prom.wait_ready(deadline)
        prom.wait_scraped(deadline)
        _check_against(prom, port, deadline, queues=True)
    finally:
        prom.stop()
        server.shutdown()
        server.server_close()


@pytest.mark.slow
def test_dashboard_against_prometheus_exporter_subprocess(tmp_path: Path) -> None:
    """`gpufleet exporter --source sim` as a real process running the default simulation."""
    binary("prometheus")
    if importlib.util.find_spec("gpufleet.sim.runner") is None:
        pytest.skip("gpufleet.sim.runner (the simulator) is not part of this build yet")
    deadline = time.monotonic() + DEADLINE_S
    port = free_port()
    log = (tmp_path / "exporter.log").open("w")
    exporter = subprocess.Popen(
        [
            *GPUFLEET,
            "exporter",
            "--source",
            "sim",
            "--port",
            str(port),
            "--speed",
            "14400",
            "--interval",
            "0.25",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=REPO,
    )
    prom = Prometheus(port, tmp_path)
    try:
        prom.wait_ready(deadline)
        prom.wait_scraped(deadline, exporter=exporter, exporter_log=tmp_path / "exporter.log")
        _check_against(prom, port, deadline)
    finally:
        prom.stop()
        exporter.send_signal(signal.SIGTERM)
        try:
            rc = exporter.wait(timeout=15)
        finally:
            if exporter.poll() is None:
                exporter.kill()
            log.close()
    assert rc == 0, (tmp_path / "exporter.log").read_text()
