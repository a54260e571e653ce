"""A real browser for tests: Debian's chromium, headless, driven over the Chrome DevTools
Protocol (CDP) with websocket-client.

:func:`open_page` loads a URL in a fresh profile and returns a :class:`Page`: what the page
logged as errors (uncaught exceptions, ``console.error``, failed loads) and ``evaluate`` for a
JavaScript expression's JSON value. Without chromium the test skips, except under CI (``CI``
set), where it fails naming the package, as the live tests do.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import websocket

CANDIDATES = ("chromium", "chromium-browser", "google-chrome")
LISTENING = re.compile(r"DevTools listening on (ws://\S+)")


def chromium() -> str:
    """The browser's path; skips (fails under CI) when none is installed."""
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    reason = "no chromium on PATH: `apt-get install chromium` (make system-deps does)"
    if os.environ.get("CI"):
        pytest.fail(f"CI runs every test: {reason}")
    pytest.skip(reason)


@dataclass
class Page:
    ws: websocket.WebSocket
    session: str
    errors: list[str] = field(default_factory=list)
    _next: int = 0

    def send(self, method: str, params: dict[str, Any] | None = None,
             timeout_s: float = 30.0) -> dict[str, Any]:
        """One CDP command on the page's session; its result (events meanwhile recorded)."""
        self._next += 1
        mine = self._next
        self.ws.send(json.dumps({"id": mine, "method": method, "params": params or {},
                                 "sessionId": self.session}))
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            msg = self._recv(end)
            if msg.get("id") == mine:
                if "error" in msg:
                    raise AssertionError(f"{method}: {msg['error']}")
                return dict(msg.get("result") or {})
        raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {method}")

    def wait_event(self, method: str, timeout_s: float = 30.0) -> dict[str, Any]:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            msg = self._recv(end)
            if msg.get("method") == method:
                return dict(msg.get("params") or {})
        raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {method}")

    def _recv(self, end: float) -> dict[str, Any]:
        self.ws.settimeout(max(0.1, end - time.monotonic()))
        msg = json.loads(self.ws.recv())
        self._record(msg)
        return dict(msg)

    def _record(self, msg: dict[str, Any]) -> None:
        method, p = msg.get("method"), msg.get("params") or {}
        if method == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails") or {}
            self.errors.append("exception: " + str((d.get("exception") or {}).get(
                "description") or d.get("text")))
        elif method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            self.errors.append("console.error: " + " ".join(
                str(a.get("value", a.get("description"))) for a in p.get("args") or ()))
        elif method == "Log.entryAdded" and (p.get("entry") or {}).get("level") == "error":
            self.errors.append("log: " + str(p["entry"].get("text")))

    def evaluate(self, expression: str) -> Any:
        """The JSON value of a JavaScript expression in the page."""
        res = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                             "awaitPromise": True})
        if "exceptionDetails" in res:
            raise AssertionError(f"{expression}: {res['exceptionDetails']}")
        return res["result"].get("value")


@contextmanager
def open_page(url: str, width: int = 1280, height: int = 900) -> Iterator[Page]:
    """``url`` loaded (its load event fired) in headless chromium with a fresh profile."""
    exe = chromium()
    with tempfile.TemporaryDirectory(prefix="gpufleet-browser-") as profile:
        proc = subprocess.Popen(
            [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--no-default-browser-check", "--remote-debugging-port=0",
             f"--user-data-dir={profile}", f"--window-size={width},{height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            endpoint = _endpoint(proc)
            ws = websocket.create_connection(endpoint, timeout=30, suppress_origin=True)
            try:
                yield _page(ws, url)
            finally:
                ws.close()
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def _endpoint(proc: subprocess.Popen[str], timeout_s: float = 60.0) -> str:
    """The browser's DevTools websocket, read from its stderr."""
    assert proc.stderr is not None
    end = time.monotonic() + timeout_s
    seen = []
    while time.monotonic() < end:
        line = proc.stderr.readline()
        if not line:
            if proc.poll() is not None:
                break
            continue
        seen.append(line)
        m = LISTENING.search(line)
        if m:
            return m.group(1)
    raise AssertionError("chromium did not start its DevTools endpoint:\n" + "".join(seen[-20:]))


def _page(ws: websocket.WebSocket, url: str) -> Page:
    def browser_call(i: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
        ws.send(json.dumps({"id": i, "method": method, "params": params}))
        while True:
            msg = json.loads(ws.recv())
            if msg.get("id") == i:
                if "error" in msg:
                    raise AssertionError(f"{method}: {msg['error']}")
                return dict(msg["result"])

    target = browser_call(1, "Target.createTarget", {"url": "about:blank"})["targetId"]
    session = browser_call(2, "Target.attachToTarget", {"targetId": target,
                                                         "flatten": True})["sessionId"]
    page = Page(ws, session, _next=100)
    for domain in ("Runtime", "Log", "Page"):
        page.send(f"{domain}.enable")
    page.send("Page.navigate", {"url": url})
    page.wait_event("Page.loadEventFired", 60)
    return page


def file_url(path: Path) -> str:
    return path.resolve().as_uri()
