"""How many HTTPS connections a Kubernetes client keeps, sized to the threads that share it.

The Python client keeps ``cpu_count() * 5`` pooled connections per API server (10 on a 2-core
machine). More threads than that calling at once — the applier's workers, the informers' open
watches, the Lease elector — and urllib3 opens a fresh connection for each extra call and
discards it afterwards, so every such request pays a TLS handshake with a client certificate:
profiling the k8s-packing benchmark found 30 % of the process in ``do_handshake``. client-go
multiplexes one HTTP/2 connection instead; here each client gets enough pooled connections
for its threads, and the controller its own client so it never competes with its embedder's.
"""

from __future__ import annotations

import copy
from typing import Any, Self

from urllib3.exceptions import MaxRetryError, ResponseError
from urllib3.util.retry import Retry

# Threads besides the applier's workers that hold or use a connection: two informer watches
# (held open), their re-lists, the Lease elector, a refusal's event — with room to spare.
BASE_CONNECTIONS = 8


# The longest Retry-After the client waits out itself, once per request; a longer one, or a
# second refusal, reaches the caller as the error, and the pod's write backoff
# (control.write_backoff) takes over. Kept short because the leader checks its lease before a
# write, not during the client's wait: a write must leave well within the margin between the
# renew deadline and the lease duration (5 s by default), after which another replica may lead.
RETRY_AFTER_MAX_S = 2.0
RETRY_AFTER_TIMES = 1
RETRY_AFTER_CODES = frozenset({429, 503})


class RetryAfter(Retry):
    """urllib3's retries (three, connection and idempotent-read errors as before) where a 429
    or 503 carrying ``Retry-After`` — API Priority and Fairness shedding load, an API server
    not ready — is retried for every verb, writes included, after the time the server asked,
    as client-go does: the server refused the request unread, so sending it again cannot act
    twice. Without this a rejected bind or status write returned at once, and the controller's
    next cycle — woken by the error — sent it again within milliseconds, ignoring the
    server's request to wait."""

    def is_retry(self, method: str, status_code: int, has_retry_after: bool = False) -> bool:
        if has_retry_after and status_code in RETRY_AFTER_CODES:
            return bool(self.total and self.respect_retry_after_header)
        return super().is_retry(method, status_code, has_retry_after)

    def increment(self, method: str | None = None, url: str | None = None,
                  response: Any = None, error: Exception | None = None, _pool: Any = None,
                  _stacktrace: Any = None) -> Self:
        if response is not None and error is None and response.status in RETRY_AFTER_CODES:
            wait = self.get_retry_after(response)
            if wait is not None and wait > RETRY_AFTER_MAX_S:
                raise MaxRetryError(_pool, url, ResponseError(
                    f"Retry-After {wait:g} s is longer than {RETRY_AFTER_MAX_S:g} s"))
        return super().increment(method, url, response, error, _pool, _stacktrace)


def api_retries() -> Retry:
    """The retries of every controller client: :class:`RetryAfter` (three in all, one of them
    on a status); the last refused answer is returned, so the caller sees the server's status
    (an ``ApiException``), not a transport error."""
    return RetryAfter(total=3, status=RETRY_AFTER_TIMES, raise_on_status=False)


def client_with_pool(api: Any, connections: int) -> Any:
    """A new ``ApiClient`` with ``api``'s server and credentials, ``connections`` pooled, and
    :func:`api_retries` unless ``api`` sets its own."""
    from kubernetes import client

    cfg = copy.deepcopy(api.configuration)
    cfg.connection_pool_maxsize = max(connections, cfg.connection_pool_maxsize or 0)
    if cfg.retries is None:
        cfg.retries = api_retries()
    return client.ApiClient(cfg)


def release(resp: Any) -> None:
    """Read a raw response (a call made with ``_preload_content=False``) to its end and give
    its connection back to the pool. Unread, the response keeps the connection and the pool
    opens — and TLS-handshakes — a new one for the next call: a py-spy profile of the
    controller during the 3,000-pod benchmark found a fifth of its samples in handshakes.
    A missing response (a test double's None) is fine."""
    if resp is None:
        return
    getattr(resp, "data", None)  # reads the body
    done = getattr(resp, "release_conn", None)
    if callable(done):
        done()
