"""Client-side rate limit on API calls: client-go's token bucket (``--kube-api-qps/burst``).

The Python client has none, so a benchmark comparing gpufleet with kube-scheduler gives both the
same limit by sharing these numbers. ``take`` blocks until a token is free; ``qps <= 0`` means
no limit (the default: the controller is otherwise limited only by the API server).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class TokenBucket:
    def __init__(self, qps: float, burst: int,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.qps = qps
        self.burst = max(1, burst)
        self.tokens = float(self.burst)
        self.clock = clock
        self.sleep = sleep
        self._last = clock()
        self._lock = threading.Lock()

    def take(self) -> None:
        if self.qps <= 0:
            return
        with self._lock:
            now = self.clock()
            self.tokens = min(self.burst, self.tokens + (now - self._last) * self.qps)
            self._last = now
            self.tokens -= 1.0
            wait = -self.tokens / self.qps if self.tokens < 0 else 0.0
        if wait > 0:
            self.sleep(wait)
