"""Notice watchers against a real HTTP server on 127.0.0.1 emulating the three metadata services."""

from __future__ import annotations

import socket
import time
from datetime import UTC, datetime

import pytest

from gpufleet.checkpoint import AliyunWatcher, AwsWatcher, Checkpointer, GcpWatcher, make_watcher
from gpufleet.checkpoint.notices import Notice, NoticePoller
from gpufleet.errors import InputError

T = "2030-01-02T03:04:05Z"
T_UNIX = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC).timestamp()


def test_aws_imdsv2_token_flow_and_instance_action(metadata_server) -> None:  # type: ignore[no-untyped-def]
    w = AwsWatcher(metadata_server.url)
    assert w.poll() is None and w.last_error is None
    assert metadata_server.requests[:3] == [
        ("PUT", "/latest/api/token"),
        ("GET", "/latest/meta-data/spot/instance-action"),
        ("GET", "/latest/meta-data/events/recommendations/rebalance"),
    ]
    metadata_server.aws_action = f'{{"action": "stop", "time": "{T}"}}'
    n = w.poll()
    assert n == Notice("aws", "stop", T_UNIX, metadata_server.aws_action)
    assert n.stops and n.time_left(T_UNIX - 120) == 120
    assert metadata_server.token_puts == 1  # token reused while valid


def test_aws_token_renewed_after_401(metadata_server) -> None:  # type: ignore[no-untyped-def]
    w = AwsWatcher(metadata_server.url, rebalance=False)
    assert w.poll() is None
    metadata_server.tokens.clear()  # revoke: the next GET answers 401
    metadata_server.aws_action = f'{{"action": "terminate", "time": "{T}"}}'
    n = w.poll()
    assert n is not None and n.kind == "terminate" and metadata_server.token_puts == 2


def test_aws_rebalance_is_a_save_not_a_stop(metadata_server) -> None:  # type: ignore[no-untyped-def]
    metadata_server.aws_rebalance = f'{{"noticeTime": "{T}"}}'
    n = AwsWatcher(metadata_server.url).poll()
    assert n is not None and n.kind == "rebalance" and not n.stops
    assert AwsWatcher(metadata_server.url, rebalance=False).poll() is None


def test_aws_unparseable_action_still_counts(metadata_server) -> None:  # type: ignore[no-untyped-def]
    metadata_server.aws_action = "garbage"
    n = AwsWatcher(metadata_server.url).poll()
    assert n is not None and n.kind == "terminate" and n.deadline is None


def test_aliyun_termination_time(metadata_server) -> None:  # type: ignore[no-untyped-def]
    w = AliyunWatcher(metadata_server.url)
    assert w.poll() is None
    metadata_server.aliyun_time = T
    assert w.poll() == Notice("aliyun", "terminate", T_UNIX, T)


def test_gcp_preempted_flag_gives_30_s(metadata_server) -> None:  # type: ignore[no-untyped-def]
    w = GcpWatcher(metadata_server.url, clock=lambda: 500.0)
    assert w.poll() is None
    metadata_server.gcp_preempted = True
    assert w.poll() == Notice("gcp", "preempted", 530.0, "TRUE")


@pytest.mark.parametrize("provider", ["aws", "aliyun", "gcp"])
def test_server_errors_are_not_notices(metadata_server, provider: str) -> None:  # type: ignore[no-untyped-def]
    metadata_server.fail_with = 500
    w = make_watcher(provider, metadata_server.url)
    assert w.poll() is None and w.last_error is not None and "500" in w.last_error


@pytest.mark.parametrize("provider", ["aws", "aliyun", "gcp"])
def test_unreachable_metadata_is_not_a_notice(provider: str) -> None:
    with socket.socket() as s:  # a port that was free a moment ago: connection refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    w = make_watcher(provider, f"http://127.0.0.1:{port}")
    assert w.poll() is None and w.last_error


@pytest.mark.parametrize(
    ("provider", "url", "field"),
    [("azure", None, "provider"), ("aws", "169.254.169.254", "notice-url")],
)
def test_make_watcher_rejects_bad_input(provider: str, url: str | None, field: str) -> None:
    with pytest.raises(InputError) as err:
        make_watcher(provider, url)
    assert err.value.field == field


def test_poller_reports_each_kind_once(metadata_server) -> None:  # type: ignore[no-untyped-def]
    got: list[Notice] = []
    poller = NoticePoller(AwsWatcher(metadata_server.url), got.append, interval_s=0.02).start()
    metadata_server.aws_rebalance = f'{{"noticeTime": "{T}"}}'
    deadline = time.monotonic() + 10
    while len(got) < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    metadata_server.aws_action = f'{{"action": "terminate", "time": "{T}"}}'
    while len(got) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)
    poller.stop()
    assert [n.kind for n in got] == ["rebalance", "terminate"]


