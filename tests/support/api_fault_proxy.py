"""A fault-injecting proxy in front of the lab's Kubernetes API server, for the fault tests.

It listens on ``127.0.0.1`` (plain HTTP, any free port) in a background thread of the test
process and forwards every request to the API server over TLS with the credentials of the
lab's admin kubeconfig, so a client pointed at it (:meth:`FaultProxy.kubeconfig`: no TLS, no
user) acts as the admin. Responses are streamed: a watch (``?watch=true``) is a long chunked
response, forwarded chunk by chunk as the API server sends it.

Faults, switched at run time from the test's thread (each returns at once; :meth:`clear` ends
them all):

* :meth:`drop` — abort every open watch now, abort a fraction of new requests before they are
  forwarded (the client sees its connection reset), and cut each watch forwarded while the fault
  lasts after a random lifetime;
* :meth:`stall` — hold every watch stream (open or opened meanwhile) for N seconds: no bytes
  reach the client, the API server's events wait in the proxy and follow when the stall ends;
* :meth:`inject` — answer a fraction of the requests matching (method, path regex) with an
  error of the API server's shape: a ``Status`` body, and for 429 a ``Retry-After`` header and
  ``details.retryAfterSeconds`` (as API Priority and Fairness rejects a request), without
  forwarding them;
* :meth:`slow` — delay a fraction of matching requests before forwarding them;
* :meth:`kill_on_write` — forward the first matching request, and once the API server has
  answered it with success, SIGKILL a process before the answer goes back: the process dies
  right after its write took effect, never having seen the result.

:attr:`FaultProxy.counts` tells what each fault did (a test checks that its fault happened).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import random
import re
import signal
import ssl
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web

# headers that belong to one hop, not to the request or response forwarded
HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
       "transfer-encoding", "upgrade", "host", "content-length", "authorization"}
REASONS = {409: "Conflict", 429: "TooManyRequests", 500: "InternalError",
           503: "ServiceUnavailable"}


@dataclass(slots=True)
class Rule:
    """Requests whose method matches ``method`` (a regex, e.g. ``POST|PATCH``, ``.*``: any)
    and whose path matches ``path`` (searched), taken with probability ``fraction``."""

    method: str
    path: re.Pattern[str]
    fraction: float = 1.0

    def matches(self, method: str, path: str) -> bool:
        return re.fullmatch(self.method, method) is not None and \
            self.path.search(path) is not None


@dataclass(slots=True)
class ErrorRule(Rule):
    status: int = 500
    retry_after_s: int = 1


@dataclass(slots=True)
class SlowRule(Rule):
    delay_s: float = 1.0


@dataclass(slots=True)
class KillRule(Rule):
    pid: int = 0
    fired: list[tuple[str, str, int]] = field(default_factory=list)  # (method, path, status)


def status_body(code: int, message: str, retry_after_s: int | None = None) -> bytes:
    """A ``Status`` object as the API server writes it for a failed request."""
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                            "status": "Failure", "message": message,
                            "reason": REASONS.get(code, "InternalError"), "code": code}
    if retry_after_s is not None:
        body["details"] = {"retryAfterSeconds": retry_after_s}
    return json.dumps(body).encode()


def _is_watch(request: web.Request) -> bool:
    return request.query.get("watch", "").lower() in ("true", "1")


def _upstream_tls(kubeconfig: Path) -> tuple[str, ssl.SSLContext]:
    """The API server's URL and a TLS context with its CA and the client certificate of the
    kubeconfig's current context (files or inline ``-data``)."""
    doc = yaml.safe_load(kubeconfig.read_text())
    ctx_name = doc.get("current-context")
    context = next(c["context"] for c in doc["contexts"] if c["name"] == ctx_name)
    cluster = next(c["cluster"] for c in doc["clusters"] if c["name"] == context["cluster"])
    user = next(u["user"] for u in doc["users"] if u["name"] == context["user"])
    tmp = Path(tempfile.mkdtemp(prefix="fault-proxy-"))

    def path_of(d: dict[str, Any], key: str) -> str:
        if d.get(f"{key}-data"):
            p = tmp / key
            p.write_bytes(base64.b64decode(d[f"{key}-data"]))
            return str(p)
        return str(Path(d[key]).expanduser())

    tls = ssl.create_default_context(cafile=path_of(cluster, "certificate-authority"))
    tls.load_cert_chain(path_of(user, "client-certificate"), path_of(user, "client-key"))
    return str(cluster["server"]).rstrip("/"), tls


