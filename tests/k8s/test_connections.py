"""The controller's API client against a real HTTP server that sheds load like API Priority and
Fairness: a write answered 429 with ``Retry-After`` is sent again only after the time asked; a
wait longer than the client's bound, a 429 without the header, and a 500 reach the caller at
once; the fourth 429 in a row reaches the caller as the server's status."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpufleet.k8s.watch.connections import RETRY_AFTER_MAX_S, client_with_pool


class Shedding(ThreadingHTTPServer):
    """Answers the first ``refusals`` POSTs with ``status`` (and ``Retry-After: retry_after``
    when given), then 201; records when each POST arrived."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.refusals, self.status, self.retry_after = 0, 429, "1"
        self.arrivals: list[float] = []


class Handler(BaseHTTPRequestHandler):
    server: Shedding

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        srv = self.server
        srv.arrivals.append(time.monotonic())
        if len(srv.arrivals) <= srv.refusals:
            body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                               "reason": "TooManyRequests", "code": srv.status}).encode()
            self.send_response(srv.status)
            if srv.retry_after:
                self.send_header("Retry-After", srv.retry_after)
        else:
            body = b'{"kind": "Binding"}'
            self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def server() -> Iterator[Shedding]:
    srv = Shedding()
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def bind(srv: Shedding) -> int:
    cfg = client.Configuration()
    cfg.host = f"http://127.0.0.1:{srv.server_address[1]}"
    api = client_with_pool(client.ApiClient(cfg), 4)
    resp = client.CoreV1Api(api).create_namespaced_binding(
        "ns", {"metadata": {"name": "p"}, "target": {"name": "n"}}, _preload_content=False)
    return int(resp.status)


# (refusals, status, Retry-After, POSTs the server sees, minimum seconds between them, the
# status the caller gets: 201 or the refusal as an ApiException)
CASES = [
    (1, 429, "1", 2, 1.0, 201),  # waited the second asked, then bound
    (1, 503, "1", 2, 1.0, 201),  # an API server not ready asks the same
    (2, 429, "1", 2, 1.0, 429),  # one retry, then the caller's (its pod's write backoff)
    (9, 503, "1", 2, 1.0, 503),  # not a loop without end
    (1, 429, "2", 2, 2.0, 201),  # the longest wait the client holds a writing thread for
    (1, 429, str(int(RETRY_AFTER_MAX_S) + 1), 1, 0.0, 429),  # longer: the caller's
    (1, 429, "", 1, 0.0, 429),  # no Retry-After: a POST is not retried
    (1, 500, "1", 1, 0.0, 500),  # a 500 may have acted: a POST is never sent twice
]


@pytest.mark.parametrize(("refusals", "status", "retry_after", "posts", "gap_s", "got"), CASES)
def test_a_refused_write_waits_the_time_the_server_asks(
        server: Shedding, refusals: int, status: int, retry_after: str, posts: int,
        gap_s: float, got: int) -> None:
    server.refusals, server.status, server.retry_after = refusals, status, retry_after
    if got == 201:
        assert bind(server) == 201
    else:
        with pytest.raises(ApiException) as err:
            bind(server)
        assert err.value.status == got
    assert len(server.arrivals) == posts
    gaps = [b - a for a, b in zip(server.arrivals, server.arrivals[1:], strict=False)]
    assert all(g >= gap_s * 0.95 for g in gaps), gaps
