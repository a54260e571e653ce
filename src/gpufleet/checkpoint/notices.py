"""Preemption-notice watchers for the cloud metadata services (AWS, Aliyun, GCP).

Each watcher answers one question per ``poll()``: is there a notice right now? A notice is data
(``Notice``), "no notice" is ``None``; a metadata server that cannot be reached is neither — it is
recorded in ``last_error`` and the next poll tries again, because a transient metadata hiccup must
not stop a training job. The URL paths and headers are the providers' documented ones:

* AWS (IMDSv2): ``PUT /latest/api/token`` with ``X-aws-ec2-metadata-token-ttl-seconds``, then
  ``GET /latest/meta-data/spot/instance-action`` with ``X-aws-ec2-metadata-token``: 404 until a
  notice, then ``{"action": "terminate"|"stop"|"hibernate", "time": "...Z"}`` (2 minutes ahead).
  ``/latest/meta-data/events/recommendations/rebalance`` gives ``{"noticeTime": ...}`` earlier.
* Aliyun: ``GET /latest/meta-data/instance/spot/termination-time``: 404 until set, then an
  ISO-8601 UTC time (about 5 minutes ahead).
* GCP: ``GET /computeMetadata/v1/instance/preempted`` with ``Metadata-Flavor: Google``: ``TRUE``
  once preempted (30 seconds' notice), else ``FALSE``.
"""

from __future__ import annotations

import contextlib
import json
import math
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from gpufleet.errors import InputError

DEFAULT_POLL_S = 5.0  # AWS recommends polling instance-action every 5 seconds
# Poll interval bounds: below MIN a watcher floods the metadata service (IMDS throttles per
# instance); above MAX a 30 s GCP notice or a 2 min AWS one would be missed entirely.
MIN_POLL_S = 0.01
MAX_POLL_S = 60.0
GCP_NOTICE_S = 30.0


@dataclass(frozen=True, slots=True)
class Notice:
    provider: str
    kind: str  # terminate | stop | hibernate | preempted | rebalance
    deadline: float | None  # Unix time the instance goes away; None if the provider did not say
    detail: str

    @property
    def stops(self) -> bool:
        """A rebalance recommendation is advice to checkpoint, not a termination."""
        return self.kind != "rebalance"

    def time_left(self, now: float) -> float | None:
        return None if self.deadline is None else self.deadline - now


class Watcher(Protocol):
    provider: str
    last_error: str | None

    def poll(self) -> Notice | None: ...


def _iso_to_unix(text: str) -> float:
    return datetime.fromisoformat(text.strip()).timestamp()