class FaultProxy:
    """Start with :meth:`start` (returns the port), stop with :meth:`stop`; or as a context
    manager."""

    def __init__(self, upstream_kubeconfig: Path, seed: int = 0) -> None:
        self.upstream, self._tls = _upstream_tls(upstream_kubeconfig)
        self.rng = random.Random(seed)
        self.counts: Counter[str] = Counter()
        # every request: (monotonic time, method, path — for a create ``path#name`` —, what
        # came of it: the status handed back, "dropped" or "killed")
        self.log: list[tuple[float, str, str, int | str]] = []
        self.port = 0
        self._errors: list[ErrorRule] = []
        self._slow: list[SlowRule] = []
        self._kills: list[KillRule] = []
        self._drop = 0.0
        self._drop_watch_s = 0.0
        self._stall_until = 0.0
        self._watches: dict[int, tuple[asyncio.Transport, aiohttp.ClientResponse]] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="api-fault-proxy",
                                        daemon=True)
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> int:
        self._thread.start()
        self.port = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(30)
        return self.port

    async def _start(self) -> int:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self._tls, limit=0),
            auto_decompress=False, timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))
        app = web.Application(client_max_size=64 << 20)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        return int(self._runner.addresses[0][1])

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _stop(self) -> None:
        self._cut_watches()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def __enter__(self) -> FaultProxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kubeconfig(self, path: Path) -> Path:
        """A kubeconfig at ``path`` for a client of the proxy (plain HTTP, no credentials)."""
        doc = {"apiVersion": "v1", "kind": "Config",
               "clusters": [{"name": "proxy", "cluster": {"server": self.url}}],
               "users": [{"name": "proxy", "user": {}}],
               "contexts": [{"name": "proxy", "context": {"cluster": "proxy", "user": "proxy"}}],
               "current-context": "proxy"}
        path.write_text(yaml.safe_dump(doc))
        return path

    # -- controls (called from any thread) ------------------------------------------------------
    def drop(self, fraction: float, watch_lifetime_s: float = 2.0) -> None:
        """Abort every open watch now; while on, abort ``fraction`` of new requests unanswered
        and cut each watch after a random lifetime up to ``watch_lifetime_s``."""
        self._drop, self._drop_watch_s = fraction, watch_lifetime_s
        self.cut_watches()

    def stall(self, seconds: float) -> None:
        """Hold every watch stream's bytes for ``seconds`` from now."""
        self._stall_until = time.monotonic() + seconds
        self.counts["stalls"] += 1

    def inject(self, method: str, path: str, status: int, fraction: float,
               retry_after_s: int = 1) -> None:
        """Answer ``fraction`` of the matching requests with ``status`` (not forwarded)."""
        self._errors.append(ErrorRule(method, re.compile(path), fraction, status, retry_after_s))

    def slow(self, method: str, path: str, delay_s: float, fraction: float) -> None:
        self._slow.append(SlowRule(method, re.compile(path), fraction, delay_s))

    def kill_on_write(self, method: str, path: str, pid: int) -> KillRule:
        """SIGKILL ``pid`` once, after the API server answered the first matching request
        with success and before the answer is handed back; the rule records what it fired on."""
        rule = KillRule(method, re.compile(path), 1.0, pid)
        self._kills.append(rule)
        return rule

    def clear(self) -> None:
        """End every fault (held watch streams resume at once)."""
        self._errors, self._slow, self._kills = [], [], []
        self._drop = self._drop_watch_s = 0.0
        self._stall_until = 0.0

    def cut_watches(self) -> None:
        """Abort every open watch now (a controller stopping then sees its streams end
        instead of waiting for their next event)."""
        self._loop.call_soon_threadsafe(self._cut_watches)

    # -- forwarding ---------------------------------------------------------------------------
    def _cut_watches(self) -> None:
        for transport, up in list(self._watches.values()):
            transport.abort()
            up.close()
            self.counts["watches_cut"] += 1
        self._watches.clear()

    def _hit(self, rules: list[Any], method: str, path: str) -> Any:
        for r in list(rules):
            if r.matches(method, path) and self.rng.random() < r.fraction:
                return r
        return None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        method, path = request.method, request.path
        self.counts["requests"] += 1
        body = await request.read()
        logged = path  # a create names its object in the body only: the log names it too
        if method == "POST" and body:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                logged = f"{path}#{json.loads(body)['metadata']['name']}"
        transport = request.transport
        if self._drop and self.rng.random() < self._drop and transport is not None:
            self.counts["dropped"] += 1
            self.log.append((time.monotonic(), method, logged, "dropped"))
            transport.abort()
            return web.Response(status=502)  # never reaches the client: its connection is gone
        err = self._hit(self._errors, method, path)
        if err is not None:
            self.counts[f"injected_{err.status}"] += 1
            headers = {"Content-Type": "application/json"}
            if err.status == 429:
                headers["Retry-After"] = str(err.retry_after_s)
            self.log.append((time.monotonic(), method, logged, err.status))
            return web.Response(status=err.status, headers=headers, body=status_body(
                err.status, f"injected by the fault proxy: {method} {path}",
                err.retry_after_s if err.status == 429 else None))
        slow = self._hit(self._slow, method, path)
        if slow is not None:
            self.counts["slowed"] += 1
            await asyncio.sleep(slow.delay_s)
        kill = next((k for k in self._kills if not k.fired and k.matches(method, path)), None)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        assert self._session is not None
        try:
            up = await self._session.request(method, self.upstream + str(request.rel_url),
                                             headers=headers, data=body or None,
                                             allow_redirects=False)
        except (aiohttp.ClientError, OSError) as exc:
            self.counts["upstream_errors"] += 1
            return web.Response(status=503, headers={"Content-Type": "application/json"},
                                body=status_body(503, f"fault proxy: upstream: {exc}"))
        out_headers = {k: v for k, v in up.headers.items() if k.lower() not in HOP}
        if _is_watch(request) and up.status == 200:
            self.log.append((time.monotonic(), method, logged, up.status))
            return await self._stream(request, up, out_headers)
        try:
            data = await up.read()
        finally:
            up.release()
        if kill is not None and not kill.fired and 200 <= up.status < 300:
            kill.fired.append((method, path, up.status))
            self.counts["killed"] += 1
            self.log.append((time.monotonic(), method, logged, "killed"))
            with contextlib.suppress(ProcessLookupError):
                os.kill(kill.pid, signal.SIGKILL)
            if transport is not None:
                transport.abort()
            return web.Response(status=502)
        self.log.append((time.monotonic(), method, logged, up.status))
        return web.Response(status=up.status, headers=out_headers, body=data)

    async def _stream(self, request: web.Request, up: aiohttp.ClientResponse,
                      headers: dict[str, str]) -> web.StreamResponse:
        transport = request.transport
        key = id(up)
        if transport is not None:
            self._watches[key] = (transport, up)
        timer = None
        if self._drop_watch_s and transport is not None:
            timer = self._loop.call_later(self.rng.uniform(0.2, self._drop_watch_s),
                                          self._cut_one, key)
        resp = web.StreamResponse(status=up.status, headers=headers)
        try:
            await self._held()
            await resp.prepare(request)
            async for chunk in up.content.iter_any():
                await self._held()
                await resp.write(chunk)
        except (aiohttp.ClientError, ConnectionError, OSError, asyncio.CancelledError):
            pass  # cut by a fault, the client, or the API server
        finally:
            if timer is not None:
                timer.cancel()
            self._watches.pop(key, None)
            up.close()
        return resp

    def _cut_one(self, key: int) -> None:
        got = self._watches.pop(key, None)
        if got is not None:
            got[0].abort()
            got[1].close()
            self.counts["watches_cut"] += 1

    async def _held(self) -> None:
        """Wait out a stall (re-read each time: a stall may start, or end early, meanwhile)."""
        held = False
        while (left := self._stall_until - time.monotonic()) > 0:
            held = True
            await asyncio.sleep(min(left, 0.1))
        if held:
            self.counts["stalled_streams"] += 1
