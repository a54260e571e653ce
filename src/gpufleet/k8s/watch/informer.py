"""Informer-style list+watch of one resource, keeping the objects as the API's JSON.

client-go's reflector, in miniature: list (paged) to get every object and the list's
``resourceVersion``, then watch from that version (with bookmarks, so the version keeps moving
on a quiet resource). A watch that the server answers with ``410 Gone`` — the version was
compacted away, as happens after a long disconnect — ends in a fresh list, never in a gap:
objects deleted meanwhile vanish with the new list. Objects stay raw JSON (no model
deserialisation) because thousands of pods are parsed per second in a busy cluster.

The store is read by the controller thread as a copy (:meth:`Informer.objects`); every change
sets ``changed`` so the controller's loop wakes up. :meth:`Informer.take` hands its one reader
only what changed since its last take instead, so the reader's own copy of the store, and what
it derives from the objects (the controller's parsed pods), is brought up to date by what
changed, not rebuilt from every object.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

log = logging.getLogger(__name__)

HTTP_GONE = 410
ListCall = Callable[..., Any]


class WatchExpired(Exception):
    """The server no longer has the resourceVersion we watch from (410 Gone): re-list."""


def _key(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


def list_all(list_call: ListCall, page_size: int = 500) -> tuple[list[dict[str, Any]], str | None]:
    """Every object of a list call (paged by ``limit``/``continue``) as the API's JSON, and the
    list's ``resourceVersion``."""
    items: list[dict[str, Any]] = []
    cont: str | None = None
    while True:
        kw: dict[str, Any] = {"limit": page_size, "_preload_content": False}
        if cont:
            kw["_continue"] = cont
        body = json.loads(list_call(**kw).data)
        items.extend(body.get("items") or ())
        meta = body.get("metadata") or {}
        cont = meta.get("continue")
        if not cont:
            return items, meta.get("resourceVersion")


class Informer:
    def __init__(self, name: str, list_call: ListCall, changed: threading.Event,
                 page_size: int = 500, watch_timeout_s: int = 60,
                 on_relist: Callable[[str], None] | None = None) -> None:
        self.name = name
        self._list = list_call
        self.changed = changed
        self.page_size = page_size
        self.watch_timeout_s = watch_timeout_s
        self.on_relist = on_relist
        self.resource_version: str | None = None
        self.synced = threading.Event()
        self.relists = 0
        self._store: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        # keys added, modified or deleted since the last take (None: a list replaced the store,
        # or nothing was taken yet: everything)
        self._changes: set[str] | None = None

    def objects(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._store.values())

    def take(self) -> tuple[dict[str, dict[str, Any] | None], bool]:
        """What changed since the last take: each object added or modified since, by key (None:
        deleted), and whether that is the whole store instead — the first take, or one after
        a relist (a reader then starts again from it). For one reader that keeps its own copy
        up to date with them (a second reader would take the first one's changes): no copy of
        the whole store per read."""
        with self._lock:
            if self._changes is None:
                self._changes = set()
                return dict(self._store), True
            got: dict[str, dict[str, Any] | None] = {
                k: self._store.get(k) for k in self._changes}
            self._changes = set()
            return got, False

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            return self._store.get(key)

    # -- list ---------------------------------------------------------------------------------
    def relist(self) -> None:
        listed, rv = list_all(self._list, self.page_size)
        items = {_key(obj): obj for obj in listed}
        with self._lock:
            self._store = items
            self.resource_version = rv
            self._changes = None
        self.relists += 1
        if self.on_relist is not None:
            self.on_relist(self.name)
        self.synced.set()
        self.changed.set()
        log.info("%s: listed %d objects at resourceVersion %s", self.name, len(items), rv)

    # -- watch --------------------------------------------------------------------------------
    def watch_once(self, stop: threading.Event | None = None) -> int:
        """One watch request from the current resourceVersion; returns the events applied.

        Raises :class:`WatchExpired` on 410 Gone (as an HTTP status or an ERROR event).
        """
        try:
            resp = self._list(
                watch=True, resource_version=self.resource_version, allow_watch_bookmarks=True,
                timeout_seconds=self.watch_timeout_s, _preload_content=False,
                _request_timeout=(10, self.watch_timeout_s + 30),
            )
        except ApiException as exc:
            if exc.status == HTTP_GONE:
                raise WatchExpired(str(exc.reason)) from None
            raise
        n = 0
        try:
            for line in iter_resp_lines(resp):
                if not line or line.isspace():
                    continue
                ev = json.loads(line)
                self._apply(ev)
                n += 1
                if stop is not None and stop.is_set():
                    break
        finally:
            resp.close()
            resp.release_conn()
        return n

    def _apply(self, ev: dict[str, Any]) -> None:
        kind, obj = ev.get("type"), ev.get("object") or {}
        if kind == "ERROR":
            code = obj.get("code")
            if code == HTTP_GONE:
                raise WatchExpired(obj.get("message", "410 Gone"))
            raise ApiException(status=code, reason=f"{obj.get('reason')}: {obj.get('message')}")
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        with self._lock:
            if kind in ("ADDED", "MODIFIED", "DELETED"):
                key = _key(obj)
                if kind == "DELETED":
                    self._store.pop(key, None)
                else:
                    self._store[key] = obj
                if self._changes is not None:
                    self._changes.add(key)
            if rv:
                self.resource_version = rv
        if kind != "BOOKMARK":
            self.changed.set()

    def run(
        self, stop: threading.Event, backoff_s: float = 1.0, max_backoff_s: float = 30.0
    ) -> None:
        """List, then watch until ``stop``; re-list after 410 and after any failed watch."""
        delay = backoff_s
        need_list = True
        while not stop.is_set():
            try:
                if need_list:
                    self.relist()
                    need_list = False
                self.watch_once(stop)
                delay = backoff_s
            except WatchExpired as exc:
                log.info("%s: watch expired (%s); re-listing", self.name, exc)
                need_list = True
            except (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
                if stop.is_set():
                    return  # the connection was cut because we are stopping
                log.warning("%s: list/watch failed (%s); retrying in %.0f s", self.name, exc, delay)
                need_list = True
                stop.wait(delay)
                delay = min(max_backoff_s, delay * 2)
