"""Fuzz every command's option values through the real CLI: only exit 0 or 2, never a traceback,
never an uncaught exception, never a hang.

Values mix finite, huge, negative, nan/inf and random text; URLs, ports and paths are random too.
Each example is kept cheap: tiny input files, and every option set that would start long work
(a simulation, a server) is routed into a check that ends it early on purpose (a busy port, an
output folder below a file), after all option values were parsed and validated. About 30 s total.
"""

from __future__ import annotations

import json
import signal
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gpufleet.cli import _register, app

_register()
runner = CliRunner()

FUZZ = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

SPECIAL = st.sampled_from(
    ["nan", "NaN", "inf", "-inf", "+inf", "1e400", "-1e400", "1e-320", "-0", "0", "1e308",
     "0x10", "1_000", " 5", "", "--", "-"]
)
NUMBER_TEXT = st.one_of(
    SPECIAL,
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-(2**70), 2**70).map(str),
    st.integers(-5, 100).map(str),
    st.text(max_size=6),
)
INT_TEXT = st.one_of(
    st.integers(-(2**70), 2**70).map(str), st.integers(-3, 70000).map(str), SPECIAL,
    st.text(max_size=5),
)


# The CLI's own parser for an int option, asked directly: typer's int parsing has changed
# between releases (click's int() up to 0.2x; pydantic's lax int since, which reads "+0.0" as 0),
# so no local re-implementation can be trusted to agree with it.
_probe = typer.Typer()


@_probe.command()
def _port(port: int = typer.Option(...)) -> None:
    print(f"port={port}")


def _binds(text: str, lowest: int) -> bool:
    """Whether the CLI would read ``text`` as a usable port. Asked of the same parser the real
    commands use: a digits-only test let "1_0" (port 10) and " +80" through, an int() test let
    "+0.0" through (typer reads it as port 0: any free port), and a run then served on that port
    until the test timed out."""
    res = runner.invoke(_probe, ["--port", text])
    if res.exit_code != 0 or not res.output.startswith("port="):
        return False
    return lowest <= int(res.output.strip().removeprefix("port=")) <= 65535


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("fuzz-cli")
    (d / "jobs.yaml").write_text(
        "jobs:\n"
        "  - {job_id: a, submit_s: 0, duration_s: 600, num_gpu: 1, gpu_milli: 1000, "
        "gpu_models: V100-16GB}\n"
    )
    (d / "sc.yaml").write_text("scenarios:\n  - name: gpufleet\n    deadline_policy: null\n")
    (d / "nodes.csv").write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,8000,1000,2,T4\n"
                                 "n2,8000,1000,8,V100M16\n")
    (d / "pods.csv").write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
                                "p1,1,1,1,500,\np2,1,1,1,1000,\np3,1,1,2,1000,\n")
    data = [1, 1, 0, 1, 0, 0, 1, 1, 1, 0] * 10  # 100 one-hour ticks: one 80 h window
    (d / "avail.json").write_text(json.dumps({"metadata": {"gap_seconds": 3600}, "data": data}))
    (d / "blocker").write_text("a file, so nothing can be written below it")
    return d


@pytest.fixture(scope="module")
def busy_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


