"""The exporter processes: real HTTP servers on 127.0.0.1, clear errors for bad options."""

from __future__ import annotations

import socket
import subprocess
import threading
import urllib.request

import pytest

from gpufleet.errors import InputError
from gpufleet.metrics.exporter import serve_nvml, serve_sim, start_server

from .test_nvml import GPUFLEET, FakeNvml, a100_with_mig, h100
from .test_prometheus import ScriptedFleet, free_port


def _get(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


def test_nvml_exporter_serves_dcgm_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeNvml([a100_with_mig(), h100()]).install(monkeypatch)
    port, stop, ready = free_port(), threading.Event(), threading.Event()
    lines: list[str] = []

    def on_ready(line: str) -> None:
        lines.append(line)
        ready.set()

    thread = threading.Thread(target=serve_nvml, args=("127.0.0.1", port, stop, on_ready))
    thread.start()
    try:
        assert ready.wait(10)
        text = _get(port)
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()
    assert lines == [f"exporting 4 GPU series from NVML on http://127.0.0.1:{port}/metrics"]
    assert "# TYPE DCGM_FI_DEV_GPU_UTIL gauge" in text
    assert 'GPU_I_PROFILE="1g.5gb"' in text and 'device="nvidia1"' in text
    assert "gpufleet_" not in text  # NVML source: GPU metrics only
    with pytest.raises(OSError):  # the port was released on stop
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1)


def test_busy_port_is_an_input_error() -> None:
    from prometheus_client.registry import CollectorRegistry

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(InputError, match=rf"127.0.0.1:{port} is already in use") as exc:
            start_server(CollectorRegistry(), "127.0.0.1", port)
    assert exc.value.field == "port"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"speed": 0.0, "interval_s": 1.0}, "speed"),
        ({"speed": 60.0, "interval_s": -1.0}, "interval"),
    ],
)
def test_sim_exporter_rejects_bad_pacing(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(InputError) as exc:
        serve_sim(
            "127.0.0.1",
            free_port(),
            threading.Event(),
            print,
            seed=0,
            sim=ScriptedFleet(),
            **kwargs,
        )
    assert exc.value.field == field


def test_cli_bad_port_is_one_line_exit_2() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        proc = subprocess.run(
            [*GPUFLEET, "exporter", "--source", "sim", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"error: field 'port': 127.0.0.1:{port} is already in use; pick another --port"
    ]
