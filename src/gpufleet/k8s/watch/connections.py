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
from typing import Any

# Threads besides the applier's workers that hold or use a connection: two informer watches
# (held open), their re-lists, the Lease elector, a refusal's event — with room to spare.
BASE_CONNECTIONS = 8


def client_with_pool(api: Any, connections: int) -> Any:
    """A new ``ApiClient`` with ``api``'s server and credentials and ``connections`` pooled."""
    from kubernetes import client

    cfg = copy.deepcopy(api.configuration)
    cfg.connection_pool_maxsize = max(connections, cfg.connection_pool_maxsize or 0)
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
