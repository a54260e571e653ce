"""The token bucket: a burst passes at once, then calls are spaced 1/qps apart."""

from __future__ import annotations

from gpufleet.k8s.watch.ratelimit import TokenBucket


def test_burst_then_qps() -> None:
    t = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        t[0] += s

    b = TokenBucket(qps=10, burst=3, clock=lambda: t[0], sleep=sleep)
    for _ in range(3):
        b.take()
    assert slept == []
    b.take()
    b.take()
    assert [round(s, 6) for s in slept] == [0.1, 0.1]
    t[0] += 10  # idle refills only up to the burst
    for _ in range(3):
        b.take()
    assert len(slept) == 2
    TokenBucket(qps=0, burst=1, sleep=sleep).take()  # unlimited
    assert len(slept) == 2