@pytest.mark.parametrize("provider", ["aws", "aliyun", "gcp"])
def test_notice_in_process_stops_training_with_checkpoint(
    metadata_server, tmp_path, provider: str
) -> None:  # type: ignore[no-untyped-def]
    ck = Checkpointer(
        tmp_path,
        every_steps=10_000,
        watcher=make_watcher(provider, metadata_server.url),
        poll_interval_s=0.02,
    )
    step = 0
    with pytest.raises(SystemExit) as exc:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            step += 1
            if step == 20:
                metadata_server.aws_action = f'{{"action": "terminate", "time": "{T}"}}'
                metadata_server.aliyun_time = T
                metadata_server.gcp_preempted = True
            time.sleep(0.005)
            ck.after_step(step, {"step": step})
    assert exc.value.code == 75
    restored, _ = Checkpointer(tmp_path, handle_signals=False).load_latest()
    assert restored is not None and restored.step == step >= 20
    assert ck.status.stop_reason is not None and provider in ck.status.stop_reason


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://127.0.0.1:99999", "malformed"),  # port out of range: accepted before
        ("http://127.0.0.1:0", "port 0"),
        ("http://127.0.0.1:abc", "malformed"),
        ("http://", "no host"),
        ("http://:8080", "no host"),
        ("http://[::1", "malformed"),
        ("http://exa mple.com", "spaces"),
        ("http://x/\x00", "control"),
        ("http://x/?q=1", "query"),
        ("gopher://x", "must start with http"),
    ],
)
def test_malformed_notice_url_is_refused_up_front(url: str, why: str) -> None:
    with pytest.raises(InputError, match=why) as exc:
        make_watcher("aws", url)
    assert exc.value.field == "notice-url"


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8080", "https://md.internal/prefix/", "http://[::1]:80"]
)
def test_good_notice_urls_pass(url: str) -> None:
    assert make_watcher("gcp", url).provider == "gcp"


@pytest.mark.parametrize("interval", [float("nan"), float("inf"), 0.0, -1.0, 1e-6, 3601.0])
def test_poller_interval_is_bounded(interval: float) -> None:
    with pytest.raises(InputError, match="finite number"):
        NoticePoller(AwsWatcher("http://127.0.0.1:9"), lambda n: None, interval)


class Exploding:
    """A watcher whose poll raises what urllib raises for a URL it cannot use."""

    provider = "aws"
    last_error: str | None = None

    def __init__(self) -> None:
        self.polls = 0

    def poll(self) -> Notice | None:
        self.polls += 1
        if self.polls < 3:
            raise ValueError("bad url")  # e.g. http.client.InvalidURL
        return Notice("aws", "terminate", None, "after errors")


def test_poller_survives_exceptions_reports_them_and_still_delivers() -> None:
    got: list[Notice] = []
    problems: list[str] = []
    w = Exploding()
    poller = NoticePoller(w, got.append, 0.01, on_problem=problems.append).start()
    deadline = time.monotonic() + 10
    while not got and time.monotonic() < deadline:
        time.sleep(0.01)
    poller.stop()
    assert [n.detail for n in got] == ["after errors"]  # the thread outlived two exceptions
    assert problems[0] == "aws notice watcher: poll failed (ValueError: bad url); retrying"
    assert problems[1] == "aws notice watcher recovered"  # once per change, not per poll


def test_unreachable_metadata_is_reported_once() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    problems: list[str] = []
    w = AwsWatcher(f"http://127.0.0.1:{port}", timeout_s=0.5)
    poller = NoticePoller(w, lambda n: None, 0.01, on_problem=problems.append).start()
    deadline = time.monotonic() + 10
    while not problems and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # several more failed polls
    poller.stop()
    assert len(problems) == 1 and "cannot read notices" in problems[0]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_dead_poller_thread_is_reported_and_visible() -> None:
    class Fatal:
        provider = "aws"
        last_error = None

        def poll(self) -> Notice | None:
            raise SystemExit("not an Exception: ends the thread")

    problems: list[str] = []
    poller = NoticePoller(Fatal(), lambda n: None, 0.01, on_problem=problems.append)
    assert poller.alive  # not started yet
    poller.start()
    poller._thread.join(timeout=10)
    assert not poller.alive
    assert problems == ["aws notice watcher: stopped; preemption notices are NOT being watched"]