@pytest.fixture(autouse=True)
def keep_signal_handlers() -> Iterator[None]:
    """exporter and run install SIGTERM/SIGINT handlers in-process; put pytest's back."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def path_text(base: Path) -> st.SearchStrategy[str]:
    return st.one_of(
        # always below `base`: no leading "/" (it would restart at the root) and no ".."
        st.text(alphabet="ab./-_~ \t", min_size=1, max_size=12).map(
            lambda t: f"{base}/{t.replace('..', '._')}"
        ),
        st.sampled_from([str(base / "blocker" / "x"), str(base / "blocker"), str(base),
                         "/proc/nope/x", str(base / "new" / "deeper" / "r.json")]),
    )


def check(args: list[str]) -> None:
    res = runner.invoke(app, args)
    shown = f"{args!r}\n{res.output}"
    assert res.exit_code in (0, 2), shown
    assert res.exception is None or isinstance(res.exception, SystemExit), (
        f"{shown}\n{res.exception!r}"
    )
    assert "Traceback" not in res.output, shown
    if res.exit_code == 2:
        assert res.output.strip(), shown  # an exit 2 always says why


@settings(FUZZ, max_examples=20)
@given(data=st.data())
def test_simulate_options(files: Path, busy_port: int, data: st.DataObject) -> None:
    args = ["simulate", "--trace", str(files / "jobs.yaml"), "--scenario", str(files / "sc.yaml")]
    for opt, strategy in (("--seed", INT_TEXT), ("--speed", NUMBER_TEXT)):
        if data.draw(st.booleans()):
            args += [opt, data.draw(strategy)]
    # never a real run: a busy port, or an output folder below a file (both checked first)
    port = data.draw(st.one_of(st.just(str(busy_port)), INT_TEXT.filter(
        lambda t: not _binds(t, lowest=1))))
    if data.draw(st.booleans()):
        args += ["--serve-metrics", port]
    else:
        args += ["--out", str(files / "blocker" / data.draw(st.text(max_size=5)))]
    check(args)


@FUZZ
@given(data=st.data())
def test_exporter_options(busy_port: int, data: st.DataObject) -> None:
    args = ["exporter", "--source", "sim"]
    for opt, strategy in (("--speed", NUMBER_TEXT), ("--interval", NUMBER_TEXT),
                          ("--seed", INT_TEXT)):
        if data.draw(st.booleans()):
            args += [opt, data.draw(strategy)]
    # a usable free port would serve forever: only the busy one or unusable ones
    args += ["--port", data.draw(st.one_of(st.just(str(busy_port)), INT_TEXT.filter(
        lambda t: not _binds(t, lowest=0))))]
    check(args)


@FUZZ
@given(data=st.data())
def test_spot_deadline_options(files: Path, data: st.DataObject) -> None:
    args = ["bench", "spot-deadline", "--trace", str(files / "avail.json")]
    for opt in ("--task-hours", "--deadline-hours", "--overhead-hours"):
        if data.draw(st.booleans()):
            args += [opt, data.draw(NUMBER_TEXT)]
    args += ["--starts", data.draw(st.one_of(st.integers(-3, 40).map(str), INT_TEXT))]
    if data.draw(st.booleans()):
        args += ["--json", data.draw(path_text(files))]
    check(args)


SEEDS_TEXT = st.one_of(
    st.lists(
        st.one_of(
            st.integers(-5, 2**40).map(str),
            st.tuples(st.integers(-5, 3000), st.integers(-5, 2**40)).map(
                lambda t: f"{t[0]}-{t[1]}"
            ),
            st.text(alphabet="0123456789-,e. ", max_size=6),
        ),
        min_size=1, max_size=3,
    ).map(",".join),
    st.just("1-3"),
)


@FUZZ
@given(data=st.data())
def test_packing_options(files: Path, data: st.DataObject) -> None:
    args = ["bench", "packing", "--nodes", str(files / "nodes.csv"), "--pods",
            str(files / "pods.csv"), "-p", data.draw(st.sampled_from(["fgd", "bestfit", "nope"]))]
    seeds = data.draw(SEEDS_TEXT)
    # valid seed lists run for real: keep those short
    args += ["--seeds", seeds if not seeds.replace(",", "").isdigit() else seeds[:4]]
    if data.draw(st.booleans()):
        args += ["--loads", data.draw(st.one_of(
            st.lists(st.integers(-5, 2000), min_size=1, max_size=3).map(
                lambda xs: ",".join(map(str, xs))),
            st.text(max_size=6)))]
    if data.draw(st.booleans()):
        args += ["--limit", data.draw(st.one_of(st.integers(-3, 50).map(str), INT_TEXT))]
    if data.draw(st.booleans()):
        args += ["--json", data.draw(path_text(files))]
    check(args)


URL_TEXT = st.one_of(
    st.builds(
        lambda scheme, host, port, path: f"{scheme}{host}{port}{path}",
        st.sampled_from(["http://", "https://", "ftp://", "", "http:/", "HTTP://"]),
        st.sampled_from(["127.0.0.1", "localhost", "[::1]", "", "[::1", "exa mple", "a\x00b"]),
        st.one_of(st.just(""), st.integers(-5, 200_000).map(lambda p: f":{p}"),
                  st.text(max_size=4).map(lambda t: ":" + t)),
        st.sampled_from(["", "/", "/latest", "?q=1", "#f", "/\t"]),
    ),
    st.text(max_size=20),
)


@FUZZ
@given(data=st.data())
def test_run_options(files: Path, data: st.DataObject) -> None:
    args = ["run"]
    for opt, strategy in (("--poll", NUMBER_TEXT), ("--grace", NUMBER_TEXT),
                          ("--max-restarts", INT_TEXT), ("--notice-url", URL_TEXT),
                          ("--provider", st.sampled_from(["aws", "gcp", "aliyun", "azure", ""])),
                          ("--status-dir", path_text(files))):
        if data.draw(st.booleans()):
            args += [opt, data.draw(strategy)]
    args += ["--", "true"]
    check(args)


def test_fuzz_run_needs_a_posix_true() -> None:
    """The run fuzz uses `true` as its job: make its absence a clear failure, not a fuzz mystery."""
    import shutil

    assert shutil.which("true") is not None, sys.platform