class _Http:
    """urllib with a short timeout; returns (status, body) and maps 4xx/5xx to a status."""

    def __init__(self, base_url: str, timeout_s: float) -> None:
        self.base = base_url.rstrip("/")
        self.timeout_s = timeout_s

    def request(self, method: str, path: str, headers: dict[str, str]) -> tuple[int, str]:
        req = urllib.request.Request(self.base + path, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return resp.status, resp.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode("utf-8", "replace")


class AwsWatcher:
    """EC2 spot interruption notices through IMDSv2 (token flow; token renewed on 401)."""

    provider = "aws"
    DEFAULT_URL = "http://169.254.169.254"

    def __init__(
        self,
        base_url: str | None = None,
        *,
        rebalance: bool = True,
        token_ttl_s: int = 21600,
        timeout_s: float = 2.0,
    ) -> None:
        self.http = _Http(base_url or self.DEFAULT_URL, timeout_s)
        self.rebalance = rebalance
        self.token_ttl_s = token_ttl_s
        self._token: str | None = None
        self._token_expires = 0.0
        self.last_error: str | None = None

    def _get(self, path: str) -> tuple[int, str]:
        for _ in range(2):
            if self._token is None or time.monotonic() > self._token_expires:
                code, body = self.http.request(
                    "PUT",
                    "/latest/api/token",
                    {"X-aws-ec2-metadata-token-ttl-seconds": str(self.token_ttl_s)},
                )
                if code != 200 or not body:
                    raise OSError(f"IMDSv2 token request answered {code}")
                self._token = body.strip()
                self._token_expires = time.monotonic() + self.token_ttl_s * 0.9
            code, body = self.http.request("GET", path, {"X-aws-ec2-metadata-token": self._token})
            if code != 401:
                return code, body
            self._token = None  # expired or revoked: fetch a new one and retry once
        return code, body

    def poll(self) -> Notice | None:
        try:
            code, body = self._get("/latest/meta-data/spot/instance-action")
            if code == 200:
                self.last_error = None
                return self._instance_action(body)
            if code != 404:
                raise OSError(f"instance-action answered {code}")
            if self.rebalance:
                code, body = self._get("/latest/meta-data/events/recommendations/rebalance")
                if code == 200:
                    self.last_error = None
                    return self._rebalance(body)
                if code != 404:
                    raise OSError(f"rebalance answered {code}")
        except (OSError, TimeoutError) as exc:
            self.last_error = str(exc)
            return None
        self.last_error = None
        return None

    def _instance_action(self, body: str) -> Notice:
        # An unparseable 200 is still a notice: acting on it costs a checkpoint, ignoring it
        # could cost the work since the last one.
        try:
            doc = json.loads(body)
            return Notice("aws", str(doc["action"]), _iso_to_unix(doc["time"]), body.strip())
        except (ValueError, KeyError, TypeError):
            return Notice("aws", "terminate", None, f"unparseable instance-action: {body!r}")

    def _rebalance(self, body: str) -> Notice:
        return Notice("aws", "rebalance", None, body.strip())


class AliyunWatcher:
    """ECS preemptible-instance reclaim notices."""

    provider = "aliyun"
    DEFAULT_URL = "http://100.100.100.200"

    def __init__(self, base_url: str | None = None, *, timeout_s: float = 2.0) -> None:
        self.http = _Http(base_url or self.DEFAULT_URL, timeout_s)
        self.last_error: str | None = None

    def poll(self) -> Notice | None:
        try:
            code, body = self.http.request(
                "GET", "/latest/meta-data/instance/spot/termination-time", {}
            )
        except (OSError, TimeoutError) as exc:
            self.last_error = str(exc)
            return None
        if code == 404:
            self.last_error = None
            return None
        if code != 200:
            self.last_error = f"termination-time answered {code}"
            return None
        self.last_error = None
        try:
            deadline: float | None = _iso_to_unix(body)
        except ValueError:
            deadline = None
        return Notice("aliyun", "terminate", deadline, body.strip())


class GcpWatcher:
    """GCE spot/preemptible VMs: ``instance/preempted`` turns TRUE about 30 s before the stop."""

    provider = "gcp"
    DEFAULT_URL = "http://metadata.google.internal"

    def __init__(
        self,
        base_url: str | None = None,
        *,
        timeout_s: float = 2.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.http = _Http(base_url or self.DEFAULT_URL, timeout_s)
        self.clock = clock
        self.last_error: str | None = None
        self._first_seen: float | None = None

    def poll(self) -> Notice | None:
        try:
            code, body = self.http.request(
                "GET", "/computeMetadata/v1/instance/preempted", {"Metadata-Flavor": "Google"}
            )
        except (OSError, TimeoutError) as exc:
            self.last_error = str(exc)
            return None
        if code != 200:
            self.last_error = f"preempted answered {code}"
            return None
        self.last_error = None
        if body.strip().upper() != "TRUE":
            return None
        if self._first_seen is None:  # GCP gives no time: count 30 s from when we first saw it
            self._first_seen = self.clock()
        return Notice("gcp", "preempted", self._first_seen + GCP_NOTICE_S, body.strip())


PROVIDERS: dict[str, type[AwsWatcher] | type[AliyunWatcher] | type[GcpWatcher]] = {
    "aws": AwsWatcher,
    "aliyun": AliyunWatcher,
    "gcp": GcpWatcher,
}


def make_watcher(provider: str, base_url: str | None = None) -> Watcher:
    """A watcher by provider name; an unknown name is an InputError listing the valid ones."""
    cls = PROVIDERS.get(provider.lower())
    if cls is None:
        raise InputError(
            f"unknown provider {provider!r}; expected one of {', '.join(PROVIDERS)}",
            field="provider",
        )
    if base_url is not None:
        check_metadata_url(base_url)
    return cls(base_url)


def check_metadata_url(url: str) -> str:
    """An http(s) base URL with a host and, if given, a port in 1..65535; else InputError.

    Checked up front because urllib only objects at the first poll, on the watcher thread,
    where a bad URL used to kill the watcher and leave the job unwatched.
    """

    def bad(why: str) -> InputError:
        return InputError(f"metadata URL {url!r} {why}", field="notice-url")

    if not url.startswith(("http://", "https://")):
        raise bad("must start with http:// or https://")
    if any(c.isspace() or not c.isprintable() for c in url):
        raise bad("contains spaces or control characters")
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise bad(f"is malformed ({exc})") from None
    if not parts.hostname:
        raise bad("has no host")
    if port == 0:
        raise bad("has port 0; expected 1..65535")
    if parts.query or parts.fragment:
        raise bad("must be a base URL without ?query or #fragment")
    try:
        parts.hostname.encode("idna")
    except UnicodeError:
        raise bad("has an invalid host name") from None
    return url


def check_poll_interval(
    seconds: float, field: str = "poll", name: str = "poll interval"
) -> float:
    """A finite poll interval within [MIN_POLL_S, MAX_POLL_S] (nan used to mean "no wait")."""
    if not (math.isfinite(seconds) and MIN_POLL_S <= seconds <= MAX_POLL_S):
        raise InputError(
            f"{name} must be > 0 s: a finite number from {MIN_POLL_S:g} to "
            f"{MAX_POLL_S:g} s, got {seconds}",
            field=field,
        )
    return seconds


class NoticePoller:
    """Polls a watcher on a daemon thread and calls ``on_notice`` for each new kind of notice.

    The thread must outlive anything a poll can throw: an exception from the watcher or from
    ``on_notice`` is reported through ``on_problem`` (once per distinct message) and polling goes
    on; so is the watcher's ``last_error`` when it starts failing (metadata unreachable) and when
    it recovers. Were the thread to end anyway, ``alive`` turns false and the owner can say so.
    """

    def __init__(
        self,
        watcher: Watcher,
        on_notice: Callable[[Notice], None],
        interval_s: float = DEFAULT_POLL_S,
        on_problem: Callable[[str], None] | None = None,
    ) -> None:
        check_poll_interval(interval_s, field="interval")
        self.watcher = watcher
        self.on_notice = on_notice
        self.on_problem = on_problem
        self.interval_s = interval_s
        self.problem: str | None = None  # the latest unreported-or-reported trouble, if any
        # True after a poll that read the metadata service, False after one that could not: a
        # node agent's readiness (k8s/disruption/agent.py)
        self.reading = False
        self._stop = threading.Event()
        self._seen: set[str] = set()
        self._thread = threading.Thread(target=self._run, name="gpufleet-notice", daemon=True)

    @property
    def alive(self) -> bool:
        """True while polling (or not yet started, or stopped on request)."""
        return self._stop.is_set() or not self._thread.ident or self._thread.is_alive()

    def start(self) -> NoticePoller:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def _report(self, problem: str | None) -> None:
        if problem == self.problem:
            return
        self.problem = problem
        if self.on_problem is not None:
            with contextlib.suppress(Exception):
                self.on_problem(
                    f"{self.watcher.provider} notice watcher recovered"
                    if problem is None
                    else f"{self.watcher.provider} notice watcher: {problem}"
                )

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    notice = self.watcher.poll()
                    if notice is not None and notice.kind not in self._seen:
                        self._seen.add(notice.kind)
                        self.on_notice(notice)
                    err = getattr(self.watcher, "last_error", None)
                    self.reading = err is None
                    self._report(None if err is None else f"cannot read notices ({err}); retrying")
                except Exception as exc:
                    self.reading = False
                    self._report(f"poll failed ({type(exc).__name__}: {exc}); retrying")
                self._stop.wait(self.interval_s)
        finally:
            if not self._stop.is_set():  # only a BaseException gets here: say so before dying
                self._report("stopped; preemption notices are NOT being watched")
