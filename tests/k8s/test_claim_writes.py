"""``ClaimWriter``: a dropped connection is a failed write for the next cycle, never an error
that escapes into the scheduling loop (it once ended the loop's thread)."""

from __future__ import annotations

from http.client import RemoteDisconnected
from typing import Any

import pytest
import urllib3

from gpufleet.k8s.dra.claim_assume import ClaimAssume
from gpufleet.k8s.dra.claim_view import PodClaims
from gpufleet.k8s.schedule.claim_writes import ClaimWriter
from gpufleet.k8s.watch.ratelimit import TokenBucket

POD = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}}
CLAIM = {"metadata": {"name": "c", "namespace": "ns", "resourceVersion": "7",
                      "finalizers": ["resource.kubernetes.io/delete-protection"]},
         "status": {"allocation": {"devices": {"results": []}},
                    "reservedFor": [{"resource": "pods", "name": "p", "uid": "u1"}]}}


class Dropping:
    """A ResourceV1Api whose every call loses its connection, as a cut proxy makes it."""

    def __init__(self) -> None:
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            raise urllib3.exceptions.ProtocolError(
                "Connection aborted.", RemoteDisconnected("Remote end closed connection"))
        return call


def test_releasing_over_a_dropped_connection_is_left_to_the_next_cycle(
        caplog: pytest.LogCaptureFixture) -> None:
    api = Dropping()
    writer = ClaimWriter(api, None, ClaimAssume(), TokenBucket(100.0, 10))
    caplog.set_level("INFO", logger="gpufleet.k8s.schedule.claim_writes")
    writer.release(POD, PodClaims(claims=(CLAIM,), pinned="gone-node"))  # does not raise
    assert api.calls == 1
    assert "releasing claim c: ('Connection aborted.'" in caplog.text
